#pragma once
// One step of search as a pure function of the step's log-probabilities (fairseq's search.py):
// beam search keeps the top 2*beam candidates over beam x vocab of the cumulative scores (half may
// end in </s>); diverse beam search does so per group of hypotheses; sampling draws one
// continuation per hypothesis.
//
//   Candidates c = beam_search_step(step, lprobs.view({bsz, beam, vocab}), cumulative);
//   // c.scores (bsz, 2*beam) cumulative scores, c.tokens the words, c.beams the hypotheses they extend

#include <ATen/Tensor.h>
#include <ATen/core/Generator.h>
#include <cstdint>

namespace fairseq_cpp::generation {

struct Candidates {
  at::Tensor scores;  // (B, C) float, cumulative log-probabilities of the candidates, best first
  at::Tensor tokens;  // (B, C) int64, the word each candidate appends
  at::Tensor beams;   // (B, C) int64, the hypothesis in [0, beam) each candidate extends
};

// fairseq's BeamSearch.step. lprobs (B, K, V) are this step's log-probabilities of each hypothesis;
// cumulative (B, K) their scores so far (ignored at step 0, where only hypothesis 0 is expanded,
// all K being equal). Returns min(2K, K*V - 1) candidates per sentence; `lprobs` is not modified.
Candidates beam_search_step(int64_t step, const at::Tensor& lprobs, const at::Tensor& cumulative);

// fairseq's DiverseBeamSearch (Vijayakumar et al., 2016, "Diverse Beam Search", with the Hamming
// diversity term): hypotheses g, g + G, g + 2G, ... form group g; group g's log-probabilities lose
// `strength` for each candidate of groups < g that chose the same word at this step, and each group
// takes its own beam_search_step over its K/G hypotheses. The penalty stays in the candidates'
// scores, as in fairseq. Returns the groups' candidates interleaved: candidate i of group g is
// column i * G + g. K must be a multiple of `groups`; groups = 1 is beam_search_step.
Candidates diverse_beam_search_step(int64_t step, const at::Tensor& lprobs, const at::Tensor& cumulative,
                                    int64_t groups, double strength);

struct SamplingOptions {
  int64_t topk = -1;   // sample among the K most likely words; <= 0 = all words
  double topp = -1.0;  // sample among the smallest set of words with this probability mass; <= 0 = off
};

// fairseq's Sampling.step: one draw per hypothesis (K draws from hypothesis 0 at step 0) among
// words 2.. (never <s> or <pad>). Returns K candidates per sentence with cumulative scores;
// candidate k extends hypothesis k (0 at step 0). An undefined `generator` uses the default one.
Candidates sampling_step(int64_t step, const at::Tensor& lprobs, const at::Tensor& cumulative,
                         const SamplingOptions& options, const at::Generator& generator = at::Generator());

}  // namespace fairseq_cpp::generation
