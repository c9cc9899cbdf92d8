#include "fairseq_cpp/nn/positional_embedding.h"

#include <cmath>

#include "fairseq_cpp/core/torch.h"
#include "fairseq_cpp/nn/linear.h"

namespace fairseq_cpp::nn {

at::Tensor make_positions(const at::Tensor& tokens, int64_t padding_idx) {
  at::Tensor mask = tokens.ne(padding_idx).to(torch::kInt);
  return (torch::cumsum(mask, 1).to(torch::kInt) * mask).to(torch::kLong) + padding_idx;
}

at::Tensor sinusoidal_table(int64_t num_embeddings, int64_t dim, int64_t padding_idx) {
  // Same float32 operations as fairseq, so the table matches it bit for bit.
  const int64_t half = dim / 2;
  const double step = std::log(10000.0) / static_cast<double>(half - 1);
  at::Tensor freq = torch::exp(torch::arange(half, torch::kFloat32) * -step);
  // (N, 1) * (1, half) -> (N, half)
  at::Tensor angles = torch::arange(num_embeddings, torch::kFloat32).unsqueeze(1) * freq.unsqueeze(0);
  at::Tensor table = torch::cat({torch::sin(angles), torch::cos(angles)}, 1).view({num_embeddings, -1});
  if (dim % 2 == 1) table = torch::cat({table, torch::zeros({num_embeddings, 1})}, 1);
  if (padding_idx >= 0 && padding_idx < num_embeddings) table[padding_idx].zero_();
  return table;
}

PositionalEmbeddingImpl::PositionalEmbeddingImpl(const PositionalEmbeddingOptions& options) : options_(options) {
  const int64_t rows = options.max_positions + options.padding_idx + 1;
  if (options.learned) {
    weight_ = register_parameter("weight", torch::empty({rows, options.embed_dim}));
    if (!initialise_parameters()) return;
    torch::NoGradGuard no_grad;
    torch::nn::init::normal_(weight_, 0.0, std::pow(static_cast<double>(options.embed_dim), -0.5));
    weight_[options.padding_idx].zero_();
  } else {
    weight_ = sinusoidal_table(rows, options.embed_dim, options.padding_idx);
  }
}

at::Tensor PositionalEmbeddingImpl::table_for(int64_t rows, const at::Tensor& like) {
  if (!options_.learned) {
    // Sinusoids extend to any length; follow the model's device and dtype.
    if (rows > weight_.size(0)) weight_ = sinusoidal_table(rows, options_.embed_dim, options_.padding_idx);
    if (weight_.device() != like.device() || weight_.scalar_type() != like.scalar_type()) {
      weight_ = weight_.to(like.device(), like.scalar_type());
    }
  }
  return weight_;
}

at::Tensor PositionalEmbeddingImpl::forward(const at::Tensor& tokens, int64_t step) {
  const int64_t batch = tokens.size(0);
  const auto float_like = torch::empty(
      {0},
      torch::TensorOptions().device(tokens.device()).dtype(options_.learned ? weight_.scalar_type() : torch::kFloat32));
  if (step >= 0) {
    const int64_t position = options_.padding_idx + 1 + step;
    at::Tensor table = table_for(position + 1, float_like);
    // (C) -> (B, 1, C)
    return table[position].view({1, 1, -1}).expand({batch, 1, -1});
  }
  at::Tensor positions = make_positions(tokens, options_.padding_idx);
  at::Tensor table = table_for(options_.padding_idx + 1 + tokens.size(1), float_like);
  at::Tensor out = table.index_select(0, positions.view(-1)).view({batch, tokens.size(1), -1});
  return options_.learned ? out : out.detach();
}

}  // namespace fairseq_cpp::nn
