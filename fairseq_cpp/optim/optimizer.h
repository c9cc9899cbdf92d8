#pragma once
// fairseq's optimizers over a flat list of parameters, with their exact update rules:
//   adam: FairseqAdam — eps added to sqrt(v) before bias correction, weight decay decoupled
//         (p -= lr * wd * p, then p -= lr * sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps));
//   sgd:  torch.optim.SGD (L2 weight decay added to the gradient, heavy-ball momentum);
//   nag:  fairseq's NAG (Nesterov momentum with lr correction, p *= 1 - lr * wd).
// The learning rate is set from outside (LrScheduler); state_dict() includes it, since
// LibTorch's own optimizers do not restore it.

#include <memory>
#include <string>
#include <vector>

#include <ATen/Tensor.h>
#include <ATen/core/Dict.h>
#include <ATen/core/ivalue.h>

#include "fairseq_cpp/config/sections.h"
#include "fairseq_cpp/distributed/gang.h"

namespace fairseq_cpp::optim {

// String keys to values (c10::impl::GenericDict with str keys); make one with new_state_dict().
using StateDict = c10::impl::GenericDict;
StateDict new_state_dict();

struct OptimizerOptions {
  std::string name = "adam";              // adam | sgd | nag
  double lr = 0.25;                       // initial learning rate (the scheduler sets it afterwards)
  std::vector<double> betas{0.9, 0.999};  // adam: beta1, beta2
  double eps = 1e-8;                      // adam: added to sqrt(v)
  double weight_decay = 0.0;              // 0 = none (adam: decoupled; sgd: L2 in the gradient; nag: p *= 1 - lr wd)
  double momentum = 0.0;                  // sgd/nag momentum
};

OptimizerOptions optimizer_options(const config::OptimizerConfig& optimizer,
                                   const config::OptimizationConfig& optimization);

class Optimizer {
 public:
  explicit Optimizer(std::vector<at::Tensor> params, double lr) : params_(std::move(params)), lr_(lr) {}
  virtual ~Optimizer() = default;
  // One update from the parameters' .grad(); parameters without a gradient are skipped.
  virtual void step() = 0;
  virtual std::string name() const = 0;
  // Sets every gradient to zero (in place where one exists).
  void zero_grad();
  double lr() const { return lr_; }
  void set_lr(double lr) { lr_ = lr; }
  const std::vector<at::Tensor>& params() const { return params_; }

  // Puts the parameters and their gradients into one flat float32 buffer each: the parameters and
  // gradients become views of them (values unchanged), and step(), zero_grad() and the state run
  // a few ops over all parameters instead of a few per parameter (fairseq's flat fp32 copy in
  // FP16Optimizer). Only for float32 parameters on one device; returns whether it did.
  bool flatten();
  // Whether the parameters and gradients are still those views: a gradient replaced by another
  // tensor, or a parameter given other storage, breaks that, and the optimizer then works one
  // parameter at a time again. With sharded gradients, the parameters only.
  bool flat() const;
  // The flat gradient buffer (undefined before flatten(), and with sharded gradients).
  const at::Tensor& flat_grads() const { return flat_grads_; }

  // ZeRO stage 1 (fairseq's `zero_sharding: os`), after flatten(): this rank keeps the optimizer's
  // state for one contiguous slice of the flat buffer (an equal share of ceil(n / N) elements,
  // rank r the r-th), step() updates only that slice of the weights from the same slice of the
  // (all-reduced) gradients, and all-gathers the slices into every rank's weights. Each element's
  // update is the unsharded one. state_dict() then gathers the whole state (a collective: every
  // rank calls it), and load_state_dict() keeps this rank's slice of a whole state, so checkpoints
  // are as unsharded and resume on any number of workers. Returns false for an optimizer without it
  // (sgd, nag) or parameters that are not flat.
  // With `gradients` (ZeRO stage 2, `zero_sharding: os_grad`) the whole flat gradient buffer goes
  // too: the parameters' gradients are tensors of their own that backward makes and the caller
  // releases once reduced (trainer::GradBuckets), and step() takes this rank's slice of the reduced
  // gradient from grad_shard(), which the caller fills.
  virtual bool shard(distributed::Gang& gang, bool gradients);
  bool sharded() const { return shard_gang_ != nullptr; }
  bool gradients_sharded() const { return gradients_sharded_; }
  // With sharded gradients: this rank's slice of the flat gradient (float32), which step() uses.
  const at::Tensor& grad_shard() const { return grad_shard_; }
  // After shard(): this rank's slice [shard_begin(), shard_end()) of the flat buffer.
  int64_t shard_begin() const { return shard_begin_; }
  int64_t shard_end() const { return shard_end_; }
  // The flat parameter buffer (undefined before flatten()).
  const at::Tensor& flat_params() const { return flat_params_; }
  // After shard(): this rank's slice of a flat buffer; a whole flat buffer from every rank's slice
  // of it (`slice`, this rank's, padded to the common length for the all-gather: a collective,
  // every rank calls it; `what` names it in an error).
  at::Tensor shard_of(const at::Tensor& flat) const { return flat.slice(0, shard_begin_, shard_end_); }
  at::Tensor gather_shards(const at::Tensor& slice, const std::string& what) const;

  // {"name", "lr", plus per-parameter state as lists in parameter order}; never a one-entry dict.
  virtual StateDict state_dict() const;
  // Throws DataError when the state is for another optimizer or other parameter shapes.
  virtual void load_state_dict(const StateDict& state);
  // The optimizer's own state in memory (adam's moments, or this rank's slice of them when
  // sharded; momentum buffers): what it adds to the model state.
  virtual std::vector<at::Tensor> state_tensors() const { return {}; }

 protected:
  // Reads a list of tensors `key` of state, one per parameter, checking count and shapes.
  std::vector<at::Tensor> load_buffers(const StateDict& state, const std::string& key) const;
  // After flatten(): per-parameter state moved into one flat buffer, `state` becoming its views.
  at::Tensor flatten_state(std::vector<at::Tensor>& state) const;
  // Called by flatten() once the parameters are flat: move the optimizer's own state.
  virtual void on_flatten() {}
  // After writing the weights through flat_params_: moves every parameter's version counter, as a
  // write through the parameter itself would.
  void written_through_flat_buffer();
  // Takes this rank's slice of the flat buffer (shard()'s part common to the optimizers), and of the
  // gradients with `gradients`; false when not flat.
  bool take_shard(distributed::Gang& gang, bool gradients);
  // The whole flat buffer of per-parameter tensors (in parameter order).
  static at::Tensor cat_flat(const std::vector<at::Tensor>& tensors);

  std::vector<at::Tensor> params_;
  double lr_;
  at::Tensor flat_params_, flat_grads_;      // defined after flatten()
  std::vector<int64_t> offsets_;             // params_[i] is [offsets_[i], offsets_[i] + numel) of them
  distributed::Gang* shard_gang_ = nullptr;  // set by shard()
  int64_t shard_begin_ = 0, shard_end_ = 0, shard_length_ = 0;  // this rank's slice; the common length
  bool gradients_sharded_ = false;
  at::Tensor grad_shard_;  // with sharded gradients: this rank's slice of the gradient
};

std::unique_ptr<Optimizer> build_optimizer(const OptimizerOptions& options, std::vector<at::Tensor> params);

// Bytes of the distinct storages that `tensors` view: a flat buffer and its views count once.
int64_t held_bytes(const std::vector<at::Tensor>& tensors);

// fairseq's clip_grad_norm_: the L2 norm of all gradients together; when max_norm > 0 and the norm
// exceeds it, every gradient is scaled by max_norm / (norm + 1e-6). Returns the norm before clipping.
double clip_grad_norm(const std::vector<at::Tensor>& params, double max_norm);
// The same over a flat gradient buffer (Optimizer::flat_grads()): one norm, its squares summed in
// float64 (exact for each square, so the norm does not depend on how the buffer is split), one scaling.
double clip_grad_norm(const at::Tensor& flat_grads, double max_norm);
// The same over every rank's slice of the gradient (Optimizer::grad_shard()): the slices' float64
// sums of squares summed across `gang` (every rank calls it), so every rank gets the same norm, that
// of the whole buffer up to the order of float64 additions.
double clip_grad_norm(const at::Tensor& grad_shard, double max_norm, distributed::Gang& gang);

}  // namespace fairseq_cpp::optim
