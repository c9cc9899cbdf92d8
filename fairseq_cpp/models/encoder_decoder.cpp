#include "fairseq_cpp/models/encoder_decoder.h"

#include <unordered_set>

#include <torch/torch.h>

namespace fairseq_cpp::models {

EncoderOut EncoderDecoderModel::reorder_encoder_out(const EncoderOut& encoder_out, const at::Tensor& new_order) {
  EncoderOut out;
  out.out = encoder_out.out.index_select(0, new_order);
  if (encoder_out.padding_mask.defined()) out.padding_mask = encoder_out.padding_mask.index_select(0, new_order);
  return out;
}

at::Tensor EncoderDecoderModel::log_probs(const at::Tensor& logits) {
  return torch::log_softmax(logits.to(torch::kFloat32), -1);
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
