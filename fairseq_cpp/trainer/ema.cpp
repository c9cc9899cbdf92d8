#include "fairseq_cpp/trainer/ema.h"

#include <ATen/ATen.h>
#include "fairseq_cpp/core/torch.h"

#include <map>

#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/optim/optimizer.h"

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

void Ema::shard(const optim::Optimizer& optimizer) {
  if (initialized_) raise<OperationalError>("the EMA is sharded before its first step or restore, not after");
  const at::Tensor& flat = optimizer.flat_params();
  flat_offset_.assign(sources_.size(), -1);
  for (size_t j = 0; j < sources_.size(); ++j) {
    const at::Tensor& t = sources_[j];
    if (t.is_contiguous() && t.scalar_type() == flat.scalar_type() && t.storage().is_alias_of(flat.storage()))
      flat_offset_[j] = t.storage_offset() - flat.storage_offset();
  }
  optimizer_ = &optimizer;
}

void Ema::initialize() {
  torch::NoGradGuard no_grad;
  shadow_.assign(sources_.size(), at::Tensor());
  for (size_t j = 0; j < sources_.size(); ++j)
    if (!sharded() || flat_offset_[j] < 0)
      shadow_[j] = sources_[j].detach().to(at::kFloat, /*non_blocking=*/false, /*copy=*/true);
  if (sharded()) shadow_shard_ = optimizer_->shard_of(optimizer_->flat_params()).clone();
  initialized_ = true;
}

void Ema::step(int64_t num_updates) {
  if (!initialized()) initialize();
  decay_ = num_updates < options_.start_update ? 0.0 : options_.decay;
  if (++counter_ < options_.update_freq) return;
  counter_ = 0;
  torch::NoGradGuard no_grad;
  // fairseq's order of operations: mul_ then add_ with alpha (the same float32 roundings), element
  // by element: a slice of the flat buffer gets what the whole tensors would.
  for (size_t j = 0; j < shadow_.size(); ++j) {
    if (!shadow_[j].defined()) continue;
    shadow_[j].mul_(decay_);
    shadow_[j].add_(sources_[j].detach().to(at::kFloat), 1.0 - decay_);
  }
  if (sharded()) {
    shadow_shard_.mul_(decay_);
    shadow_shard_.add_(optimizer_->shard_of(optimizer_->flat_params()), 1.0 - decay_);
  }
}

std::vector<at::Tensor> Ema::shadow() const {
  std::vector<at::Tensor> held;
  for (const at::Tensor& t : shadow_)
    if (t.defined()) held.push_back(t);
  if (shadow_shard_.defined()) held.push_back(shadow_shard_);
  return held;
}

at::Tensor Ema::gather_flat(const std::string& what) const {
  return optimizer_->gather_shards(shadow_shard_, "the EMA's weights " + what);
}

at::Tensor Ema::shadow_of(size_t j, const at::Tensor& flat) const {
  if (shadow_[j].defined()) return shadow_[j];
  return flat.narrow(0, flat_offset_[j], sources_[j].numel()).view(sources_[j].sizes());
}

checkpoint::TensorDict Ema::state() const {
  checkpoint::TensorDict out;
  // Sharded: gathered by every rank (they all save or none, as with the optimizer's state).
  const at::Tensor flat = sharded() && initialized() ? gather_flat("for a checkpoint").cpu() : at::Tensor();
  std::vector<at::Tensor> cpu(owners_.size());
  for (size_t i = 0; i < names_.size(); ++i) {
    const size_t j = slot_[i];
    // Before the first step, the model's own values.
    if (!cpu[j].defined())
      cpu[j] = initialized() ? shadow_of(j, flat).cpu() : sources_[j].detach().to(at::kFloat).cpu();
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
  if (sharded()) {  // this rank's slice of the whole flat shadow
    torch::NoGradGuard no_grad;
    at::Tensor flat = at::empty_like(optimizer_->flat_params());
    for (size_t j = 0; j < restored.size(); ++j) {
      if (flat_offset_[j] < 0) continue;
      flat.narrow(0, flat_offset_[j], sources_[j].numel()).copy_(restored[j].reshape({-1}));
      restored[j] = at::Tensor();
    }
    shadow_shard_ = optimizer_->shard_of(flat).clone();
  }
  shadow_ = std::move(restored);
  counter_ = counter;
  initialized_ = true;
}

EmaWeights::EmaWeights(Ema& ema) : ema_(ema) {
  if (!ema_.initialized()) return;  // no update yet: the shadow would be the model itself
  // Sharded: every rank gathers the whole shadow for the scope (validation runs on every rank).
  const at::Tensor flat = ema_.sharded() ? ema_.gather_flat("for validation") : at::Tensor();
  std::vector<at::Tensor> shadow(ema_.sources_.size());
  for (size_t j = 0; j < ema_.sources_.size(); ++j) {
    const at::Tensor& t = ema_.sources_[j];
    shadow[j] = ema_.shadow_of(j, flat);
    if (!t.sizes().equals(shadow[j].sizes()) || t.dtype() != shadow[j].dtype() || t.device() != shadow[j].device())
      raise<OperationalError>("the EMA weight `{}` does not fit the model's tensor", ema_.owners_[j]);
  }
  // set_data swaps which storage a tensor uses; every holder of the tensor (modules, optimizer)
  // sees the change, and nothing is copied. The shadow's own tensors keep their storage.
  for (size_t j = 0; j < ema_.sources_.size(); ++j) {
    own_.push_back(ema_.sources_[j].variable_data());
    ema_.sources_[j].set_data(shadow[j]);
  }
  exchanged_ = true;
}

EmaWeights::~EmaWeights() {
  if (!exchanged_) return;
  for (size_t j = 0; j < ema_.sources_.size(); ++j) ema_.sources_[j].set_data(own_[j]);
}

}  // namespace fairseq_cpp::trainer
