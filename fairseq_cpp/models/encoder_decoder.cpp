#include "fairseq_cpp/models/encoder_decoder.h"

#include <unordered_set>

#include <torch/nn/modules/embedding.h>
#include "fairseq_cpp/core/torch.h"

#include "fairseq_cpp/nn/linear.h"
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

std::vector<bool> read_by_linear_layers(const torch::nn::Module& module, const std::vector<at::Tensor>& params) {
  std::unordered_set<const void*> linear, embedding;
  for (const auto& m : module.modules(/*include_self=*/true)) {
    if (const auto* layer = dynamic_cast<const nn::LinearImpl*>(m.get())) {
      linear.insert(layer->weight.unsafeGetTensorImpl());
      if (layer->bias.defined()) linear.insert(layer->bias.unsafeGetTensorImpl());
    } else if (const auto* table = dynamic_cast<const torch::nn::EmbeddingImpl*>(m.get())) {
      embedding.insert(table->weight.unsafeGetTensorImpl());
    }
  }
  std::vector<bool> read;
  for (const at::Tensor& p : params) {
    const void* impl = p.unsafeGetTensorImpl();
    read.push_back(linear.count(impl) > 0 && embedding.count(impl) == 0);
  }
  return read;
}

int64_t count_parameters(const torch::nn::Module& module) {
  int64_t n = 0;
  for (const auto& p : unique_parameters(module)) n += p.numel();
  return n;
}

}  // namespace fairseq_cpp::models
