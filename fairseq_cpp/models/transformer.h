#pragma once
// fairseq's `transformer` model family (Vaswani et al., 2017): embeddings scaled by sqrt(C),
// sinusoidal or learned positions, N encoder and decoder layers, output projection tied to the
// decoder embedding or its own `decoder.embed_out`. State-dict keys equal fairseq's.
//
//   auto model = std::make_shared<TransformerModel>(
//       resolve_transformer_options(cfg.model, cfg.task), Vocabularies{8000, 8000, 1, true});
//   at::Tensor logits = model->forward(src_tokens, src_lengths, prev_output_tokens);  // (B, T, V)

#include <map>
#include <string>
#include <vector>

#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/normalization.h>

#include "fairseq_cpp/config/sections.h"
#include "fairseq_cpp/models/encoder_decoder.h"
#include "fairseq_cpp/nn/positional_embedding.h"
#include "fairseq_cpp/nn/transformer_layer.h"

namespace fairseq_cpp::models {

// Every hyper-parameter of the Transformer, resolved (no "unset" left).
struct TransformerOptions {
  std::string activation_fn = "relu";             // FFN activation: relu | gelu | gelu_accurate | tanh | linear
  double dropout = 0.1;                           // dropout on embeddings and block outputs
  double attention_dropout = 0.0;                 // dropout on attention weights
  double activation_dropout = 0.0;                // dropout after the FFN activation
  int64_t encoder_embed_dim = 512;                // encoder width
  int64_t encoder_ffn_embed_dim = 2048;           // encoder FFN hidden width
  int64_t encoder_layers = 6;                     // encoder layers
  int64_t encoder_attention_heads = 8;            // encoder heads
  bool encoder_normalize_before = false;          // pre-norm encoder (adds encoder.layer_norm)
  bool encoder_learned_pos = false;               // learned encoder positions
  int64_t decoder_embed_dim = 512;                // decoder width
  int64_t decoder_ffn_embed_dim = 2048;           // decoder FFN hidden width
  int64_t decoder_layers = 6;                     // decoder layers
  int64_t decoder_attention_heads = 8;            // decoder heads
  bool decoder_normalize_before = false;          // pre-norm decoder (adds decoder.layer_norm)
  bool decoder_learned_pos = false;               // learned decoder positions
  int64_t decoder_output_dim = 512;               // width before the output projection (project_out_dim if != embed)
  bool share_decoder_input_output_embed = false;  // output projection = decoder.embed_tokens
  bool share_all_embeddings = false;              // encoder, decoder and output share one embedding
  bool no_scale_embedding = false;                // embeddings not scaled by sqrt(width)
  bool layernorm_embedding = false;               // layer norm after embeddings + positions
  bool no_token_positional_embeddings = false;    // no positions at all
  int64_t max_source_positions = 1024;            // longest source, in tokens
  int64_t max_target_positions = 1024;            // longest target, in tokens
  bool checkpoint_activations = false;            // layers keep only their input; recomputed in backward
};

// The architecture presets (fairseq's register_model_architecture), each a partial ModelConfig:
// transformer (= transformer_wmt_en_de), transformer_iwslt_de_en, transformer_vaswani_wmt_en_de_big,
// transformer_wmt_en_de_big, transformer_tiny.
const std::map<std::string, config::ModelConfig>& architectures();

// cfg's set fields, else its arch preset's, else fairseq's base_architecture defaults (decoder
// sizes follow the encoder's, decoder_output_dim the decoder width). Throws UserError on an
// unknown arch (naming the nearest) or inconsistent sizes.
TransformerOptions resolve_transformer_options(const config::ModelConfig& model, const config::TaskConfig& task);

// The dictionaries' sizes as the model needs them.
struct Vocabularies {
  int64_t source_size = 0;  // entries of dict.<src>.txt with the specials
  int64_t target_size = 0;  // entries of dict.<tgt>.txt with the specials
  int64_t padding_idx = 1;  // <pad> (the same in both)
  bool joined = false;      // the two dictionaries are identical (share_all_embeddings needs it)
};

class TransformerEncoderImpl : public torch::nn::Module {
 public:
  TransformerEncoderImpl(const TransformerOptions& options, torch::nn::Embedding embed_tokens, int64_t padding_idx);
  EncoderOut forward(const at::Tensor& src_tokens);

 private:
  TransformerOptions options_;
  int64_t padding_idx_;
  double embed_scale_;
  torch::nn::Embedding embed_tokens_{nullptr};
  nn::PositionalEmbedding embed_positions_{nullptr};
  torch::nn::LayerNorm layernorm_embedding_{nullptr};
  torch::nn::ModuleList layers_{nullptr};
  std::vector<nn::TransformerEncoderLayer> typed_layers_;
  torch::nn::LayerNorm layer_norm_{nullptr};
};
TORCH_MODULE(TransformerEncoder);

class TransformerDecoderImpl : public torch::nn::Module {
 public:
  TransformerDecoderImpl(const TransformerOptions& options, torch::nn::Embedding embed_tokens, int64_t padding_idx);
  // Full: tokens (B, T) -> logits (B, T, V). Incremental (state given): only the last token of
  // `tokens` is decoded -> (B, 1, V).
  at::Tensor forward(const at::Tensor& tokens, const EncoderOut& encoder_out, IncrementalState* state = nullptr);
  // forward() without the output projection: (B, T, decoder_output_dim); logits = it @ output_weight()^T.
  at::Tensor features(const at::Tensor& tokens, const EncoderOut& encoder_out, IncrementalState* state = nullptr);
  const at::Tensor& output_weight() const;

 private:
  TransformerOptions options_;
  int64_t padding_idx_;
  double embed_scale_;
  torch::nn::Embedding embed_tokens_{nullptr};
  nn::PositionalEmbedding embed_positions_{nullptr};
  torch::nn::LayerNorm layernorm_embedding_{nullptr};
  torch::nn::ModuleList layers_{nullptr};
  std::vector<nn::TransformerDecoderLayer> typed_layers_;
  torch::nn::LayerNorm layer_norm_{nullptr};
  nn::Linear project_out_dim_{nullptr};
  at::Tensor embed_out_;
};
TORCH_MODULE(TransformerDecoder);

class TransformerModel : public EncoderDecoderModel {
 public:
  TransformerModel(const TransformerOptions& options, const Vocabularies& vocabularies);

  EncoderOut encode(const at::Tensor& src_tokens, const at::Tensor& src_lengths) override;
  at::Tensor decode(const at::Tensor& prev_output_tokens, const EncoderOut& encoder_out) override;
  DecoderFeatures decode_features(const at::Tensor& prev_output_tokens, const EncoderOut& encoder_out) override;
  at::Tensor decode_step(const at::Tensor& prev_output_tokens, const EncoderOut& encoder_out,
                         IncrementalState& state) override;
  int64_t max_source_positions() const override { return options_.max_source_positions; }
  int64_t max_target_positions() const override { return options_.max_target_positions; }
  const TransformerOptions& options() const { return options_; }

 private:
  TransformerOptions options_;
  TransformerEncoder encoder_{nullptr};
  TransformerDecoder decoder_{nullptr};
};

}  // namespace fairseq_cpp::models
