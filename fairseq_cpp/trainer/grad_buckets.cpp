#include "fairseq_cpp/trainer/grad_buckets.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "fairseq_cpp/core/errors.h"

namespace fairseq_cpp::trainer {

GradBuckets::GradBuckets(const std::vector<at::Tensor>& params, at::Tensor flat_grads, int64_t cap,
                         nn::LowPrecisionCopies* copies)
    : flat_grads_(std::move(flat_grads)), copies_(copies) {
  int64_t scalars = 0;
  for (const auto& p : params) scalars += p.numel();
  if (scalars != flat_grads_.numel())
    raise<OperationalError>("gradient buckets: the parameters hold {} scalars, the flat gradients {}", scalars,
                            flat_grads_.numel());
  build(params, cap);
}

GradBuckets::GradBuckets(const std::vector<at::Tensor>& params, int64_t cap, int64_t shard_begin, int64_t shard_end,
                         bool wait_in_hooks)
    : sharded_(true), params_(params), shard_begin_(shard_begin), shard_end_(shard_end), wait_in_hooks_(wait_in_hooks) {
  build(params, cap);
}

void GradBuckets::build(const std::vector<at::Tensor>& params, int64_t cap) {
  offsets_.assign(1, 0);
  for (const auto& p : params) offsets_.push_back(offsets_.back() + p.numel());
  // From the last parameter: backward gives its gradient first.
  std::vector<size_t> bucket_of(params.size());
  for (size_t i = params.size(); i-- > 0;) {
    if (buckets_.empty() || buckets_.back().end - buckets_.back().begin >= cap) {
      buckets_.push_back(Bucket{});
      buckets_.back().end = offsets_[i + 1];
      buckets_.back().last = i + 1;
    }
    buckets_.back().begin = offsets_[i];
    buckets_.back().first = i;
    bucket_of[i] = buckets_.size() - 1;
    if (params[i].requires_grad()) ++buckets_.back().expected;
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (!params[i].requires_grad()) continue;
    const at::Tensor& source = copies_ ? copies_->gradient_source(i) : params[i];
    std::shared_ptr<torch::autograd::Node> acc = torch::autograd::impl::grad_accumulator(source);
    if (!acc) raise<OperationalError>("gradient buckets: parameter {} has no gradient accumulator", i);
    const size_t b = bucket_of[i];
    hooks_.push_back(acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [this, b](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
          on_ready(b);
          return outputs;
        })));
    accumulators_.push_back(std::move(acc));
  }
}

// The parameters may outlive the buckets (and be trained again): their hooks go with them.
GradBuckets::~GradBuckets() {
  for (size_t i = 0; i < accumulators_.size(); ++i) accumulators_[i]->del_post_hook(hooks_[i]);
}

void GradBuckets::arm(at::Tensor sums, distributed::Gang& gang, int64_t update) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (armed_) return;  // armed for this update already: finish() has not run
  sums_ = std::move(sums);
  gang_ = &gang;
  update_ = update;
  next_ = 0;
  started_by_backward_ = 0;
  for (auto& b : buckets_) {
    b.ready = 0;
    b.work.reset();
    b.sum = at::Tensor();
  }
  in_flight_.clear();
  armed_ = true;
}

void GradBuckets::on_ready(size_t bucket) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!armed_) return;
  ++buckets_[bucket].ready;
  while (next_ < buckets_.size() && buckets_[next_].ready >= buckets_[next_].expected) {
    start(next_++);
    ++started_by_backward_;
  }
}

void GradBuckets::start(size_t bucket) {
  if (sharded_) {
    start_sharded(bucket);
    return;
  }
  Bucket& b = buckets_[bucket];
  if (copies_) copies_->fold_gradients(flat_grads_, b.begin, b.end);
  at::Tensor sum = sums_.slice(0, b.begin, b.end);
  sum.add_(flat_grads_.slice(0, b.begin, b.end).to(at::kDouble));
  b.work = gang_->start_all_sum(sum, fmt::format("all-reduce of gradient bucket {} of {} at update {}", bucket + 1,
                                                 buckets_.size(), update_));
}

void GradBuckets::start_sharded(size_t bucket) {
  Bucket& b = buckets_[bucket];
  b.sum = at::empty({b.end - b.begin}, sums_.options());
  for (size_t i = b.first; i < b.last; ++i) {
    at::Tensor part = b.sum.narrow(0, offsets_[i] - b.begin, offsets_[i + 1] - offsets_[i]);
    at::Tensor& grad = params_[i].mutable_grad();
    if (grad.defined()) {
      part.copy_(grad.reshape({-1}));
      grad.reset();  // this rank keeps only its slice of the sum
    } else {
      part.zero_();
    }
  }
  b.work = gang_->start_all_sum(
      b.sum, fmt::format("all-reduce of gradient bucket {} of {} at update {}", bucket + 1, buckets_.size(), update_));
  in_flight_.push_back(bucket);
  while (!in_flight_.empty() &&
         (buckets_[in_flight_.front()].work->done() || (wait_in_hooks_ && in_flight_.size() > kInFlight))) {
    fold(in_flight_.front());
    in_flight_.erase(in_flight_.begin());
  }
}

void GradBuckets::fold(size_t bucket) {
  Bucket& b = buckets_[bucket];
  b.work->wait();
  b.work.reset();
  const int64_t lo = std::max(b.begin, shard_begin_), hi = std::min(b.end, shard_end_);
  if (lo < hi) sums_.narrow(0, lo - shard_begin_, hi - lo).add_(b.sum.narrow(0, lo - b.begin, hi - lo));
  b.sum = at::Tensor();
}

double GradBuckets::finish() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!armed_) return 0.0;
    while (next_ < buckets_.size()) start(next_++);
    armed_ = false;
  }
  const auto t0 = std::chrono::steady_clock::now();
  if (sharded_) {
    for (size_t bucket : in_flight_) fold(bucket);
    in_flight_.clear();
  } else {
    for (auto& b : buckets_) {
      b.work->wait();
      b.work.reset();
    }
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace fairseq_cpp::trainer
