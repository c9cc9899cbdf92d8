#include "fairseq_cpp/models/encoder_decoder.h"

#include <unordered_set>

#include "fairseq_cpp/core/torch.h"

#include "fairseq_cpp/nn/log_softmax.h"

namespace fairseq_cpp::models {

at::Tensor EncoderOut::states() const { return rows.defined() ? out.index_select(0, rows) : out; }

at::Tensor EncoderOut::padding() const {
  return rows.defined() && padding_mask.defined() ? padding_mask.index_select(0, rows) : padding_mask;
}

EncoderOut EncoderDecoderModel::reorder_encoder_out(const EncoderOut& encoder_out, const at::Tensor& new_order) {
  EncoderOut reordered = encoder_out;
  if (encoder_out.out.defined())
    reordered.rows = encoder_out.rows.defined() ? encoder_out.rows.index_select(0, new_order) : new_order;
  for (auto& member : reordered.members) member = reorder_encoder_out(member, new_order);
  return reordered;
}

at::Tensor EncoderDecoderModel::log_probs(const at::Tensor& logits) {
  return nn::log_softmax_last_dim(logits.to(torch::kFloat32));
}

std::vector<at::Tensor> unique_parameters(const torch::nn::Module& module) {
  std::vector<at::Tensor> out;
  std::unordered_set<const void*> seen;
  for (const auto& p : module.parameters(true)) {
    if (seen.insert(p.unsafeGetTensorImpl()).second) out.push_back(p);
  }
  return out;
}

int64_t count_parameters(const torch::nn::Module& module) {
  int64_t n = 0;
  for (const auto& p : unique_parameters(module)) n += p.numel();
  return n;
}

}  // namespace fairseq_cpp::models
