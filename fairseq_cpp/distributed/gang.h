#pragma once
// A Gang is a set of processes that run collectives together (fairseq2's idea): one small
// interface over one process group, so that the trainer has one code path for 1 and N workers.
//
//   std::shared_ptr<Gang> gang = distributed_init(topology, options);   // or FakeGang
//   all_sum(*gang, grad_bucket);                                         // in place, every rank
//   if (any_flag(*gang, out_of_memory)) skip_update();                   // decided together
//
// Collectives are blocking, except start_all_sum's, which run while the caller goes on (gradient
// buckets during backward) until their wait(). Every failure (a peer gone, a timeout) throws GangError naming the
// operation and the rank; no rank waits forever.

#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "fairseq_cpp/core/errors.h"

namespace fairseq_cpp::distributed {

enum class ReduceOp { sum, mean, min, max, product };
const char* reduce_op_name(ReduceOp op);

// A collective failed: which operation, on which rank, and why (the peer when it is known).
class GangError : public OperationalError {
 public:
  using OperationalError::OperationalError;
};

// What the collectives that this thread starts in this scope are for, named in their errors:
//   CollectiveScope at("update 12 of epoch 3");  CollectiveScope vote("the stop vote");
//   -> "all_reduce(max) (the stop vote; update 12 of epoch 3) failed on rank 1 of 2 ..."
// Scopes nest; the innermost comes first.
class CollectiveScope {
 public:
  explicit CollectiveScope(std::string what);
  ~CollectiveScope();
  CollectiveScope(const CollectiveScope&) = delete;
  CollectiveScope& operator=(const CollectiveScope&) = delete;
  // " (the stop vote; update 12 of epoch 3)", or "" outside every scope.
  static std::string describe();
};

// A collective started by Gang::start_all_sum, in flight until wait() returns.
class PendingCollective {
 public:
  virtual ~PendingCollective() = default;
  // Returns when the collective is done; throws GangError as the blocking collective would.
  virtual void wait() = 0;
  // Whether wait() would return (or throw) at once; never waits.
  virtual bool done() = 0;
};

class Gang {
 public:
  virtual ~Gang() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Where this gang's tensors live (cpu for Gloo, cuda:N for NCCL).
  virtual c10::Device device() const = 0;

  // Reduces `tensor` across the gang in place; mean of an integer tensor rounds toward zero.
  virtual void all_reduce(at::Tensor& tensor, ReduceOp op) = 0;
  // Gathers `tensor` (same shape on every rank) from every rank: (size, *tensor.shape).
  virtual at::Tensor all_gather(const at::Tensor& tensor) = 0;
  // Replaces `tensor` on every rank with the one on `root`.
  virtual void broadcast(at::Tensor& tensor, int root) = 0;
  // Returns when every rank has called it.
  virtual void barrier() = 0;
  // Starts summing `tensor` across the gang in place and returns at once; `tensor` is not to be
  // touched until the returned collective's wait(). Every rank starts its collectives in the same
  // order. `what` names it in an error ("all-reduce of gradient bucket 3 of 7 at update 12"). The
  // default runs it at once (a gang without asynchronous collectives).
  virtual std::unique_ptr<PendingCollective> start_all_sum(at::Tensor& tensor, const std::string& what);
  // A gang of `ranks` (ranks of this gang, increasing). Every rank of this gang must call it with
  // the same list; ranks outside the list get nullptr.
  virtual std::shared_ptr<Gang> create_gang(const std::vector<int>& ranks) = 0;
};

// One-line helpers for call sites.
inline void all_sum(Gang& gang, at::Tensor& tensor) { gang.all_reduce(tensor, ReduceOp::sum); }
// `flag` of rank `root` on every rank.
bool broadcast_flag(Gang& gang, bool flag, int root = 0);
// True on every rank when `flag` is true on any rank (out of memory, end of data, a signal...).
bool any_flag(Gang& gang, bool flag);
// True on every rank when `flag` is true on all ranks.
bool all_flag(Gang& gang, bool flag);

// A gang that runs in this process only: size 1, or a simulated size N whose other ranks hold
// the same values as this one (all_reduce sum multiplies by N, all_gather repeats). For unit
// tests of code written against Gang.
class FakeGang : public Gang {
 public:
  explicit FakeGang(int size = 1, int rank = 0, c10::Device device = c10::Device(c10::kCPU));
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  c10::Device device() const override { return device_; }
  void all_reduce(at::Tensor& tensor, ReduceOp op) override;
  at::Tensor all_gather(const at::Tensor& tensor) override;
  void broadcast(at::Tensor& tensor, int root) override;
  void barrier() override {}
  std::shared_ptr<Gang> create_gang(const std::vector<int>& ranks) override;

 private:
  int size_;
  int rank_;
  c10::Device device_;
};

// Checks a list of ranks for create_gang: increasing, in [0, size). Throws UserError otherwise.
void check_gang_ranks(const std::vector<int>& ranks, int size);

}  // namespace fairseq_cpp::distributed
