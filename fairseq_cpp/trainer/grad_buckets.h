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

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <ATen/Tensor.h>

#include "fairseq_cpp/distributed/gang.h"

namespace torch::autograd {
struct Node;
}

namespace fairseq_cpp::trainer {

class GradBuckets {
 public:
  // `params` are views of `flat_grads`'s parameters in order (their gradients are `flat_grads`'s
  // consecutive slices); buckets hold about `cap` scalars, at least one parameter each.
  GradBuckets(const std::vector<at::Tensor>& params, at::Tensor flat_grads, int64_t cap);
  ~GradBuckets();
  GradBuckets(const GradBuckets&) = delete;
  GradBuckets& operator=(const GradBuckets&) = delete;

  // For the next backward: a ready bucket's gradients are added to `sums` (float64, as flat_grads)
  // and summed across `gang` in place; `update` names it in errors. Armed already (no finish()
  // since): nothing changes.
  void arm(at::Tensor sums, distributed::Gang& gang, int64_t update);
  // Starts every bucket not started yet (adding its gradients to the sums), in order, and waits
  // for all; disarms. Returns the seconds spent waiting. Without arm() first, does nothing.
  double finish();

  size_t size() const { return buckets_.size(); }
  // Buckets started by backward's hooks in the last armed backward (the others started in finish()).
  size_t started_by_backward() const { return started_by_backward_; }

 private:
  struct Bucket {
    int64_t begin = 0, end = 0;  // scalars of flat_grads
    int expected = 0;            // parameters that get a gradient
    int ready = 0;
    std::unique_ptr<distributed::PendingCollective> work;
  };
  void on_ready(size_t bucket);
  void start(size_t bucket);  // with mutex_ held

  at::Tensor flat_grads_;
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
