#include "fairseq_cpp/optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <type_traits>
#include <unordered_set>
#include <vector>

#include <ATen/Parallel.h>
#include <torch/csrc/autograd/variable.h>
#include "fairseq_cpp/core/torch.h"

#include "fairseq_cpp/core/errors.h"

namespace fairseq_cpp::optim {
namespace {

std::vector<at::Tensor> zeros_like_all(const std::vector<at::Tensor>& params) {
  std::vector<at::Tensor> out;
  out.reserve(params.size());
  for (const auto& p : params) out.push_back(torch::zeros_like(p, torch::kFloat32));
  return out;
}

// A stored list of ints or tensors: a typed list as written, or the plain list that a checkpoint
// file gives back (checkpoint files store every list untyped, for torch.load's weights_only mode).
template <typename T>
std::vector<T> stored_list(const StateDict& s, const std::string& key) {
  constexpr bool tensors = std::is_same_v<T, at::Tensor>;
  const c10::IValue& v = s.at(key);
  if (!v.isList()) raise<DataError>("optimizer state: `{}` is not a list", key);
  std::vector<T> out;
  for (const c10::IValue& x : v.toListRef()) {
    if (tensors ? !x.isTensor() : !x.isInt())
      raise<DataError>("optimizer state: `{}` holds a {}, not {}", key, x.tagKind(),
                       tensors ? "a tensor" : "an integer");
    if constexpr (tensors) {
      out.push_back(x.toTensor());
    } else {
      out.push_back(x.toInt());
    }
  }
  return out;
}

// Each tensor with a storage of its own: a view of a flat buffer would otherwise be saved with the
// whole buffer behind it.
c10::List<at::Tensor> to_list(const std::vector<at::Tensor>& tensors) {
  c10::List<at::Tensor> list;
  for (const auto& t : tensors) {
    const bool whole = t.storage_offset() == 0 && t.is_contiguous() &&
                       t.storage().nbytes() == static_cast<size_t>(t.numel()) * t.element_size();
    list.push_back(whole ? t : t.clone());
  }
  return list;
}

class Adam : public Optimizer {
 public:
  Adam(std::vector<at::Tensor> params, const OptimizerOptions& o)
      : Optimizer(std::move(params), o.lr),
        beta1_(o.betas.at(0)),
        beta2_(o.betas.at(1)),
        eps_(o.eps),
        weight_decay_(o.weight_decay),
        steps_(params_.size(), 0) {
    exp_avg_ = zeros_like_all(params_);
    exp_avg_sq_ = zeros_like_all(params_);
  }
  std::string name() const override { return "adam"; }
  std::vector<at::Tensor> state_tensors() const override {
    std::vector<at::Tensor> all{flat_exp_avg_, flat_exp_avg_sq_};
    all.insert(all.end(), exp_avg_.begin(), exp_avg_.end());
    all.insert(all.end(), exp_avg_sq_.begin(), exp_avg_sq_.end());
    return all;
  }

  bool shard(distributed::Gang& gang, bool gradients) override {
    if (!take_shard(gang, gradients)) return false;
    flat_exp_avg_ = shard_of(flat_exp_avg_).clone();  // the whole buffers go
    flat_exp_avg_sq_ = shard_of(flat_exp_avg_sq_).clone();
    exp_avg_.clear();
    exp_avg_sq_.clear();
    return true;
  }

  void step() override {
    torch::NoGradGuard no_grad;
    if (sharded()) {
      step_shard();
      return;
    }
    if (flat() && std::adjacent_find(steps_.begin(), steps_.end(), std::not_equal_to<>()) == steps_.end()) {
      // The same update rule over the flat buffers: ten ops for all parameters.
      for (auto& t : steps_) ++t;
      update(flat_params_, flat_grads_, flat_exp_avg_, flat_exp_avg_sq_, steps_.empty() ? 1 : steps_[0]);
      written_through_flat_buffer();
      return;
    }
    for (size_t i = 0; i < params_.size(); ++i) {
      at::Tensor& p = params_[i];
      if (!p.grad().defined()) continue;
      at::Tensor grad = p.grad().to(torch::kFloat32);
      at::Tensor p32 = p.scalar_type() == torch::kFloat32 ? p : p.to(torch::kFloat32);
      update(p32, grad, exp_avg_[i], exp_avg_sq_[i], ++steps_[i]);
      if (!p32.is_same(p)) p.copy_(p32);
    }
  }

  StateDict state_dict() const override {
    StateDict s = Optimizer::state_dict();
    s.insert("step", c10::List<int64_t>(steps_));
    if (sharded()) {
      s.insert("exp_avg", to_list(per_parameter(gather_shards(flat_exp_avg_, "Adam's exp_avg for a checkpoint"))));
      s.insert("exp_avg_sq",
               to_list(per_parameter(gather_shards(flat_exp_avg_sq_, "Adam's exp_avg_sq for a checkpoint"))));
      return s;
    }
    s.insert("exp_avg", to_list(exp_avg_));
    s.insert("exp_avg_sq", to_list(exp_avg_sq_));
    return s;
  }
  void load_state_dict(const StateDict& s) override {
    Optimizer::load_state_dict(s);
    std::vector<at::Tensor> exp_avg = load_buffers(s, "exp_avg"), exp_avg_sq = load_buffers(s, "exp_avg_sq");
    if (!s.contains("step")) raise<DataError>("optimizer state: no `step` entry");
    std::vector<int64_t> steps = stored_list<int64_t>(s, "step");
    if (steps.size() != params_.size()) raise<DataError>("optimizer state: `step` has the wrong length");
    steps_ = std::move(steps);
    torch::NoGradGuard no_grad;
    if (sharded()) {  // this rank's slice of the whole state
      flat_exp_avg_.copy_(shard_of(cat_flat(exp_avg)));
      flat_exp_avg_sq_.copy_(shard_of(cat_flat(exp_avg_sq)));
      return;
    }
    for (size_t i = 0; i < params_.size(); ++i) {  // into the (flat) buffers in place
      exp_avg_[i].copy_(exp_avg[i]);
      exp_avg_sq_[i].copy_(exp_avg_sq[i]);
    }
  }

 private:
  void on_flatten() override {
    flat_exp_avg_ = flatten_state(exp_avg_);
    flat_exp_avg_sq_ = flatten_state(exp_avg_sq_);
  }

  // FairseqAdam's rule at step t, in place, for one parameter, all of them flat, or a worker's slice.
  void update(at::Tensor params, const at::Tensor& grads, at::Tensor& exp_avg, at::Tensor& exp_avg_sq,
              int64_t t) const {
    exp_avg.mul_(beta1_).add_(grads, 1 - beta1_);
    exp_avg_sq.mul_(beta2_).addcmul_(grads, grads, 1 - beta2_);
    at::Tensor denom = exp_avg_sq.sqrt().add_(eps_);
    const double bias_correction1 = 1 - std::pow(beta1_, static_cast<double>(t));
    const double bias_correction2 = 1 - std::pow(beta2_, static_cast<double>(t));
    const double step_size = lr_ * std::sqrt(bias_correction2) / bias_correction1;
    if (weight_decay_ != 0) params.add_(params, -weight_decay_ * lr_);
    params.addcdiv_(exp_avg, denom, -step_size);
  }

  // The flat update rule over this rank's slice, then every rank's slice into the weights.
  void step_shard() {
    if (!flat() || std::adjacent_find(steps_.begin(), steps_.end(), std::not_equal_to<>()) != steps_.end())
      raise<OperationalError>("zero_sharding: the optimizer's parameters are no longer the views of its flat buffer");
    for (auto& t : steps_) ++t;
    at::Tensor params = shard_of(flat_params_);
    const at::Tensor grads = gradients_sharded_ ? grad_shard_ : shard_of(flat_grads_);
    update(params, grads, flat_exp_avg_, flat_exp_avg_sq_, steps_.empty() ? 1 : steps_[0]);
    flat_params_.copy_(gather_shards(params, "the updated weights' slices"));
    written_through_flat_buffer();
  }

  // Per-parameter views of a whole flat buffer.
  std::vector<at::Tensor> per_parameter(const at::Tensor& flat) const {
    std::vector<at::Tensor> out;
    for (size_t i = 0; i < params_.size(); ++i)
      out.push_back(flat.narrow(0, offsets_[i], params_[i].numel()).view(params_[i].sizes()));
    return out;
  }

  double beta1_, beta2_, eps_, weight_decay_;
  std::vector<int64_t> steps_;
  std::vector<at::Tensor> exp_avg_, exp_avg_sq_;
  at::Tensor flat_exp_avg_, flat_exp_avg_sq_;  // after flatten(): exp_avg_ and exp_avg_sq_ are their views
};

class Sgd : public Optimizer {
 public:
  Sgd(std::vector<at::Tensor> params, const OptimizerOptions& o, bool nesterov_fairseq)
      : Optimizer(std::move(params), o.lr),
        momentum_(o.momentum),
        weight_decay_(o.weight_decay),
        nag_(nesterov_fairseq),
        lr_old_(o.lr) {
    buffers_ = zeros_like_all(params_);
    started_.assign(params_.size(), false);
  }
  std::string name() const override { return nag_ ? "nag" : "sgd"; }
  std::vector<at::Tensor> state_tensors() const override { return buffers_; }

  void step() override {
    torch::NoGradGuard no_grad;
    if (nag_) {
      step_nag();
    } else {
      step_sgd();
    }
  }

  StateDict state_dict() const override {
    StateDict s = Optimizer::state_dict();
    s.insert("momentum_buffer", to_list(buffers_));
    std::vector<int64_t> started(started_.begin(), started_.end());
    s.insert("started", c10::List<int64_t>(started));
    s.insert("lr_old", lr_old_);
    return s;
  }
  void load_state_dict(const StateDict& s) override {
    Optimizer::load_state_dict(s);
    buffers_ = load_buffers(s, "momentum_buffer");
    if (!s.contains("started")) raise<DataError>("optimizer state: no `started` entry");
    auto started = stored_list<int64_t>(s, "started");
    started_.assign(started.begin(), started.end());
    lr_old_ = s.at("lr_old").toDouble();
  }

 private:
  // torch.optim.SGD, dampening 0: d = g + wd p; buf = d at the first step, else m buf + d; p -= lr buf.
  void step_sgd() {
    for (size_t i = 0; i < params_.size(); ++i) {
      at::Tensor& p = params_[i];
      if (!p.grad().defined()) continue;
      at::Tensor d = p.grad().to(torch::kFloat32);
      if (weight_decay_ != 0) d = d.add(p.to(torch::kFloat32), weight_decay_);
      if (momentum_ != 0) {
        if (!started_[i]) {
          buffers_[i].copy_(d);
          started_[i] = true;
        } else {
          buffers_[i].mul_(momentum_).add_(d);
        }
        d = buffers_[i];
      }
      p.add_(d.to(p.scalar_type()), -lr_);
    }
  }

  // fairseq's NAG with lr correction for a changing learning rate.
  void step_nag() {
    const double lr_correct = lr_ / lr_old_;
    for (size_t i = 0; i < params_.size(); ++i) {
      at::Tensor& p = params_[i];
      if (!p.grad().defined()) continue;
      at::Tensor p32 = p.scalar_type() == torch::kFloat32 ? p : p.to(torch::kFloat32);
      at::Tensor d = p.grad().to(torch::kFloat32);
      at::Tensor& buf = buffers_[i];
      if (weight_decay_ != 0) p32.mul_(1 - lr_ * weight_decay_);
      p32.add_(buf, momentum_ * momentum_ * lr_correct);
      p32.add_(d, -(1 + momentum_) * lr_);
      buf.mul_(momentum_ * lr_correct).add_(d, -lr_);
      if (!p32.is_same(p)) p.copy_(p32);
    }
    lr_old_ = lr_;
  }

  double momentum_, weight_decay_;
  bool nag_;
  double lr_old_;
  std::vector<at::Tensor> buffers_;
  std::vector<bool> started_;
};

}  // namespace

OptimizerOptions optimizer_options(const config::OptimizerConfig& optimizer,
                                   const config::OptimizationConfig& optimization) {
  OptimizerOptions o;
  o.name = optimizer._name;
  o.lr = optimization.lr.empty() ? 0.0 : optimization.lr.front();
  o.betas = optimizer.adam_betas;
  o.eps = optimizer.adam_eps;
  o.weight_decay = optimizer.weight_decay;
  o.momentum = optimizer.momentum;
  return o;
}

bool Optimizer::flatten() {
  if (params_.empty() || flat_params_.defined()) return flat_params_.defined();
  for (const auto& p : params_) {
    if (p.scalar_type() != torch::kFloat32 || p.device() != params_[0].device()) return false;
  }
  torch::NoGradGuard no_grad;
  int64_t total = 0;
  offsets_.clear();
  for (const auto& p : params_) {
    offsets_.push_back(total);
    total += p.numel();
  }
  const auto options = params_[0].options();
  flat_params_ = torch::empty({total}, options);
  flat_grads_ = torch::zeros({total}, options);
  for (size_t i = 0; i < params_.size(); ++i) {
    at::Tensor& p = params_[i];
    at::Tensor view = flat_params_.narrow(0, offsets_[i], p.numel()).view(p.sizes());
    view.copy_(p);
    p.set_data(view);  // every holder of p (the model's modules) sees the flat storage
    at::Tensor grad = flat_grads_.narrow(0, offsets_[i], p.numel()).view(p.sizes());
    if (p.grad().defined()) grad.copy_(p.grad());
    p.mutable_grad() = grad;
  }
  on_flatten();
  return true;
}

bool Optimizer::flat() const {
  if (!flat_params_.defined()) return false;
  const auto* params = flat_params_.data_ptr<float>();
  const auto* grads = gradients_sharded_ ? nullptr : flat_grads_.data_ptr<float>();
  for (size_t i = 0; i < params_.size(); ++i) {
    const at::Tensor& p = params_[i];
    if (p.data_ptr() != params + offsets_[i] || !p.is_contiguous()) return false;
    if (gradients_sharded_) continue;
    if (!p.grad().defined() || p.grad().data_ptr() != grads + offsets_[i] || !p.grad().is_contiguous()) return false;
  }
  return true;
}

void Optimizer::written_through_flat_buffer() {
  // A parameter keeps its own version counter after set_data, so a write through the flat buffer
  // does not move it: what caches a weight by its version (nn::scoped_linear's packed weights in
  // generation) would keep the old values.
  for (const auto& p : params_) torch::autograd::impl::bump_version(p);
}

at::Tensor Optimizer::flatten_state(std::vector<at::Tensor>& state) const {
  at::Tensor flat = torch::empty_like(flat_params_);
  for (size_t i = 0; i < state.size(); ++i) {
    at::Tensor view = flat.narrow(0, offsets_[i], params_[i].numel()).view(params_[i].sizes());
    view.copy_(state[i]);
    state[i] = view;
  }
  return flat;
}

bool Optimizer::shard(distributed::Gang& gang, bool gradients) {
  (void)gang;
  (void)gradients;
  return false;
}

bool Optimizer::take_shard(distributed::Gang& gang, bool gradients) {
  if (!flat()) return false;
  const int64_t n = flat_params_.numel(), world = gang.size();
  shard_length_ = (n + world - 1) / world;
  shard_begin_ = std::min(n, gang.rank() * shard_length_);
  shard_end_ = std::min(n, shard_begin_ + shard_length_);
  shard_gang_ = &gang;
  if (gradients) {  // the whole flat gradient goes: backward makes each parameter's own
    grad_shard_ = torch::zeros({shard_end_ - shard_begin_}, flat_params_.options());
    flat_grads_ = at::Tensor();
    gradients_sharded_ = true;
    zero_grad();  // releases the parameters' views of it
  }
  return true;
}

at::Tensor Optimizer::gather_shards(const at::Tensor& slice, const std::string& what) const {
  at::Tensor padded = at::zeros({shard_length_}, slice.options());
  padded.narrow(0, 0, slice.numel()).copy_(slice);
  distributed::CollectiveScope scope("zero_sharding's all-gather of " + what);
  return shard_gang_->all_gather(padded).view({-1}).narrow(0, 0, flat_params_.numel());
}

at::Tensor Optimizer::cat_flat(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> rows;
  for (const at::Tensor& t : tensors) rows.push_back(t.reshape({-1}));
  return torch::cat(rows);
}

void Optimizer::zero_grad() {
  if (gradients_sharded_) {  // released: backward makes them anew
    for (auto& p : params_) p.mutable_grad().reset();
    grad_shard_.zero_();
    return;
  }
  if (flat()) {
    flat_grads_.zero_();
    return;
  }
  for (auto& p : params_) {
    if (p.grad().defined()) {
      p.mutable_grad().detach_();
      p.mutable_grad().zero_();
    }
  }
}

StateDict new_state_dict() { return c10::impl::GenericDict(c10::StringType::get(), c10::AnyType::get()); }

StateDict Optimizer::state_dict() const {
  StateDict s = new_state_dict();
  s.insert("name", name());
  s.insert("lr", lr_);
  return s;
}

void Optimizer::load_state_dict(const StateDict& s) {
  if (!s.contains("name") || !s.contains("lr")) raise<DataError>("optimizer state: no `name`/`lr` entries");
  const std::string stored = s.at("name").toStringRef();
  if (stored != name()) {
    raise<DataError>("optimizer state is for `{}`, but the optimizer is `{}` (use checkpoint.reset_optimizer=true)",
                     stored, name());
  }
  lr_ = s.at("lr").toDouble();
}

std::vector<at::Tensor> Optimizer::load_buffers(const StateDict& s, const std::string& key) const {
  if (!s.contains(key)) raise<DataError>("optimizer state: no `{}` entry", key);
  std::vector<at::Tensor> out = stored_list<at::Tensor>(s, key);
  if (out.size() != params_.size()) {
    raise<DataError>("optimizer state `{}` has {} tensors for {} parameters (use checkpoint.reset_optimizer=true)", key,
                     out.size(), params_.size());
  }
  for (size_t i = 0; i < out.size(); ++i) {
    if (!out[i].sizes().equals(params_[i].sizes())) {
      raise<DataError>("optimizer state `{}`[{}] has shape {}, the parameter {}", key, i, c10::str(out[i].sizes()),
                       c10::str(params_[i].sizes()));
    }
    out[i] = out[i].to(params_[i].device(), torch::kFloat32).clone();
  }
  return out;
}

std::unique_ptr<Optimizer> build_optimizer(const OptimizerOptions& options, std::vector<at::Tensor> params) {
  if (options.name == "adam") {
    if (options.betas.size() != 2) raise<UserError>("`optimizer.adam_betas` must have 2 values");
    return std::make_unique<Adam>(std::move(params), options);
  }
  if (options.name == "sgd") return std::make_unique<Sgd>(std::move(params), options, false);
  if (options.name == "nag") return std::make_unique<Sgd>(std::move(params), options, true);
  raise<UserError>("`optimizer._name` must be adam, sgd or nag, but is `{}` instead.", options.name);
}

int64_t held_bytes(const std::vector<at::Tensor>& tensors) {
  std::unordered_set<const void*> seen;
  int64_t bytes = 0;
  for (const at::Tensor& t : tensors) {
    if (!t.defined() || !t.has_storage()) continue;
    if (seen.insert(t.storage().unsafeGetStorageImpl()).second) bytes += static_cast<int64_t>(t.storage().nbytes());
  }
  return bytes;
}

namespace {

// The float64 sum of the squares of n contiguous float32 values, in one pass: each float64 square
// is exact, eight lanes per block of 2^16 elements, the blocks' sums added in order, so the sum is
// the same on any number of threads. (ATen's float64 copy, square and sum: three passes, 30 ms of
// a Multi30k update on 2 cores.)
double cpu_sum_of_squares(const float* x, int64_t n) {
  constexpr int64_t kBlock = int64_t{1} << 16;
  constexpr int kLanes = 8;
  std::vector<double> partial(static_cast<size_t>((n + kBlock - 1) / kBlock));
  at::parallel_for(0, static_cast<int64_t>(partial.size()), 1, [&](int64_t first, int64_t last) {
    for (int64_t block = first; block < last; ++block) {
      const float* v = x + block * kBlock;
      const int64_t len = std::min(kBlock, n - block * kBlock);
      double lanes[kLanes] = {};
      int64_t i = 0;
      for (; i + kLanes <= len; i += kLanes) {
        for (int j = 0; j < kLanes; ++j) lanes[j] += static_cast<double>(v[i + j]) * static_cast<double>(v[i + j]);
      }
      for (; i < len; ++i) lanes[i % kLanes] += static_cast<double>(v[i]) * static_cast<double>(v[i]);
      partial[static_cast<size_t>(block)] =
          ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
    }
  });
  double sum = 0;
  for (double p : partial) sum += p;
  return sum;
}

// The float64 sum of a float32 vector's squares (a one-element tensor on its device): on the CPU
// in one pass; elsewhere a few million elements at a time, with no float64 copy of the whole
// vector and no host sync before the caller's.
at::Tensor sum_of_squares(const at::Tensor& v) {
  if (v.is_cpu() && v.scalar_type() == at::kFloat && v.is_contiguous()) {
    return at::full({1}, cpu_sum_of_squares(v.data_ptr<float>(), v.numel()), v.options().dtype(at::kDouble));
  }
  constexpr int64_t kChunk = int64_t{1} << 22;
  at::Tensor sum = at::zeros({1}, v.options().dtype(at::kDouble));
  for (int64_t begin = 0; begin < v.numel(); begin += kChunk)
    sum.add_(v.narrow(0, begin, std::min(kChunk, v.numel() - begin)).to(at::kDouble).square().sum());
  return sum;
}

// fairseq's clipping of `grads` (all of them, or this rank's slice) from the whole gradient's
// float64 sum of squares; returns the norm.
double clip_by_norm(const at::Tensor& grads, const at::Tensor& squares, double max_norm) {
  const double total = std::sqrt(squares.item<double>());
  if (max_norm > 0 && total > max_norm) {
    torch::NoGradGuard no_grad;
    grads.mul_(max_norm / (total + 1e-6));
  }
  return total;
}

}  // namespace

double clip_grad_norm(const at::Tensor& flat_grads, double max_norm) {
  return clip_by_norm(flat_grads, sum_of_squares(flat_grads), max_norm);
}

double clip_grad_norm(const at::Tensor& grad_shard, double max_norm, distributed::Gang& gang) {
  at::Tensor squares = sum_of_squares(grad_shard);
  {
    distributed::CollectiveScope scope("the gradient norm's sum of squares over the gradient's slices");
    distributed::all_sum(gang, squares);
  }
  return clip_by_norm(grad_shard, squares, max_norm);
}

double clip_grad_norm(const std::vector<at::Tensor>& params, double max_norm) {
  std::vector<at::Tensor> norms;
  for (const auto& p : params) {
    if (p.grad().defined()) norms.push_back(p.grad().to(torch::kFloat32).norm());
  }
  if (norms.empty()) return 0.0;
  const double total = torch::stack(norms).norm().item<double>();
  if (max_norm > 0 && total > max_norm) {
    const double coef = max_norm / (total + 1e-6);
    torch::NoGradGuard no_grad;
    for (const auto& p : params) {
      if (p.grad().defined()) p.grad().mul_(coef);
    }
  }
  return total;
}

}  // namespace fairseq_cpp::optim
