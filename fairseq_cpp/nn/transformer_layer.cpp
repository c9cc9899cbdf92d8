#include "fairseq_cpp/nn/transformer_layer.h"

#include <cmath>

#include "fairseq_cpp/core/torch.h"

#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/nn/dropout.h"
#include "fairseq_cpp/nn/packed_linear.h"

namespace fairseq_cpp::nn {
namespace {

torch::nn::LayerNorm make_layer_norm(int64_t dim) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim}).eps(1e-5));
}

// Post-norm applies the layer norm after the residual add, pre-norm before the block.
at::Tensor maybe_norm(torch::nn::LayerNorm& norm, const at::Tensor& x, bool normalize_before, bool before) {
  return (normalize_before == before) ? norm->forward(x) : x;
}

MultiheadAttentionOptions attention_options(const TransformerLayerOptions& o) {
  return {o.embed_dim, o.attention_heads, o.attention_dropout};
}

}  // namespace

at::Tensor activation(const std::string& name, const at::Tensor& x) {
  if (name == "relu") return torch::relu(x);
  if (name == "gelu") return torch::gelu(x);
  if (name == "gelu_accurate" || name == "gelu_fast") {
    // fairseq's tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    const double c = std::sqrt(2.0 / M_PI);
    return 0.5 * x * (1 + torch::tanh(c * (x + 0.044715 * torch::pow(x, 3))));
  }
  if (name == "tanh") return torch::tanh(x);
  if (name == "linear") return x;
  raise<UserError>("unknown activation function `{}`", name);
}

void check_activation(const std::string& name, const std::string& key) {
  for (const char* known : {"relu", "gelu", "gelu_accurate", "gelu_fast", "tanh", "linear"}) {
    if (name == known) return;
  }
  raise<UserError>("`{}` must be one of relu, gelu, gelu_accurate, gelu_fast, tanh, linear, but is `{}` instead.", key,
                   name);
}

Linear make_linear(int64_t in, int64_t out, bool bias) {
  Linear linear(in, out, bias);
  if (!initialise_parameters()) return linear;
  torch::NoGradGuard no_grad;
  torch::nn::init::xavier_uniform_(linear->weight);
  if (bias) torch::nn::init::zeros_(linear->bias);
  return linear;
}

TransformerEncoderLayerImpl::TransformerEncoderLayerImpl(const TransformerLayerOptions& options) : options_(options) {
  check_activation(options.activation_fn, "model.activation_fn");
  self_attn_ = register_module("self_attn", MultiheadAttention(attention_options(options)));
  self_attn_layer_norm_ = register_module("self_attn_layer_norm", make_layer_norm(options.embed_dim));
  fc1_ = register_module("fc1", make_linear(options.embed_dim, options.ffn_embed_dim));
  fc2_ = register_module("fc2", make_linear(options.ffn_embed_dim, options.embed_dim));
  final_layer_norm_ = register_module("final_layer_norm", make_layer_norm(options.embed_dim));
}

at::Tensor TransformerEncoderLayerImpl::forward(const at::Tensor& input, const at::Tensor& padding_mask) {
  const bool pre = options_.normalize_before;
  const bool train = is_training();
  at::Tensor residual = input;
  at::Tensor x = maybe_norm(self_attn_layer_norm_, input, pre, true);
  x = self_attn_->forward(x, x, padding_mask, at::Tensor());
  x = nn::residual_dropout(residual, x, options_.dropout, train);
  x = maybe_norm(self_attn_layer_norm_, x, pre, false);

  residual = x;
  x = maybe_norm(final_layer_norm_, x, pre, true);
  x = activation(options_.activation_fn, scoped_linear(x, fc1_->weight, fc1_->bias));
  x = nn::dropout(x, options_.activation_dropout, train);
  x = nn::residual_dropout(residual, scoped_linear(x, fc2_->weight, fc2_->bias), options_.dropout, train);
  return maybe_norm(final_layer_norm_, x, pre, false);
}

TransformerDecoderLayerImpl::TransformerDecoderLayerImpl(const TransformerLayerOptions& options) : options_(options) {
  check_activation(options.activation_fn, "model.activation_fn");
  self_attn_ = register_module("self_attn", MultiheadAttention(attention_options(options)));
  self_attn_layer_norm_ = register_module("self_attn_layer_norm", make_layer_norm(options.embed_dim));
  encoder_attn_ = register_module("encoder_attn", MultiheadAttention(attention_options(options)));
  encoder_attn_layer_norm_ = register_module("encoder_attn_layer_norm", make_layer_norm(options.embed_dim));
  fc1_ = register_module("fc1", make_linear(options.embed_dim, options.ffn_embed_dim));
  fc2_ = register_module("fc2", make_linear(options.ffn_embed_dim, options.embed_dim));
  final_layer_norm_ = register_module("final_layer_norm", make_layer_norm(options.embed_dim));
}

at::Tensor TransformerDecoderLayerImpl::forward(const at::Tensor& input, const at::Tensor& encoder_out,
                                                const at::Tensor& encoder_padding_mask,
                                                const at::Tensor& self_attn_mask, const at::Tensor& self_padding_mask,
                                                DecoderLayerCache* cache, at::Tensor* encoder_attn) {
  const bool pre = options_.normalize_before;
  const bool train = is_training();
  at::Tensor residual = input;
  at::Tensor x = maybe_norm(self_attn_layer_norm_, input, pre, true);
  x = self_attn_->forward(x, x, self_padding_mask, self_attn_mask, cache ? &cache->self_attn : nullptr, false);
  x = nn::residual_dropout(residual, x, options_.dropout, train);
  x = maybe_norm(self_attn_layer_norm_, x, pre, false);

  residual = x;
  x = maybe_norm(encoder_attn_layer_norm_, x, pre, true);
  // Through an alias, this layer's gradient of the encoder's states (its keys' and values', summed;
  // under autocast one product's) joins the other layers' as one tensor: the same sums whether the
  // layer is checkpointed (nn/checkpoint.h) or not.
  const at::Tensor states = encoder_out.defined() ? encoder_out.alias() : encoder_out;
  x = encoder_attn_->forward(x, states, encoder_padding_mask, at::Tensor(), cache ? &cache->encoder_attn : nullptr,
                             true, encoder_attn);
  x = nn::residual_dropout(residual, x, options_.dropout, train);
  x = maybe_norm(encoder_attn_layer_norm_, x, pre, false);

  residual = x;
  x = maybe_norm(final_layer_norm_, x, pre, true);
  x = activation(options_.activation_fn, scoped_linear(x, fc1_->weight, fc1_->bias));
  x = nn::dropout(x, options_.activation_dropout, train);
  x = nn::residual_dropout(residual, scoped_linear(x, fc2_->weight, fc2_->bias), options_.dropout, train);
  return maybe_norm(final_layer_norm_, x, pre, false);
}

}  // namespace fairseq_cpp::nn
