#pragma once
// fairseq's TransformerEncoderLayer and TransformerDecoderLayer: attention and FFN blocks with
// residual connections, post-norm by default (`normalize_before` = pre-norm). Parameter names are
// fairseq's: self_attn, self_attn_layer_norm, encoder_attn, encoder_attn_layer_norm, fc1, fc2,
// final_layer_norm.

#include <string>

#include <ATen/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/normalization.h>

#include "fairseq_cpp/nn/attention.h"
#include "fairseq_cpp/nn/linear.h"

namespace fairseq_cpp::nn {

// relu | gelu | gelu_accurate (tanh approximation; fairseq's gelu_fast too) | tanh | linear.
at::Tensor activation(const std::string& name, const at::Tensor& x);
// Throws UserError naming `key` when `name` is not an activation above.
void check_activation(const std::string& name, const std::string& key);

struct TransformerLayerOptions {
  int64_t embed_dim = 512;             // model width C
  int64_t ffn_embed_dim = 2048;        // FFN hidden width
  int64_t attention_heads = 8;         // heads per attention block
  bool normalize_before = false;       // pre-norm (layer norm before each block) instead of post-norm
  double dropout = 0.1;                // dropout after attention and FFN outputs
  double attention_dropout = 0.0;      // dropout on attention weights
  double activation_dropout = 0.0;     // dropout after the FFN activation
  std::string activation_fn = "relu";  // FFN activation
};

// Caches of one decoder layer for incremental decoding.
struct DecoderLayerCache {
  AttentionCache self_attn;     // grows by one position per step
  AttentionCache encoder_attn;  // the projected encoder output, computed at the first step
  void reorder(const at::Tensor& new_order) {
    self_attn.reorder(new_order);
    encoder_attn.reorder(new_order);
  }
};

class TransformerEncoderLayerImpl : public torch::nn::Module {
 public:
  explicit TransformerEncoderLayerImpl(const TransformerLayerOptions& options);
  // x (B, S, C), padding_mask (B, S) true at padding (or undefined) -> (B, S, C)
  at::Tensor forward(const at::Tensor& x, const at::Tensor& padding_mask);

 private:
  TransformerLayerOptions options_;
  MultiheadAttention self_attn_{nullptr};
  torch::nn::LayerNorm self_attn_layer_norm_{nullptr};
  Linear fc1_{nullptr};
  Linear fc2_{nullptr};
  torch::nn::LayerNorm final_layer_norm_{nullptr};
};
TORCH_MODULE(TransformerEncoderLayer);

class TransformerDecoderLayerImpl : public torch::nn::Module {
 public:
  explicit TransformerDecoderLayerImpl(const TransformerLayerOptions& options);
  // x (B, T, C) -> (B, T, C). `self_attn_mask` (T, T) causal mask (undefined when incremental),
  // `self_padding_mask` (B, T), `encoder_out` (B, S, C) with `encoder_padding_mask` (B, S).
  // `encoder_attn` (when given) receives the encoder attention's weights averaged over heads (B, T, S).
  at::Tensor forward(const at::Tensor& x, const at::Tensor& encoder_out, const at::Tensor& encoder_padding_mask,
                     const at::Tensor& self_attn_mask, const at::Tensor& self_padding_mask,
                     DecoderLayerCache* cache = nullptr, at::Tensor* encoder_attn = nullptr);

 private:
  TransformerLayerOptions options_;
  MultiheadAttention self_attn_{nullptr};
  torch::nn::LayerNorm self_attn_layer_norm_{nullptr};
  MultiheadAttention encoder_attn_{nullptr};
  torch::nn::LayerNorm encoder_attn_layer_norm_{nullptr};
  Linear fc1_{nullptr};
  Linear fc2_{nullptr};
  torch::nn::LayerNorm final_layer_norm_{nullptr};
};
TORCH_MODULE(TransformerDecoderLayer);

// fairseq's Linear: xavier_uniform weight, zero bias.
Linear make_linear(int64_t in, int64_t out, bool bias = true);

}  // namespace fairseq_cpp::nn
