#pragma once
// Gradients travel while backward still runs (what PyTorch's DDP reducer does, on our float64
// sums): the flat gradient buffer is cut into buckets of whole parameters, from the last parameter
// (whose gradient backward gives first) towards the first, about `cap` scalars each. During the
// armed backward, a hook on each parameter's gradient accumulator counts it ready; once every
// parameter of the next bucket in line is, that bucket's gradients are added to the update's
// float64 sum and its all-reduce starts, in bucket order on every rank. finish() starts whatever
// backward did not (a dummy batch, out of memory, a parameter without a gradient) and waits for
// all, so the sums are those of the all-reduce after backward, bit for bit.
//
//   GradBuckets buckets(params, optimizer.flat_grads(), cap);
//   buckets.arm(grad_sum, gang, update);     // before the last micro-batch's backward
//   loss.backward();                         // buckets start as their gradients are ready
//   double waited = buckets.finish();        // every bucket started and summed on every rank
//
// With the gradients sharded (ZeRO stage 2, `zero_sharding: os_grad`) there is no flat gradient
// buffer and no whole float64 sum: a ready bucket's gradients are copied into a float64 bucket of
// their own and released, the bucket is all-reduced (Gloo has no reduce-scatter in LibTorch 1.13;
// the volume is an all-reduce's either way), and only the part in this rank's slice is added to
// `sums`, that slice's float64 sum. A bucket is folded into the slice as soon as its all-reduce is
// done; where backward runs on the thread that called it (the CPU), its hooks also wait so that at
// most kInFlight buckets are in flight: the memory beyond the slice is a few buckets, not the model.
// A device's backward runs on the autograd engine's thread for that device, which every thread of
// the process shares (ranks as threads, in tests): there a hook that waited for its peers could
// wait for a backward queued behind itself, so its hooks never wait, and finish() folds the rest. The sums are those of
// the unsharded all-reduce (the same buckets summed by the same collective), bit for bit.
//
//   GradBuckets buckets(params, cap, optimizer.shard_begin(), optimizer.shard_end());
//   buckets.arm(slice_sum, gang, update);    // before every micro-batch's backward
//   loss.backward();
//   buckets.finish();                        // slice_sum += this rank's slice of the reduced gradients

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <ATen/Tensor.h>

#include "fairseq_cpp/distributed/gang.h"
#include "fairseq_cpp/nn/low_precision_copies.h"

namespace torch::autograd {
struct Node;
}

namespace fairseq_cpp::trainer {

class GradBuckets {
 public:
  // `params` are views of `flat_grads`'s parameters in order (their gradients are `flat_grads`'s
  // consecutive slices); buckets hold about `cap` scalars, at least one parameter each. With
  // `copies` (training in bf16), a parameter that has a low-precision copy is ready when its copy's
  // gradient is, and a bucket adds its copies' gradients to flat_grads before it starts.
  GradBuckets(const std::vector<at::Tensor>& params, at::Tensor flat_grads, int64_t cap,
              nn::LowPrecisionCopies* copies = nullptr);
  // Sharded: the parameters' gradients are tensors of their own (or undefined: zeros), released as
  // their bucket starts; this rank keeps the scalars [shard_begin, shard_end) of the flat order.
  // `wait_in_hooks`: whether backward's hooks may wait for collectives (they run on the thread
  // that called backward: true for CPU parameters).
  GradBuckets(const std::vector<at::Tensor>& params, int64_t cap, int64_t shard_begin, int64_t shard_end,
              bool wait_in_hooks);
  ~GradBuckets();
  GradBuckets(const GradBuckets&) = delete;
  GradBuckets& operator=(const GradBuckets&) = delete;

  // For the next backward: a ready bucket's gradients are added to `sums` (float64, as flat_grads)
  // and summed across `gang` in place (sharded: summed across `gang`, then this rank's part added
  // to `sums`, the slice's float64 sum); `update` names it in errors. Armed already (no finish()
  // since): nothing changes.
  void arm(at::Tensor sums, distributed::Gang& gang, int64_t update);
  // Starts every bucket not started yet (adding its gradients to the sums), in order, and waits
  // for all; disarms. Returns the seconds spent waiting. Without arm() first, does nothing.
  double finish();

  size_t size() const { return buckets_.size(); }
  // Buckets started by backward's hooks in the last armed backward (the others started in finish()).
  size_t started_by_backward() const { return started_by_backward_; }
  // Sharded, with wait_in_hooks: the most buckets whose all-reduce is in flight at once.
  static constexpr size_t kInFlight = 2;

 private:
  struct Bucket {
    int64_t begin = 0, end = 0;  // scalars of the flat order
    size_t first = 0, last = 0;  // its parameters [first, last)
    int expected = 0;            // parameters that get a gradient
    int ready = 0;
    std::unique_ptr<distributed::PendingCollective> work;
    at::Tensor sum;  // sharded: the bucket's float64 sum, in flight
  };
  // The buckets from the last parameter backwards, and a hook on each gradient accumulator.
  void build(const std::vector<at::Tensor>& params, int64_t cap);
  void on_ready(size_t bucket);
  void start(size_t bucket);  // with mutex_ held
  void start_sharded(size_t bucket);
  // Sharded: waits for the bucket's all-reduce and adds this rank's part to the slice's sums.
  void fold(size_t bucket);

  bool sharded_ = false;
  std::vector<at::Tensor> params_;  // sharded: their gradients are read and released
  std::vector<int64_t> offsets_;    // params_[i] is [offsets_[i], offsets_[i + 1]) of the flat order
  int64_t shard_begin_ = 0, shard_end_ = 0;
  bool wait_in_hooks_ = true;
  std::vector<size_t> in_flight_;  // sharded: started, not yet folded, oldest first
  at::Tensor flat_grads_;
  nn::LowPrecisionCopies* copies_ = nullptr;  // not owned
  std::vector<Bucket> buckets_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;  // kept alive: they hold the hooks
  std::vector<uintptr_t> hooks_;                                       // each one's key there
  std::mutex mutex_;
  bool armed_ = false;
  size_t next_ = 0;  // the next bucket to start
  size_t started_by_backward_ = 0;
  at::Tensor sums_;
  distributed::Gang* gang_ = nullptr;
  int64_t update_ = 0;
};

}  // namespace fairseq_cpp::trainer
