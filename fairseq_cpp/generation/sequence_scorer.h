#pragma once
// fairseq's SequenceScorer (fairseq-generate --score-reference): instead of a search, the model's
// log-probability of each reference token, teacher-forced. Each sentence gets one hypothesis: the
// reference itself (ending in </s>), its positional scores, and their mean as its score.
//
//   auto hypos = score_references(model, b.src_tokens, b.src_lengths, b.prev_output_tokens, b.target, pad);
//   hypos[0][0].score   // mean log-probability of the first reference's tokens

#include <cstdint>

#include <ATen/Tensor.h>

#include "fairseq_cpp/generation/batch_search.h"
#include "fairseq_cpp/models/encoder_decoder.h"

namespace fairseq_cpp::generation {

// `target` (B, T) holds the references padded with `pad`, `prev_output_tokens` (B, T) the same
// shifted right as collated; the tensors are on the model's device. Runs without autograd, with
// the model in eval mode, or in training mode with `retain_dropout` (dropout active, as fairseq's
// --retain-dropout).
Hypotheses score_references(models::EncoderDecoderModel& model, const at::Tensor& src_tokens,
                            const at::Tensor& src_lengths, const at::Tensor& prev_output_tokens,
                            const at::Tensor& target, int64_t pad, bool retain_dropout = false);

}  // namespace fairseq_cpp::generation
