#pragma once
// The interface every sequence-to-sequence model offers the criterion, the trainer and the
// sequence generator: encode once, then decode teacher-forced (training, validation) or one step
// at a time with a cache that beam search reorders.

#include <cstdint>
#include <memory>
#include <vector>

#include <ATen/Tensor.h>
#include <torch/nn/module.h>

#include "fairseq_cpp/nn/transformer_layer.h"

namespace fairseq_cpp::models {

// Beam search reorders the encoder output lazily: `rows` maps the decoder's batch rows to rows of
// `out` (each hypothesis to its sentence), so the states are never copied per hypothesis; a
// decoder reads them through states() and padding(), or, with an incremental cache holding the
// projected states, through the cache's own pending rows (which receive the same reorderings).
struct EncoderOut {
  at::Tensor out;           // (B, S, C) encoder states
  at::Tensor padding_mask;  // (B, S) bool, true at source padding; or undefined
  at::Tensor rows;          // (N) int64: decoder row n reads row rows[n] of out; undefined = identity
  std::vector<EncoderOut> members;  // an ensemble's: each model's own output (and `out` undefined)
  at::Tensor states() const;   // out with `rows` applied: (N, S, C)
  at::Tensor padding() const;  // padding_mask with `rows` applied: (N, S), or undefined
};

// Teacher-forced decoder output before the output projection: logits = features @ output_weight^T.
struct DecoderFeatures {
  at::Tensor features;       // (B, T, C)
  at::Tensor output_weight;  // (V, C); undefined when `features` are already the logits (B, T, V)
};

// The decoder's per-layer caches during incremental decoding; starts empty.
struct IncrementalState {
  std::vector<nn::DecoderLayerCache> layers;  // an ensemble's: each model's layers, one after the other
  std::vector<size_t> parts;                  // an ensemble's: how many of `layers` each model owns
  int64_t steps = 0;  // tokens decoded so far
  // Set by the caller that knows how long the output may get (beam search): the buffers the
  // self-attention caches take turns on; without them each step allocates its caches anew.
  std::shared_ptr<nn::CacheBuffers> buffers;
  // Set by the caller: each decode_step also leaves in `attn` the step's encoder attention of the
  // last decoder layer averaged over heads, (B, S) float32 (fairseq's need_attn / alignment_layer;
  // an ensemble's: the models' average). Off, nothing is computed.
  bool need_attn = false;
  at::Tensor attn;
  // Keeps batch rows `new_order` (B') of every cache (beam search).
  void reorder(const at::Tensor& new_order) {
    for (auto& layer : layers) layer.reorder(new_order);
  }
};

class EncoderDecoderModel : public torch::nn::Module {
 public:
  // src_tokens (B, S) left- or right-padded, src_lengths (B) -> encoder states.
  virtual EncoderOut encode(const at::Tensor& src_tokens, const at::Tensor& src_lengths) = 0;
  // Teacher-forced decoding: prev_output_tokens (B, T) -> logits (B, T, V).
  virtual at::Tensor decode(const at::Tensor& prev_output_tokens, const EncoderOut& encoder_out) = 0;
  // The same up to the output projection, for a loss that projects chunk by chunk; by default
  // the logits themselves.
  virtual DecoderFeatures decode_features(const at::Tensor& prev_output_tokens, const EncoderOut& encoder_out) {
    return {decode(prev_output_tokens, encoder_out), at::Tensor()};
  }
  // One step: prev_output_tokens (B, t) holds every token so far (only the last one is embedded);
  // returns logits (B, 1, V) for position t and extends `state`.
  virtual at::Tensor decode_step(const at::Tensor& prev_output_tokens, const EncoderOut& encoder_out,
                                 IncrementalState& state) = 0;
  // Reorders the encoder output's batch rows (beam search): composes `rows`, copies nothing.
  static EncoderOut reorder_encoder_out(const EncoderOut& encoder_out, const at::Tensor& new_order);

  // log-softmax over the vocabulary in float32 (fairseq's get_normalized_probs).
  static at::Tensor log_probs(const at::Tensor& logits);

  at::Tensor forward(const at::Tensor& src_tokens, const at::Tensor& src_lengths,
                     const at::Tensor& prev_output_tokens) {
    return decode(prev_output_tokens, encode(src_tokens, src_lengths));
  }
  DecoderFeatures forward_features(const at::Tensor& src_tokens, const at::Tensor& src_lengths,
                                   const at::Tensor& prev_output_tokens) {
    return decode_features(prev_output_tokens, encode(src_tokens, src_lengths));
  }

  virtual int64_t max_source_positions() const = 0;
  virtual int64_t max_target_positions() const = 0;
};

// Parameters without duplicates (shared embeddings appear once), in registration order.
std::vector<at::Tensor> unique_parameters(const torch::nn::Module& module);
// For each of `params`, whether it is a weight or bias of a nn::Linear of `module` and no
// embedding's: a tensor that only nn::scoped_linear reads (training's nn::LowPrecisionCopies).
std::vector<bool> read_by_linear_layers(const torch::nn::Module& module, const std::vector<at::Tensor>& params);
// Number of scalars in unique_parameters.
int64_t count_parameters(const torch::nn::Module& module);

}  // namespace fairseq_cpp::models
