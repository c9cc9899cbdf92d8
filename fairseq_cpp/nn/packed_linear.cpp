#include "fairseq_cpp/nn/packed_linear.h"

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <ATen/Parallel.h>
#include <c10/util/intrusive_ptr.h>
#include "fairseq_cpp/core/torch.h"

#include "fairseq_cpp/core/runtime.h"
#include "fairseq_cpp/nn/quantized_linear.h"

#ifdef FSQ_AVX512_KERNELS
#include <immintrin.h>
#endif

namespace fairseq_cpp::nn {
namespace {

constexpr int64_t kPanel = 32;  // output columns per panel: two 16-float AVX-512 registers
constexpr int64_t kRows = 8;    // rows per kernel call: 16 accumulators

thread_local bool scope_enabled = false;

// A weight (N, K) as ceil(N / 32) panels of (K, 32) floats: panel p, row k holds weight[p*32 + j][k]
// for j < 32 (zero past N).
at::Tensor pack(const at::Tensor& weight) {
  const at::Tensor w = weight.contiguous();
  const int64_t n = w.size(0), k = w.size(1);
  const int64_t panels = (n + kPanel - 1) / kPanel;
  at::Tensor padded = at::zeros({panels * kPanel, k}, w.options());
  padded.narrow(0, 0, n).copy_(w);
  // (P*32, K) -> (P, 32, K) -> (P, K, 32)
  return padded.view({panels, kPanel, k}).transpose(1, 2).contiguous();
}

struct Entry {
  explicit Entry(const at::Tensor& weight)
      : owner(weight.getIntrusivePtr()),
        data(weight.data_ptr()),
        version(static_cast<int64_t>(weight._version())),
        sizes(weight.sizes().vec()),
        strides(weight.strides().vec()) {
    c10::InferenceMode inference;
    packed = pack(weight.detach());
  }
  bool holds(const at::Tensor& weight) const {
    return !owner.expired() && data == weight.data_ptr() && version == static_cast<int64_t>(weight._version()) &&
           weight.sizes() == c10::IntArrayRef(sizes) && weight.strides() == c10::IntArrayRef(strides);
  }
  c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl> owner;
  const void* data;
  int64_t version;
  std::vector<int64_t> sizes, strides;
  at::Tensor packed;
};

// Packed weights by the identity of their tensor. An entry holds a weak reference, so its address
// cannot be reused by another tensor while the entry exists; expired entries are dropped. A change
// of data pointer, shape or version counter (every in-place write through the tensor itself)
// repacks; a write through another tensor sharing the storage is not seen (none in this project).
class PackedWeights {
 public:
  at::Tensor get(const at::Tensor& weight) {
    std::lock_guard<std::mutex> lock(mutex_);
    c10::TensorImpl* impl = weight.unsafeGetTensorImpl();
    auto it = entries_.find(impl);
    if (it != entries_.end() && it->second.holds(weight)) return it->second.packed;
    drop_expired();
    return entries_.insert_or_assign(impl, Entry(weight)).first->second.packed;
  }
  size_t live() {
    std::lock_guard<std::mutex> lock(mutex_);
    drop_expired();
    return entries_.size();
  }

 private:
  void drop_expired() {
    for (auto e = entries_.begin(); e != entries_.end();) e = e->second.owner.expired() ? entries_.erase(e) : ++e;
  }
  std::mutex mutex_;
  std::unordered_map<c10::TensorImpl*, Entry> entries_;
};

PackedWeights& packed_weights() {
  static PackedWeights* cache = new PackedWeights();  // never destroyed: no order-of-exit issues
  return *cache;
}

#ifdef FSQ_AVX512_KERNELS
// C[r][0..cols) = sum_k x[r][k] * panel[k][0..cols) (+ bias) for R rows, the sum in k order.
template <int R>
__attribute__((target("avx512f"))) void kernel(const float* x, int64_t ldx, const float* panel, int64_t k,
                                               const float* bias, float* c, int64_t ldc, int64_t cols) {
  __m512 acc[R][2];
  for (int r = 0; r < R; ++r) {
    acc[r][0] = _mm512_setzero_ps();
    acc[r][1] = _mm512_setzero_ps();
  }
  for (int64_t i = 0; i < k; ++i) {
    const __m512 w0 = _mm512_loadu_ps(panel + i * kPanel);
    const __m512 w1 = _mm512_loadu_ps(panel + i * kPanel + 16);
    for (int r = 0; r < R; ++r) {
      const __m512 xv = _mm512_set1_ps(x[r * ldx + i]);
      acc[r][0] = _mm512_fmadd_ps(xv, w0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(xv, w1, acc[r][1]);
    }
  }
  const auto low = static_cast<__mmask16>(cols >= 16 ? 0xFFFF : (1u << cols) - 1);
  const auto high = static_cast<__mmask16>(cols >= 32 ? 0xFFFF : cols <= 16 ? 0 : (1u << (cols - 16)) - 1);
  if (bias != nullptr) {
    const __m512 b0 = _mm512_maskz_loadu_ps(low, bias);
    const __m512 b1 = _mm512_maskz_loadu_ps(high, bias + 16);
    for (int r = 0; r < R; ++r) {
      acc[r][0] = _mm512_add_ps(acc[r][0], b0);
      acc[r][1] = _mm512_add_ps(acc[r][1], b1);
    }
  }
  for (int r = 0; r < R; ++r) {
    _mm512_mask_storeu_ps(c + r * ldc, low, acc[r][0]);
    _mm512_mask_storeu_ps(c + r * ldc + 16, high, acc[r][1]);
  }
}

using Kernel = void (*)(const float*, int64_t, const float*, int64_t, const float*, float*, int64_t, int64_t);
constexpr Kernel kKernels[kRows] = {kernel<1>, kernel<2>, kernel<3>, kernel<4>,
                                    kernel<5>, kernel<6>, kernel<7>, kernel<8>};
#endif

}  // namespace

PackedLinearScope::PackedLinearScope() : previous_(scope_enabled) { scope_enabled = true; }
PackedLinearScope::~PackedLinearScope() { scope_enabled = previous_; }

bool packed_linear_supported() { return core::cpu_has_avx512f(); }

size_t packed_weight_count() { return packed_weights().live(); }

at::Tensor packed_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  TORCH_CHECK(packed_linear_supported(), "packed_linear: this CPU has no AVX-512F");
  TORCH_CHECK(x.device().is_cpu() && weight.device().is_cpu() && x.scalar_type() == at::kFloat &&
                  weight.scalar_type() == at::kFloat && weight.dim() == 2 && x.size(-1) == weight.size(1),
              "packed_linear: float32 CPU (..., K) input and (N, K) weight expected");
  TORCH_CHECK(!bias.defined() || (bias.device().is_cpu() && bias.scalar_type() == at::kFloat &&
                                  bias.numel() == weight.size(0)),
              "packed_linear: float32 CPU bias of N values expected");
  const int64_t n = weight.size(0), k = weight.size(1);
  const at::Tensor panels = packed_weights().get(weight);
  const at::Tensor input = x.reshape({-1, k}).contiguous();
  const at::Tensor b = bias.defined() ? bias.contiguous() : bias;
  const int64_t m = input.size(0);
  std::vector<int64_t> out_shape(x.sizes().begin(), x.sizes().end());
  out_shape.back() = n;
  at::Tensor out = at::empty({m, n}, x.options());
#ifdef FSQ_AVX512_KERNELS
  const float* xp = input.data_ptr<float>();
  const float* pp = panels.data_ptr<float>();
  const float* bp = b.defined() ? b.data_ptr<float>() : nullptr;
  float* cp = out.data_ptr<float>();
  // Intra-op threads share the panels when each gets at least ~50 MFLOP (a hand-over costs tens of us).
  const int64_t grain = std::max<int64_t>(1, 50'000'000 / std::max<int64_t>(1, 2 * m * k * kPanel));
  at::parallel_for(0, panels.size(0), grain, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const float* panel = pp + p * k * kPanel;
      const int64_t col = p * kPanel;
      const int64_t cols = std::min(kPanel, n - col);
      for (int64_t row = 0; row < m; row += kRows) {
        const int64_t rows = std::min(kRows, m - row);
        kKernels[rows - 1](xp + row * k, k, panel, k, bp ? bp + col : nullptr, cp + row * n + col, n, cols);
      }
    }
  });
#endif
  return out.view(out_shape);
}

at::Tensor scoped_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  const bool needs_grad =
      at::GradMode::is_enabled() && (x.requires_grad() || weight.requires_grad() || (bias.defined() && bias.requires_grad()));
  if (!needs_grad && x.device().is_cpu() && x.scalar_type() == at::kFloat) {
    if (auto quantized = int8_weight_for(weight)) return int8_linear(x, *quantized, bias);  // --quantize int8
  }
  if (scope_enabled && !needs_grad && packed_linear_supported() && x.device().is_cpu() && weight.device().is_cpu() &&
      x.scalar_type() == at::kFloat && weight.scalar_type() == at::kFloat && !weight.is_inference() &&
      (!bias.defined() || bias.scalar_type() == at::kFloat)) {
    return packed_linear(x, weight, bias);
  }
  // ATen's linear, not the C++ frontend's (which adds the bias in place after a 3-D matmul: outside
  // autocast, so a bf16 product took a float32 bias through a mixed-type broadcast kernel, 10% of
  // the big model's step on the H100, and its gradient through a separate sum): autocast casts the
  // bias with the operands, and the bias joins the GEMM where LibTorch can fuse it.
  return at::linear(x, weight, bias);
}

}  // namespace fairseq_cpp::nn
