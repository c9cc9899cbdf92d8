#include "fairseq_cpp/models/transformer.h"

#include <cmath>

#include "fairseq_cpp/core/torch.h"

#include "fairseq_cpp/config/config.h"
#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/nn/checkpoint.h"
#include "fairseq_cpp/nn/dropout.h"
#include "fairseq_cpp/nn/packed_linear.h"
#include "fairseq_cpp/nn/quantized_linear.h"

namespace fairseq_cpp::models {
namespace {

// The one place where presets are registered; each starts from another and edits fields, as
// fairseq's architecture functions do. Unset fields fall through to base_architecture's defaults.
std::map<std::string, config::ModelConfig> register_architectures() {
  std::map<std::string, config::ModelConfig> presets;
  config::ModelConfig base;  // fairseq's base_architecture: all defaults

  presets["transformer"] = base;
  presets["transformer_wmt_en_de"] = base;

  config::ModelConfig iwslt = base;  // IWSLT'14 de-en
  iwslt.encoder_embed_dim = 512;
  iwslt.encoder_ffn_embed_dim = 1024;
  iwslt.encoder_attention_heads = 4;
  iwslt.encoder_layers = 6;
  iwslt.decoder_embed_dim = 512;
  iwslt.decoder_ffn_embed_dim = 1024;
  iwslt.decoder_attention_heads = 4;
  iwslt.decoder_layers = 6;
  presets["transformer_iwslt_de_en"] = iwslt;

  config::ModelConfig big = base;  // "Attention Is All You Need" (Vaswani et al., 2017), big
  big.encoder_embed_dim = 1024;
  big.encoder_ffn_embed_dim = 4096;
  big.encoder_attention_heads = 16;
  big.encoder_normalize_before = false;
  big.decoder_embed_dim = 1024;
  big.decoder_ffn_embed_dim = 4096;
  big.decoder_attention_heads = 16;
  big.dropout = 0.3;
  presets["transformer_vaswani_wmt_en_de_big"] = big;

  config::ModelConfig big_attn = big;  // "Scaling Neural Machine Translation" (Ott et al., 2018)
  big_attn.attention_dropout = 0.1;
  presets["transformer_wmt_en_de_big"] = big_attn;

  config::ModelConfig tiny = base;  // newer fairseq's transformer_tiny, for CPU demos
  tiny.encoder_embed_dim = 64;
  tiny.encoder_ffn_embed_dim = 64;
  tiny.encoder_layers = 2;
  tiny.encoder_attention_heads = 2;
  tiny.decoder_layers = 2;
  tiny.decoder_attention_heads = 2;
  presets["transformer_tiny"] = tiny;
  return presets;
}

template <typename T>
T pick(const std::optional<T>& user, const std::optional<T>& preset, T fallback) {
  if (user) return *user;
  if (preset) return *preset;
  return fallback;
}

torch::nn::Embedding make_embedding(int64_t rows, int64_t dim, int64_t padding_idx) {
  torch::nn::EmbeddingOptions options = torch::nn::EmbeddingOptions(rows, dim).padding_idx(padding_idx);
  if (!nn::initialise_parameters()) {
    torch::nn::Embedding embedding(options._weight(torch::empty({rows, dim})));
    embedding->options._weight(at::Tensor());  // not kept: a clone() would share it
    return embedding;
  }
  torch::nn::Embedding embedding(options);
  torch::NoGradGuard no_grad;
  torch::nn::init::normal_(embedding->weight, 0.0, std::pow(static_cast<double>(dim), -0.5));
  embedding->weight[padding_idx].zero_();
  return embedding;
}

nn::TransformerLayerOptions layer_options(const TransformerOptions& o, bool decoder) {
  nn::TransformerLayerOptions l;
  l.embed_dim = decoder ? o.decoder_embed_dim : o.encoder_embed_dim;
  l.ffn_embed_dim = decoder ? o.decoder_ffn_embed_dim : o.encoder_ffn_embed_dim;
  l.attention_heads = decoder ? o.decoder_attention_heads : o.encoder_attention_heads;
  l.normalize_before = decoder ? o.decoder_normalize_before : o.encoder_normalize_before;
  l.dropout = o.dropout;
  l.attention_dropout = o.attention_dropout;
  l.activation_dropout = o.activation_dropout;
  l.activation_fn = o.activation_fn;
  return l;
}

torch::nn::LayerNorm make_layer_norm(int64_t dim) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim}).eps(1e-5));
}

// Layers run through nn::checkpoint while training with gradients, when the model asks for it.
bool checkpointing(const TransformerOptions& options, const torch::nn::Module& stack) {
  return options.checkpoint_activations && stack.is_training() && at::GradMode::is_enabled();
}

// The embedding of `tokens`: its module's lookup, or the rows of a weight that generation packed
// or quantized in place (shared with the output projection: nn::packed_rows, nn::int8_rows).
at::Tensor embed(torch::nn::Embedding& embedding, const at::Tensor& tokens) {
  const at::Tensor& weight = embedding->weight;
  if (weight.numel() != 0) return embedding->forward(tokens);
  return nn::packed_in_place(weight) ? nn::packed_rows(weight, tokens) : nn::int8_rows(weight, tokens);
}

}  // namespace

const std::map<std::string, config::ModelConfig>& architectures() {
  static const std::map<std::string, config::ModelConfig> presets = register_architectures();
  return presets;
}

TransformerOptions resolve_transformer_options(const config::ModelConfig& m, const config::TaskConfig& task) {
  const auto& presets = architectures();
  auto it = presets.find(m.arch);
  if (it == presets.end()) {
    std::vector<std::string> names;
    std::string listed;
    for (const auto& [name, preset] : presets) {
      names.push_back(name);
      listed += (listed.empty() ? "" : ", ") + name;
    }
    std::string near = config::nearest(m.arch, names);
    raise<UserError>("`model.arch` must be one of {}, but is `{}` instead.{}", listed, m.arch,
                     near.empty() ? "" : fmt::format(" Did you mean `{}`?", near));
  }
  const config::ModelConfig& p = it->second;
  TransformerOptions o;
  o.activation_fn = !m.activation_fn.empty() ? m.activation_fn : (!p.activation_fn.empty() ? p.activation_fn : "relu");
  o.dropout = pick(m.dropout, p.dropout, 0.1);
  o.attention_dropout = pick(m.attention_dropout, p.attention_dropout, 0.0);
  o.activation_dropout = pick(m.activation_dropout, p.activation_dropout, 0.0);
  o.encoder_embed_dim = pick<int64_t>(m.encoder_embed_dim, p.encoder_embed_dim, 512);
  o.encoder_ffn_embed_dim = pick<int64_t>(m.encoder_ffn_embed_dim, p.encoder_ffn_embed_dim, 2048);
  o.encoder_layers = pick<int64_t>(m.encoder_layers, p.encoder_layers, 6);
  o.encoder_attention_heads = pick<int64_t>(m.encoder_attention_heads, p.encoder_attention_heads, 8);
  o.encoder_normalize_before = pick(m.encoder_normalize_before, p.encoder_normalize_before, false);
  o.encoder_learned_pos = pick(m.encoder_learned_pos, p.encoder_learned_pos, false);
  o.decoder_embed_dim = pick<int64_t>(m.decoder_embed_dim, p.decoder_embed_dim, o.encoder_embed_dim);
  o.decoder_ffn_embed_dim = pick<int64_t>(m.decoder_ffn_embed_dim, p.decoder_ffn_embed_dim, o.encoder_ffn_embed_dim);
  o.decoder_layers = pick<int64_t>(m.decoder_layers, p.decoder_layers, 6);
  o.decoder_attention_heads = pick<int64_t>(m.decoder_attention_heads, p.decoder_attention_heads, 8);
  o.decoder_normalize_before = pick(m.decoder_normalize_before, p.decoder_normalize_before, false);
  o.decoder_learned_pos = pick(m.decoder_learned_pos, p.decoder_learned_pos, false);
  o.decoder_output_dim = pick<int64_t>(m.decoder_output_dim, p.decoder_output_dim, o.decoder_embed_dim);
  o.share_all_embeddings = pick(m.share_all_embeddings, p.share_all_embeddings, false);
  o.share_decoder_input_output_embed =
      o.share_all_embeddings || pick(m.share_decoder_input_output_embed, p.share_decoder_input_output_embed, false);
  o.no_scale_embedding = pick(m.no_scale_embedding, p.no_scale_embedding, false);
  o.layernorm_embedding = pick(m.layernorm_embedding, p.layernorm_embedding, false);
  o.no_token_positional_embeddings = pick(m.no_token_positional_embeddings, p.no_token_positional_embeddings, false);
  o.max_source_positions = task.max_source_positions;
  o.max_target_positions = task.max_target_positions;
  o.checkpoint_activations = m.checkpoint_activations;

  nn::check_activation(o.activation_fn, "model.activation_fn");
  auto check_heads = [](int64_t dim, int64_t heads, const char* side) {
    if (heads <= 0 || dim % heads != 0) {
      raise<UserError>("`model.{0}_embed_dim` ({1}) must be divisible by `model.{0}_attention_heads` ({2}).", side, dim,
                       heads);
    }
  };
  check_heads(o.encoder_embed_dim, o.encoder_attention_heads, "encoder");
  check_heads(o.decoder_embed_dim, o.decoder_attention_heads, "decoder");
  if (o.share_all_embeddings && o.encoder_embed_dim != o.decoder_embed_dim) {
    raise<UserError>(
        "`model.share_all_embeddings` requires `model.encoder_embed_dim` ({}) to equal `model.decoder_embed_dim` ({}).",
        o.encoder_embed_dim, o.decoder_embed_dim);
  }
  if (o.share_decoder_input_output_embed && o.decoder_output_dim != o.decoder_embed_dim) {
    raise<UserError>(
        "`model.share_decoder_input_output_embed` requires `model.decoder_output_dim` ({}) to equal "
        "`model.decoder_embed_dim` ({}).",
        o.decoder_output_dim, o.decoder_embed_dim);
  }
  return o;
}

TransformerEncoderImpl::TransformerEncoderImpl(const TransformerOptions& options, torch::nn::Embedding embed_tokens,
                                               int64_t padding_idx)
    : options_(options), padding_idx_(padding_idx) {
  const int64_t dim = options.encoder_embed_dim;
  embed_scale_ = options.no_scale_embedding ? 1.0 : std::sqrt(static_cast<double>(dim));
  embed_tokens_ = register_module("embed_tokens", std::move(embed_tokens));
  if (!options.no_token_positional_embeddings) {
    embed_positions_ = register_module(
        "embed_positions", nn::PositionalEmbedding(nn::PositionalEmbeddingOptions{
                               options.max_source_positions, dim, padding_idx, options.encoder_learned_pos}));
  }
  layers_ = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < options.encoder_layers; ++i) {
    typed_layers_.emplace_back(layer_options(options, false));
    layers_->push_back(typed_layers_.back());
  }
  if (options.encoder_normalize_before) layer_norm_ = register_module("layer_norm", make_layer_norm(dim));
  if (options.layernorm_embedding) layernorm_embedding_ = register_module("layernorm_embedding", make_layer_norm(dim));
}

EncoderOut TransformerEncoderImpl::forward(const at::Tensor& src_tokens) {
  at::Tensor x = embed_scale_ * embed(embed_tokens_, src_tokens);  // (B, S, C)
  if (embed_positions_) x = x + embed_positions_->forward(src_tokens).to(x.scalar_type());
  if (layernorm_embedding_) x = layernorm_embedding_->forward(x);
  x = nn::dropout(x, options_.dropout, is_training());
  at::Tensor padding_mask = src_tokens.eq(padding_idx_);
  const bool recompute = checkpointing(options_, *this);
  for (auto& layer : typed_layers_) {
    if (!recompute) {
      x = layer->forward(x, padding_mask);
      continue;
    }
    auto block = [impl = layer.ptr(), padding_mask](const std::vector<at::Tensor>& in) {
      return impl->forward(in[0], padding_mask);
    };
    x = nn::checkpoint(block, {x}, layer->parameters());
  }
  if (layer_norm_) x = layer_norm_->forward(x);
  return {x, padding_mask, at::Tensor(), {}};
}

TransformerDecoderImpl::TransformerDecoderImpl(const TransformerOptions& options, torch::nn::Embedding embed_tokens,
                                               int64_t padding_idx)
    : options_(options), padding_idx_(padding_idx) {
  const int64_t dim = options.decoder_embed_dim;
  embed_scale_ = options.no_scale_embedding ? 1.0 : std::sqrt(static_cast<double>(dim));
  embed_tokens_ = register_module("embed_tokens", std::move(embed_tokens));
  if (!options.no_token_positional_embeddings) {
    embed_positions_ = register_module(
        "embed_positions", nn::PositionalEmbedding(nn::PositionalEmbeddingOptions{
                               options.max_target_positions, dim, padding_idx, options.decoder_learned_pos}));
  }
  layers_ = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < options.decoder_layers; ++i) {
    typed_layers_.emplace_back(layer_options(options, true));
    layers_->push_back(typed_layers_.back());
  }
  if (options.decoder_output_dim != dim) {
    project_out_dim_ = register_module("project_out_dim", nn::make_linear(dim, options.decoder_output_dim, false));
  }
  if (!options.share_decoder_input_output_embed) {
    const int64_t vocab = embed_tokens_->weight.size(0);
    embed_out_ = register_parameter("embed_out", torch::empty({vocab, options.decoder_output_dim}));
    torch::NoGradGuard no_grad;
    if (nn::initialise_parameters())
      torch::nn::init::normal_(embed_out_, 0.0, std::pow(static_cast<double>(options.decoder_output_dim), -0.5));
  }
  if (options.decoder_normalize_before) layer_norm_ = register_module("layer_norm", make_layer_norm(dim));
  if (options.layernorm_embedding) layernorm_embedding_ = register_module("layernorm_embedding", make_layer_norm(dim));
}

at::Tensor TransformerDecoderImpl::forward(const at::Tensor& tokens, const EncoderOut& encoder_out,
                                           IncrementalState* state) {
  return nn::scoped_linear(features(tokens, encoder_out, state), output_weight());  // (B, T, V)
}

const at::Tensor& TransformerDecoderImpl::output_weight() const {
  return options_.share_decoder_input_output_embed ? embed_tokens_->weight : embed_out_;
}

at::Tensor TransformerDecoderImpl::features(const at::Tensor& tokens, const EncoderOut& encoder_out,
                                            IncrementalState* state) {
  const bool incremental = state != nullptr;
  at::Tensor positions;
  at::Tensor input = tokens;
  if (incremental) {
    input = tokens.narrow(1, tokens.size(1) - 1, 1);  // (B, t) -> (B, 1)
    if (embed_positions_) positions = embed_positions_->forward(input, tokens.size(1) - 1);
    if (state->layers.size() != typed_layers_.size()) {
      state->layers.resize(typed_layers_.size());
      for (auto& layer : state->layers) layer.self_attn.buffers = state->buffers;
    }
  } else if (embed_positions_) {
    positions = embed_positions_->forward(tokens);
  }
  at::Tensor x = embed_scale_ * embed(embed_tokens_, input);  // (B, T, C)
  if (positions.defined()) x = x + positions.to(x.scalar_type());
  if (layernorm_embedding_) x = layernorm_embedding_->forward(x);
  x = nn::dropout(x, options_.dropout, is_training());

  at::Tensor causal;
  at::Tensor self_padding;
  if (!incremental) {
    causal = nn::causal_mask(input.size(1), input.device());
    // Always the mask, as the encoder does: asking whether any row is padded would make the host
    // wait for the device in every forward; an all-false mask leaves the scores as they are.
    self_padding = input.eq(padding_idx_);
  }
  // Once the cross-attention caches hold the projected states, the states themselves are not read.
  const bool projected = incremental && !state->layers.empty() && state->layers[0].encoder_attn.key.defined();
  const at::Tensor states = projected ? encoder_out.out : encoder_out.states();
  const at::Tensor source_padding = encoder_out.padding();
  at::Tensor attn;  // (B, 1, S): the last layer's encoder attention, averaged over heads
  const bool need_attn = incremental && state->need_attn;
  const bool recompute = !incremental && checkpointing(options_, *this);
  for (size_t i = 0; i < typed_layers_.size(); ++i) {
    const bool last = i + 1 == typed_layers_.size();
    nn::TransformerDecoderLayer& layer = typed_layers_[i];
    if (!recompute) {
      x = layer->forward(x, states, source_padding, causal, self_padding, incremental ? &state->layers[i] : nullptr,
                         need_attn && last ? &attn : nullptr);
      continue;
    }
    auto block = [impl = layer.ptr(), source_padding, causal, self_padding](const std::vector<at::Tensor>& in) {
      return impl->forward(in[0], in[1], source_padding, causal, self_padding);
    };
    x = nn::checkpoint(block, {x, states}, layer->parameters());
  }
  if (need_attn) state->attn = attn.select(1, 0);  // (B, 1, S) -> (B, S)
  if (incremental) state->steps = tokens.size(1);
  if (layer_norm_) x = layer_norm_->forward(x);
  if (project_out_dim_) x = nn::scoped_linear(x, project_out_dim_->weight);
  return x;
}

TransformerModel::TransformerModel(const TransformerOptions& options, const Vocabularies& vocabularies)
    : options_(options) {
  const int64_t pad = vocabularies.padding_idx;
  torch::nn::Embedding encoder_embed = make_embedding(vocabularies.source_size, options.encoder_embed_dim, pad);
  torch::nn::Embedding decoder_embed{nullptr};
  if (options.share_all_embeddings) {
    if (!vocabularies.joined) {
      raise<UserError>(
          "`model.share_all_embeddings` requires a joined dictionary (one dictionary for both languages, "
          "fairseq-preprocess --joined-dictionary), but the source and target dictionaries differ.");
    }
    decoder_embed = encoder_embed;
  } else {
    decoder_embed = make_embedding(vocabularies.target_size, options.decoder_embed_dim, pad);
  }
  encoder_ = register_module("encoder", TransformerEncoder(options, encoder_embed, pad));
  decoder_ = register_module("decoder", TransformerDecoder(options, decoder_embed, pad));
}

EncoderOut TransformerModel::encode(const at::Tensor& src_tokens, const at::Tensor&) {
  return encoder_->forward(src_tokens);
}

at::Tensor TransformerModel::decode(const at::Tensor& prev_output_tokens, const EncoderOut& encoder_out) {
  return decoder_->forward(prev_output_tokens, encoder_out);
}

DecoderFeatures TransformerModel::decode_features(const at::Tensor& prev_output_tokens, const EncoderOut& encoder_out) {
  return {decoder_->features(prev_output_tokens, encoder_out), decoder_->output_weight()};
}

at::Tensor TransformerModel::decode_step(const at::Tensor& prev_output_tokens, const EncoderOut& encoder_out,
                                         IncrementalState& state) {
  return decoder_->forward(prev_output_tokens, encoder_out, &state);
}

}  // namespace fairseq_cpp::models
