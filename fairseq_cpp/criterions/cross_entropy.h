#pragma once
// fairseq's `cross_entropy` and `label_smoothed_cross_entropy` criterions over teacher-forced
// logits. Sums over non-padding target tokens; fairseq v0.9's smoothing puts eps / V on every
// vocabulary entry (the fixture was trained with it):
//   loss = (1 - eps) * nll + eps / V * sum_v(-log p_v)
// Logged losses are per token (or sentence) in base 2, as fairseq logs them.

#include <cstdint>
#include <string>
#include <utility>

#include <ATen/Tensor.h>

#include "fairseq_cpp/config/sections.h"

namespace fairseq_cpp::criterions {

struct CriterionOptions {
  std::string name = "cross_entropy";  // cross_entropy | label_smoothed_cross_entropy
  double label_smoothing = 0.0;        // epsilon; label_smoothed_cross_entropy only
  bool sentence_avg = false;           // sample_size = sentences instead of target tokens
  int64_t padding_idx = 1;             // target positions with this id are left out
  int64_t ignore_prefix_size = 0;      // leave out the first N target positions of every sentence
  bool report_accuracy = false;        // also count correctly predicted tokens (n_correct)
  // From features: logits projected this many at a time; 0 = by device (chunk_elements_for).
  int64_t chunk_elements = 0;
  // On the CPU, each chunk's loss and gradient in one pass over its rows (loss_rows.h); false:
  // LibTorch's operators, as on CUDA (the benchmarks' comparison).
  bool row_kernel = true;
};

// The logits a chunk of the projection holds on `device` with options.chunk_elements 0: 2^22 on
// the CPU (16 MiB of float32, near the caches), 2^26 on CUDA (a batch of 16k targets at a 32k
// vocabulary in 8 chunks: each chunk's dozen kernel launches and its add into the weight's
// gradient are paid per chunk, and 128-row chunks left the GPU idle between them).
int64_t chunk_elements_for(const CriterionOptions& options, c10::Device device);

CriterionOptions criterion_options(const config::CriterionConfig& criterion,
                                   const config::OptimizationConfig& optimization, int64_t padding_idx);

// Sums over one batch; add() them across batches and workers, then read the base-2 averages.
struct LossStats {
  double loss_sum = 0;      // summed training loss (natural log)
  double nll_loss_sum = 0;  // summed negative log-likelihood (natural log)
  int64_t sample_size = 0;  // the gradient's denominator: ntokens, or nsentences with sentence_avg
  int64_t ntokens = 0;      // non-padding target tokens
  int64_t nsentences = 0;   // sentences
  int64_t n_correct = 0;    // argmax == target, with report_accuracy

  void add(const LossStats& other);
  double loss() const;        // loss_sum / sample_size / ln 2
  double nll_loss() const;    // nll_loss_sum / ntokens / ln 2
  double perplexity() const;  // 2 ^ nll_loss
};

struct LossOutput {
  at::Tensor loss;      // scalar, summed; backward() on it
  at::Tensor nll_loss;  // scalar, summed
  LossStats stats;      // the same sums as numbers, plus the counts

  // Criterion::pending leaves the sums on the device, so that forward and backward run without
  // waiting for it; settle() reads them into `stats` (it waits).
  void settle();
  at::Tensor pending_sums;  // (2 or 3): loss, nll_loss[, n_correct], detached; undefined once settled
};

class Criterion {
 public:
  explicit Criterion(const CriterionOptions& options);
  // logits (B, T, V), target (B, T) -> summed losses over non-padding targets.
  LossOutput operator()(const at::Tensor& logits, const at::Tensor& target) const;
  // The same from the decoder's features (B, T, C) and the output projection's weight (V, C),
  // logits = features @ output_weight^T, without ever holding the (B, T, V) logits: they exist a
  // chunk of rows at a time, and padding rows are never projected. An undefined output_weight
  // means `features` are the logits. `matmul_dtype` bf16 or fp16: the projection's products (the
  // logits, and the gradients' A W and A^T h) take inputs rounded to it and give its precision, as
  // fairseq's half-precision output layer does; the log-softmax, the loss and the gradients' sums
  // stay float32. float32 (the default): every product in float32.
  // A target on the host with features on a device: the counts come from the host and the
  // target travels without waiting for the device.
  LossOutput operator()(const at::Tensor& features, const at::Tensor& output_weight, const at::Tensor& target,
                        c10::ScalarType matmul_dtype = c10::ScalarType::Float) const;
  // The same with the sums not yet read (LossOutput::settle): the training step's form.
  LossOutput pending(const at::Tensor& features, const at::Tensor& output_weight, const at::Tensor& target,
                     c10::ScalarType matmul_dtype = c10::ScalarType::Float) const;
  const CriterionOptions& options() const { return options_; }

 private:
  CriterionOptions options_;
};

// fairseq's label_smoothed_nll_loss on log-probabilities (N, V) and targets (N), summed over
// targets != ignore_index: returns {loss, nll_loss}.
std::pair<at::Tensor, at::Tensor> label_smoothed_nll_loss(const at::Tensor& lprobs, const at::Tensor& target,
                                                          double epsilon, int64_t ignore_index);

}  // namespace fairseq_cpp::criterions
