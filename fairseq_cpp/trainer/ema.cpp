#include "fairseq_cpp/trainer/ema.h"

#include <ATen/ATen.h>
#include <torch/torch.h>

#include <map>

#include "fairseq_cpp/core/errors.h"

namespace fairseq_cpp::trainer {

Ema::Ema(const EmaOptions& options, const torch::nn::Module& model) : options_(options) {
  std::map<const void*, size_t> slots;
  auto bind = [&](const std::string& name, const at::Tensor& tensor) {
    auto [it, added] = slots.emplace(tensor.unsafeGetTensorImpl(), owners_.size());
    if (added) {
      owners_.push_back(name);
      sources_.push_back(tensor);
    }
    names_.push_back(name);
    slot_.push_back(it->second);
  };
  // The parameters, then the buffers (the order of checkpoint::model_state).
  for (const auto& item : model.named_parameters(true)) bind(item.key(), item.value());
  for (const auto& item : model.named_buffers(true)) bind(item.key(), item.value());
}

void Ema::initialize() {
  torch::NoGradGuard no_grad;
  shadow_.clear();
  for (const at::Tensor& t : sources_)
    shadow_.push_back(t.detach().to(at::kFloat, /*non_blocking=*/false, /*copy=*/true));
}

void Ema::step(int64_t num_updates) {
  if (!initialized()) initialize();
  decay_ = num_updates < options_.start_update ? 0.0 : options_.decay;
  if (++counter_ < options_.update_freq) return;
  counter_ = 0;
  torch::NoGradGuard no_grad;
  for (size_t j = 0; j < shadow_.size(); ++j) {
    // fairseq's order of operations: mul_ then add_ with alpha (the same float32 roundings).
    shadow_[j].mul_(decay_);
    shadow_[j].add_(sources_[j].detach().to(at::kFloat), 1.0 - decay_);
  }
}

checkpoint::TensorDict Ema::state() const {
  checkpoint::TensorDict out;
  std::vector<at::Tensor> cpu(owners_.size());
  for (size_t i = 0; i < names_.size(); ++i) {
    const size_t j = slot_[i];
    // Before the first step, the model's own values.
    if (!cpu[j].defined()) cpu[j] = initialized() ? shadow_[j].cpu() : sources_[j].detach().to(at::kFloat).cpu();
    out.insert(names_[i], cpu[j]);
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
    const at::Tensor& source = sources_[slot_[i]];
    if (!it->value().sizes().equals(source.sizes()))
      raise<DataError>("{}: the EMA weight `{}` has shape {}, the model's {}", origin, names_[i],
                       c10::str(it->value().sizes()), c10::str(source.sizes()));
    at::Tensor& r = restored[slot_[i]];
    if (!r.defined()) r = it->value().to(source.device(), at::kFloat, /*non_blocking=*/false, /*copy=*/true);
  }
  shadow_ = std::move(restored);
  counter_ = counter;
}

EmaWeights::EmaWeights(Ema& ema) : ema_(ema) {
  if (!ema_.initialized()) return;  // no update yet: the shadow would be the model itself
  for (size_t j = 0; j < ema_.sources_.size(); ++j) {
    const at::Tensor& t = ema_.sources_[j];
    const at::Tensor& s = ema_.shadow_[j];
    if (!t.sizes().equals(s.sizes()) || t.dtype() != s.dtype() || t.device() != s.device())
      raise<OperationalError>("the EMA weight `{}` does not fit the model's tensor", ema_.owners_[j]);
  }
  exchange();
  exchanged_ = true;
}

EmaWeights::~EmaWeights() {
  if (exchanged_) exchange();
}

void EmaWeights::exchange() {
  // set_data swaps which storage a tensor uses; every holder of the tensor (modules, optimizer)
  // sees the change, and nothing is copied.
  for (size_t j = 0; j < ema_.sources_.size(); ++j) {
    at::Tensor own = ema_.sources_[j].variable_data();
    ema_.sources_[j].set_data(ema_.shadow_[j]);
    ema_.shadow_[j] = own;
  }
}

}  // namespace fairseq_cpp::trainer
