#pragma once
// fairseq v0.9's SequenceGenerator: batched beam search (or diverse beam search, or sampling) with
// the decoder's incremental cache. Encodes once, decodes one step at a time, reorders the cache by
// beam origin, and finalizes a hypothesis when it ends in </s>; a sentence is done with `beam`
// finished ones.
//
//   SequenceGenerator gen(options, {pad, eos, unk, vocab_size});
//   auto hypos = gen.generate(model, batch.src_tokens, batch.src_lengths);
//   hypos[0][0].tokens   // best hypothesis of the batch's first sentence, ending in </s>

#include <cstdint>
#include <utility>
#include <vector>

#include <ATen/Tensor.h>

#include "fairseq_cpp/config/sections.h"
#include "fairseq_cpp/generation/constraints.h"
#include "fairseq_cpp/generation/search.h"
#include "fairseq_cpp/models/encoder_decoder.h"

namespace fairseq_cpp::generation {

struct GeneratorOptions {
  int64_t beam = 5;                    // beam width (at most vocab_size - 1)
  double max_len_a = 0.0;              // longest output = min(a * source length + b, max positions - 1)
  int64_t max_len_b = 200;             // see max_len_a
  bool match_source_len = false;       // instead: each output has src_lengths words, then </s> (fairseq >= 0.12.3)
  int64_t min_len = 1;                 // </s> is masked before this many tokens
  bool normalize_scores = true;        // divide a hypothesis' score by length^lenpen
  double lenpen = 1.0;                 // length penalty exponent: < 1 favours shorter, > 1 longer outputs
  double unkpen = 0.0;                 // subtracted from <unk>'s log-probability at every step
  int64_t no_repeat_ngram_size = 0;    // never repeat an n-gram of this size; 0 = off
  double temperature = 1.0;            // logits are divided by it
  bool sampling = false;               // sample instead of beam search
  int64_t sampling_topk = -1;          // sample among the K most likely words; -1 = all
  double sampling_topp = -1.0;         // sample from the smallest set with this mass; < 0 = off
  int64_t diverse_beam_groups = -1;    // diverse beam search with this many groups (a divisor of beam); <= 0 = off
  double diverse_beam_strength = 0.5;  // subtracted per earlier group's candidate with the same word at a step
  uint64_t seed = 1;                   // sampling's random stream
  bool need_attn = false;              // keep each hypothesis' attention and hard alignment (--print-alignment)
  bool retain_dropout = false;         // leave the model in training mode: dropout stays active (--retain-dropout)
  bool ordered_constraints = true;     // with constraints: met in the order given (else in any order)
};

// The generation keys of the config as the generator's options.
GeneratorOptions generator_options(const config::GenerationConfig& generation, uint64_t seed);

struct Vocabulary {
  int64_t pad = 1;
  int64_t eos = 2;
  int64_t unk = 3;
  int64_t size = 0;  // target vocabulary size V
};

struct Hypothesis {
  std::vector<int64_t> tokens;           // the output, ending in </s>
  float score = 0;                       // sum of log-probabilities / length^lenpen
  std::vector<float> positional_scores;  // log-probability of each token (one per token)
  // With need_attn: row t is the last decoder layer's encoder attention, averaged over heads, at the
  // step that chose token t, over the source columns as collated (padding included): (T, S) float32.
  at::Tensor attention;
  // With need_attn: fairseq's hard alignment, one (source, target) pair per token but </s>: the
  // source token the target token attends to most, both counted from 0 without padding and </s>.
  std::vector<std::pair<int64_t, int64_t>> alignment;
};

// fairseq's extract_hard_alignment: attention (T, S) of target `tokens` (T) over `source` (S, as
// collated); the source tokens that are padding or </s> are never chosen, nor target ones aligned.
std::vector<std::pair<int64_t, int64_t>> hard_alignment(const at::Tensor& attention, const std::vector<int64_t>& source,
                                                        const std::vector<int64_t>& tokens, int64_t pad, int64_t eos);

class SequenceGenerator {
 public:
  SequenceGenerator(const GeneratorOptions& options, const Vocabulary& vocabulary);

  // src_tokens (B, S) as collated (left-padded), src_lengths (B); prefix_tokens (B, P) forces each
  // output's first P tokens (undefined = none). Returns per sentence up to `beam` hypotheses,
  // best first. `model` is put in eval mode (if it is not already: threads may share an eval-mode
  // model); runs without autograd.
  // `constraints`, when given (one entry per sentence, maybe empty), makes it lexically constrained
  // beam search (constraints.h): every output holds its sentence's constraint words.
  std::vector<std::vector<Hypothesis>> generate(models::EncoderDecoderModel& model, const at::Tensor& src_tokens,
                                                const at::Tensor& src_lengths,
                                                const at::Tensor& prefix_tokens = at::Tensor(),
                                                const std::vector<Constraints>& constraints = {}) const;

  const GeneratorOptions& options() const { return options_; }

 private:
  // The steps of generate, as fairseq2's beam search and CTranslate2's decoding split them: encode
  // and set up the search; each step reorders the cache, decodes, constrains the words, takes the
  // search strategy's candidates, finalizes the hypotheses that end, drops the sentences done and
  // advances the rest.
  struct Search;
  // The CPU copies of the hypotheses one step finalizes.
  struct Finalizing {
    at::Tensor tokens, positional, scores, attn, lengths;
  };
  Search start(models::EncoderDecoderModel& model, const at::Tensor& src_tokens, const at::Tensor& src_lengths,
               const at::Tensor& prefix_tokens, const std::vector<Constraints>& constraints) const;
  void reorder_cache(Search& s) const;
  at::Tensor decode_step(models::EncoderDecoderModel& model, Search& s, int64_t step) const;
  void constrain(const Search& s, int64_t step, at::Tensor& lprobs) const;
  Candidates candidates(Search& s, int64_t step, const at::Tensor& lprobs) const;
  std::vector<int64_t> finalize(Search& s, int64_t step, const at::Tensor& bbsz_idx, at::Tensor eos_scores) const;
  Hypothesis make_hypothesis(const Search& s, const Finalizing& f, int64_t i, int64_t step, int64_t sent,
                             int64_t unfin) const;
  static std::vector<int64_t> live_sentences(const Search& s);
  std::vector<std::pair<int64_t, int64_t>> dead_ends(const Search& s, const Candidates& cand) const;
  void give_up(Search& s, const std::vector<std::pair<int64_t, int64_t>>& dead, std::vector<int64_t>& done) const;
  void drop_sentences(Search& s, Candidates& cand, at::Tensor& eos_mask, const std::vector<int64_t>& done) const;
  void advance(Search& s, const Candidates& cand, at::Tensor& eos_mask, int64_t step) const;

  GeneratorOptions options_;
  Vocabulary vocab_;
};

}  // namespace fairseq_cpp::generation
