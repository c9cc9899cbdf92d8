#pragma once
// Token position embeddings as fairseq computes them: positions count non-padding tokens from
// padding_idx + 1 (make_positions), so left-padded sentences start at the same position as unpadded
// ones. Sinusoidal (fixed, no parameters) or learned (`embed_positions.weight`).

#include <ATen/Tensor.h>
#include <torch/nn/module.h>

namespace fairseq_cpp::nn {

// tokens (B, T) -> positions (B, T): padding_idx at padding, padding_idx + 1 + k at the k-th real token.
at::Tensor make_positions(const at::Tensor& tokens, int64_t padding_idx);

// fairseq's sinusoidal table (num_embeddings, dim): first half sin, second half cos, frequencies
// 10000^(-i / (dim/2 - 1)), an odd dim gets a zero column, row padding_idx is zero. Float32.
at::Tensor sinusoidal_table(int64_t num_embeddings, int64_t dim, int64_t padding_idx);

struct PositionalEmbeddingOptions {
  int64_t max_positions = 1024;  // longest sequence (learned: rows = max_positions + padding_idx + 1)
  int64_t embed_dim = 512;       // embedding width
  int64_t padding_idx = 1;       // the dictionary's <pad>
  bool learned = false;          // learned embedding (`weight` parameter) instead of sinusoidal
};

class PositionalEmbeddingImpl : public torch::nn::Module {
 public:
  explicit PositionalEmbeddingImpl(const PositionalEmbeddingOptions& options);
  // tokens (B, T) -> (B, T, C). With `step` >= 0 (incremental decoding), returns (B, 1, C) for the
  // token at 0-based position `step` of an unpadded prefix.
  at::Tensor forward(const at::Tensor& tokens, int64_t step = -1);

 private:
  at::Tensor table_for(int64_t rows, const at::Tensor& like);

  PositionalEmbeddingOptions options_;
  at::Tensor weight_;  // learned: the parameter; sinusoidal: a cached table (not a buffer)
};
TORCH_MODULE(PositionalEmbedding);

}  // namespace fairseq_cpp::nn
