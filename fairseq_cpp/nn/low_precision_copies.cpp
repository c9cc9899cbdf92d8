#include "fairseq_cpp/nn/low_precision_copies.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <mutex>
#include <unordered_map>

#include "fairseq_cpp/core/autocast_state.h"
#include "fairseq_cpp/core/errors.h"

namespace fairseq_cpp::nn {
namespace {

// Every registered copy, by its float32 tensor; one owner per tensor, the LowPrecisionCopies
// constructed last (or, once that one has ended, the next to refresh). Looked up by each
// scoped_linear call, also on the autograd engine's device thread (an activation-checkpointed
// block's replay): a lock, and a count that lets a process without copies skip it.
struct CopyRegistry {
  // A copy is of the float32 tensor as it was when filled: the same version (in-place changes
  // bump it) and the same storage (EmaWeights swaps another in with set_data, which does not).
  struct Entry {
    at::Tensor copy;
    int64_t version = -1;        // the float32 tensor's version when the copy was filled; -1: never
    const void* data = nullptr;  // where in the flat buffer the copy was filled from
  };
  std::mutex mutex;
  std::unordered_map<const c10::TensorImpl*, Entry> entries;
  std::atomic<size_t> size{0};
  std::atomic<int64_t> reads{0};
};

CopyRegistry& copy_registry() {
  static auto* r = new CopyRegistry;  // never destroyed: copies may outlive static destruction's order
  return *r;
}

int64_t copy_version(const at::Tensor& t) { return static_cast<int64_t>(t._version()); }

}  // namespace

LowPrecisionCopies::LowPrecisionCopies(const std::vector<at::Tensor>& params, const at::Tensor& flat_params,
                                       const std::vector<bool>& copied, c10::ScalarType dtype)
    : params_(params), copies_(params.size()) {
  if (copied.size() != params.size())
    raise<OperationalError>("low-precision copies: {} parameters but {} flags", params.size(), copied.size());
  std::vector<int64_t> offsets{0};
  for (const at::Tensor& p : params) offsets.push_back(offsets.back() + p.numel());
  if (offsets.back() != flat_params.numel())
    raise<OperationalError>("low-precision copies: the parameters hold {} scalars, the flat buffer {}", offsets.back(),
                            flat_params.numel());
  begin_ = offsets.back();
  for (size_t i = 0; i < params.size(); ++i) {
    if (!copied[i]) continue;
    begin_ = std::min(begin_, offsets[i]);
    end_ = std::max(end_, offsets[i + 1]);
  }
  if (begin_ >= end_) return;
  flat_params_ = flat_params.narrow(0, begin_, end_ - begin_);
  values_ = at::empty({end_ - begin_}, flat_params.options().dtype(dtype));
  grads_ = at::zeros_like(values_);
  CopyRegistry& r = copy_registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (size_t i = 0; i < params.size(); ++i) {
    if (!copied[i]) continue;
    const int64_t offset = offsets[i] - begin_, n = params[i].numel();
    at::Tensor copy = values_.narrow(0, offset, n).view(params[i].sizes()).detach().requires_grad_(true);
    copy.mutable_grad() = grads_.narrow(0, offset, n).view(params[i].sizes());  // accumulated in place
    copies_[i] = copy;
    r.entries[params[i].unsafeGetTensorImpl()] = CopyRegistry::Entry{copy};
  }
  r.size = r.entries.size();
}

LowPrecisionCopies::~LowPrecisionCopies() {
  CopyRegistry& r = copy_registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!copies_[i].defined()) continue;
    // Only its own: a later LowPrecisionCopies of the same weights (another trainer) owns them now.
    auto it = r.entries.find(params_[i].unsafeGetTensorImpl());
    if (it != r.entries.end() && it->second.copy.is_same(copies_[i])) r.entries.erase(it);
  }
  r.size = r.entries.size();
}

void LowPrecisionCopies::refresh() {
  if (!values_.defined()) return;
  {
    at::NoGradGuard no_grad;
    values_.copy_(flat_params_);
    grads_.zero_();
  }
  CopyRegistry& r = copy_registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  const auto* flat = static_cast<const char*>(flat_params_.data_ptr());
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!copies_[i].defined()) continue;
    // Where no owner is left (the newer one ended), this one takes its weights back.
    auto it = r.entries.try_emplace(params_[i].unsafeGetTensorImpl(), CopyRegistry::Entry{copies_[i]}).first;
    if (!it->second.copy.is_same(copies_[i])) {  // another owns it: its copy is not read while this one trains
      it->second.version = -1;
      continue;
    }
    it->second.version = copy_version(params_[i]);
    // What the copy was filled from: read only while the weight is that (not moved off the flat buffer).
    it->second.data = flat + copies_[i].storage_offset() * static_cast<int64_t>(flat_params_.element_size());
  }
  r.size = r.entries.size();
}

const at::Tensor& LowPrecisionCopies::gradient_source(size_t i) const {
  return copies_.at(i).defined() ? copies_[i] : params_.at(i);
}

void LowPrecisionCopies::fold_gradients(const at::Tensor& flat_grads, int64_t begin, int64_t end) {
  const int64_t lo = std::max(begin, begin_), hi = std::min(end, end_);
  if (lo >= hi) return;
  at::NoGradGuard no_grad;
  at::Tensor grads = grads_.narrow(0, lo - begin_, hi - lo);
  flat_grads.narrow(0, lo, hi - lo).add_(grads);
  grads.zero_();
}

int64_t LowPrecisionCopies::bytes() const {
  if (!values_.defined()) return 0;
  return 2 * values_.numel() * static_cast<int64_t>(values_.element_size());
}

at::Tensor low_precision_copy(const at::Tensor& tensor) {
  CopyRegistry& r = copy_registry();
  if (r.size.load(std::memory_order_relaxed) == 0 || !tensor.defined()) return {};
  // Autocast first (thread-local, no lock): generation and validation in float32 never take the lock.
  const compat::AutocastState autocast = compat::autocast_state(tensor.device().type());
  if (!autocast.enabled) return {};
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.entries.find(tensor.unsafeGetTensorImpl());
  if (it == r.entries.end() || it->second.version != copy_version(tensor) || it->second.data != tensor.data_ptr() ||
      it->second.copy.scalar_type() != autocast.dtype)
    return {};
  r.reads.fetch_add(1, std::memory_order_relaxed);
  return it->second.copy;
}

int64_t low_precision_copy_reads() { return copy_registry().reads.load(); }

}  // namespace fairseq_cpp::nn
