#include "fairseq_cpp/trainer/grad_buckets.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <chrono>

#include <fmt/format.h>

#include "fairseq_cpp/core/errors.h"

namespace fairseq_cpp::trainer {

GradBuckets::GradBuckets(const std::vector<at::Tensor>& params, at::Tensor flat_grads, int64_t cap)
    : flat_grads_(std::move(flat_grads)) {
  std::vector<int64_t> offsets{0};
  for (const auto& p : params) offsets.push_back(offsets.back() + p.numel());
  if (offsets.back() != flat_grads_.numel())
    raise<OperationalError>("gradient buckets: the parameters hold {} scalars, the flat gradients {}", offsets.back(),
                         flat_grads_.numel());
  // From the last parameter: backward gives its gradient first.
  std::vector<size_t> bucket_of(params.size());
  for (size_t i = params.size(); i-- > 0;) {
    if (buckets_.empty() || buckets_.back().end - buckets_.back().begin >= cap) {
      buckets_.push_back(Bucket{});
      buckets_.back().end = offsets[i + 1];
    }
    buckets_.back().begin = offsets[i];
    bucket_of[i] = buckets_.size() - 1;
    if (params[i].requires_grad()) ++buckets_.back().expected;
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (!params[i].requires_grad()) continue;
    std::shared_ptr<torch::autograd::Node> acc = torch::autograd::impl::grad_accumulator(params[i]);
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
  }
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
  Bucket& b = buckets_[bucket];
  at::Tensor sum = sums_.slice(0, b.begin, b.end);
  sum.add_(flat_grads_.slice(0, b.begin, b.end).to(at::kDouble));
  b.work = gang_->start_all_sum(sum, fmt::format("all-reduce of gradient bucket {} of {} at update {}", bucket + 1,
                                                 buckets_.size(), update_));
}

double GradBuckets::finish() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!armed_) return 0.0;
    while (next_ < buckets_.size()) start(next_++);
    armed_ = false;
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (auto& b : buckets_) {
    b.work->wait();
    b.work.reset();
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace fairseq_cpp::trainer
