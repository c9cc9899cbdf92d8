#include "fairseq_cpp/trainer/ema.h"

#include <ATen/ATen.h>
#include <torch/torch.h>

#include <map>

#include "fairseq_cpp/core/errors.h"

namespace fairseq_cpp::trainer {
namespace {

// The model's parameters, then its buffers, by name (the order of checkpoint::model_state).
std::vector<std::pair<std::string, at::Tensor>> named_tensors(const torch::nn::Module& model) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& item : model.named_parameters(true)) out.emplace_back(item.key(), item.value());
  for (const auto& item : model.named_buffers(true)) out.emplace_back(item.key(), item.value());
  return out;
}

}  // namespace

Ema::Ema(const EmaOptions& options, const torch::nn::Module& model) : options_(options) {
  std::map<const void*, size_t> slots;
  for (const auto& [name, tensor] : named_tensors(model)) {
    auto [it, added] = slots.emplace(tensor.unsafeGetTensorImpl(), owners_.size());
    if (added) {
      owners_.push_back(name);
      shapes_.push_back(tensor.sizes().vec());
      device_ = tensor.device();
    }
    names_.push_back(name);
    slot_.push_back(it->second);
  }
}

void Ema::initialize(const torch::nn::Module& model) {
  torch::NoGradGuard no_grad;
  shadow_.assign(owners_.size(), at::Tensor());
  const auto tensors = named_tensors(model);
  for (size_t i = 0; i < tensors.size(); ++i) {
    at::Tensor& s = shadow_[slot_[i]];
    if (!s.defined()) s = tensors[i].second.detach().to(at::kFloat, /*non_blocking=*/false, /*copy=*/true);
  }
}

void Ema::step(const torch::nn::Module& model, int64_t num_updates) {
  if (!initialized()) initialize(model);
  decay_ = num_updates < options_.start_update ? 0.0 : options_.decay;
  if (++counter_ < options_.update_freq) return;
  counter_ = 0;
  torch::NoGradGuard no_grad;
  const auto tensors = named_tensors(model);
  std::vector<bool> done(shadow_.size(), false);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const size_t j = slot_[i];
    if (done[j]) continue;
    done[j] = true;
    // fairseq's order of operations: mul_ then add_ with alpha (the same float32 roundings).
    shadow_[j].mul_(decay_);
    shadow_[j].add_(tensors[i].second.detach().to(at::kFloat), 1.0 - decay_);
  }
}

checkpoint::TensorDict Ema::state(const torch::nn::Module& model) const {
  checkpoint::TensorDict out;
  if (!initialized()) {
    for (const auto& [name, tensor] : named_tensors(model)) out.insert(name, tensor.detach().to(at::kFloat).cpu());
    return out;
  }
  std::vector<at::Tensor> cpu(shadow_.size());
  for (size_t i = 0; i < names_.size(); ++i) {
    at::Tensor& t = cpu[slot_[i]];
    if (!t.defined()) t = shadow_[slot_[i]].cpu();
    out.insert(names_[i], t);
  }
  return out;
}

void Ema::restore(const checkpoint::TensorDict& state, int64_t counter, const std::string& origin) {
  std::vector<at::Tensor> restored(owners_.size());
  for (size_t i = 0; i < names_.size(); ++i) {
    auto it = state.find(names_[i]);
    if (it == state.end())
      raise<DataError>("{}: the EMA weights (extra_state.ema) have no `{}`; was it trained with another model?", origin,
                       names_[i]);
    const size_t j = slot_[i];
    if (!it->value().sizes().equals(shapes_[j]))
      raise<DataError>("{}: the EMA weight `{}` has shape {}, the model's {}", origin, names_[i],
                       c10::str(it->value().sizes()), c10::str(c10::IntArrayRef(shapes_[j])));
    if (!restored[j].defined())
      restored[j] = it->value().to(device_, at::kFloat, /*non_blocking=*/false, /*copy=*/true);
  }
  shadow_ = std::move(restored);
  counter_ = counter;
}

EmaWeights::EmaWeights(Ema& ema, torch::nn::Module& model) : ema_(ema) {
  if (!ema_.initialized()) return;  // no update yet: the shadow would be the model itself
  targets_.assign(ema_.shadow_.size(), at::Tensor());
  const auto tensors = named_tensors(model);
  for (size_t i = 0; i < tensors.size(); ++i) {
    at::Tensor& t = targets_[ema_.slot_[i]];
    if (!t.defined()) t = tensors[i].second;
  }
  for (size_t j = 0; j < targets_.size(); ++j) {
    if (!targets_[j].sizes().equals(ema_.shadow_[j].sizes()) || targets_[j].dtype() != ema_.shadow_[j].dtype() ||
        targets_[j].device() != ema_.shadow_[j].device())
      raise<OperationalError>("the EMA weight `{}` does not fit the model's tensor", ema_.owners_[j]);
  }
  exchange();
}

EmaWeights::~EmaWeights() {
  if (!targets_.empty()) exchange();
}

void EmaWeights::exchange() {
  // set_data swaps which storage a tensor uses; every holder of the tensor (modules, optimizer)
  // sees the change, and nothing is copied.
  for (size_t j = 0; j < targets_.size(); ++j) {
    at::Tensor own = targets_[j].variable_data();
    targets_[j].set_data(ema_.shadow_[j]);
    ema_.shadow_[j] = own;
  }
}

}  // namespace fairseq_cpp::trainer
