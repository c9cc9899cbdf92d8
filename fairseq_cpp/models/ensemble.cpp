#include "fairseq_cpp/models/ensemble.h"

#include <algorithm>
#include <cmath>

#include "fairseq_cpp/core/torch.h"

#include "fairseq_cpp/core/errors.h"

namespace fairseq_cpp::models {

EnsembleModel::EnsembleModel(std::vector<std::shared_ptr<EncoderDecoderModel>> models) : models_(std::move(models)) {
  if (models_.empty()) raise<UserError>("an ensemble needs at least one model");
  for (size_t i = 0; i < models_.size(); ++i) register_module("model" + std::to_string(i), models_[i]);
}

EncoderOut EnsembleModel::encode(const at::Tensor& src_tokens, const at::Tensor& src_lengths) {
  EncoderOut out;
  for (auto& model : models_) out.members.push_back(model->encode(src_tokens, src_lengths));
  return out;
}

at::Tensor EnsembleModel::average(const std::vector<at::Tensor>& log_probs) {
  if (log_probs.size() == 1) return log_probs[0];
  return torch::logsumexp(torch::stack(log_probs, 0), 0) - std::log(static_cast<double>(log_probs.size()));
}

at::Tensor EnsembleModel::decode(const at::Tensor& prev_output_tokens, const EncoderOut& encoder_out) {
  std::vector<at::Tensor> log_probs;
  for (size_t i = 0; i < models_.size(); ++i)
    log_probs.push_back(EncoderDecoderModel::log_probs(models_[i]->decode(prev_output_tokens, encoder_out.members[i])));
  return average(log_probs);
}

at::Tensor EnsembleModel::decode_step(const at::Tensor& prev_output_tokens, const EncoderOut& encoder_out,
                                      IncrementalState& state) {
  // Each model decodes with its own share of the layers, moved out and back (no copies), so that
  // beam search reorders all of them as one cache.
  std::vector<at::Tensor> log_probs;
  at::Tensor attn;  // the sum of the models' attention, then their average (fairseq's avg_attn)
  std::vector<nn::DecoderLayerCache> layers;
  std::vector<size_t> parts;
  size_t offset = 0;
  int64_t steps = state.steps;
  for (size_t i = 0; i < models_.size(); ++i) {
    IncrementalState own;
    own.steps = state.steps;
    own.need_attn = state.need_attn;
    own.buffers = state.buffers;
    const size_t n = state.parts.empty() ? 0 : state.parts[i];
    std::move(state.layers.begin() + static_cast<std::ptrdiff_t>(offset),
              state.layers.begin() + static_cast<std::ptrdiff_t>(offset + n), std::back_inserter(own.layers));
    offset += n;
    log_probs.push_back(EncoderDecoderModel::log_probs(models_[i]->decode_step(prev_output_tokens, encoder_out.members[i], own)));
    if (state.need_attn) attn = attn.defined() ? attn + own.attn : own.attn;
    parts.push_back(own.layers.size());
    steps = own.steps;
    std::move(own.layers.begin(), own.layers.end(), std::back_inserter(layers));
  }
  state.layers = std::move(layers);
  state.parts = std::move(parts);
  state.steps = steps;
  if (state.need_attn) state.attn = attn / static_cast<double>(models_.size());
  return average(log_probs);
}

int64_t EnsembleModel::max_source_positions() const {
  int64_t out = INT64_MAX;
  for (const auto& m : models_) out = std::min(out, m->max_source_positions());
  return out;
}

int64_t EnsembleModel::max_target_positions() const {
  int64_t out = INT64_MAX;
  for (const auto& m : models_) out = std::min(out, m->max_target_positions());
  return out;
}

}  // namespace fairseq_cpp::models
