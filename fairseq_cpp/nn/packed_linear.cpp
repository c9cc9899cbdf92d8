#include "fairseq_cpp/nn/packed_linear.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include <ATen/Parallel.h>
#include <c10/util/intrusive_ptr.h>
#include "fairseq_cpp/core/torch.h"

#include "fairseq_cpp/core/runtime.h"
#include "fairseq_cpp/nn/bf16_gemm.h"
#include "fairseq_cpp/nn/low_precision_copies.h"
#include "fairseq_cpp/nn/quantized_linear.h"
#include "fairseq_cpp/nn/widened_bf16.h"

#ifdef FSQ_AVX512_KERNELS
#include <immintrin.h>
#endif

namespace fairseq_cpp::nn {
namespace {

constexpr int64_t kPanel = 32;    // output columns per panel: two AVX-512 registers, four AVX2 ones
constexpr int64_t kRows = 8;      // rows per AVX-512 kernel call: 16 accumulators
constexpr int64_t kRowsAvx2 = 3;  // rows per AVX2 kernel call: 12 accumulators of the 16 registers

thread_local bool scope_enabled = false;

// A weight (N, K) as ceil(N / 32) panels of (K, 32) floats: panel p, row k holds weight[p*32 + j][k]
// for j < 32 (zero past N). One pass, the panels shared among the intra-op threads (before: zeros,
// a copy and a transposing copy on one thread: at transformer-big size 0.85 s against 1.3 s).
at::Tensor pack(const at::Tensor& weight) {
  const at::Tensor w = weight.contiguous();
  const int64_t n = w.size(0), k = w.size(1);
  const int64_t panels = (n + kPanel - 1) / kPanel;
  at::Tensor packed = at::empty({panels, k, kPanel}, w.options());
  const float* from = w.data_ptr<float>();
  float* to = packed.data_ptr<float>();
  at::parallel_for(0, panels, 1, [&](int64_t first, int64_t last) {
    for (int64_t p = first; p < last; ++p) {
      float* panel = to + p * k * kPanel;  // (K, 32); its 32 columns are rows p*32 ... of the weight
      for (int64_t j = 0; j < kPanel; ++j) {
        const int64_t row = p * kPanel + j;
        if (row >= n) {
          for (int64_t c = 0; c < k; ++c) panel[c * kPanel + j] = 0.0f;
          continue;
        }
        const float* values = from + row * k;
        for (int64_t c = 0; c < k; ++c) panel[c * kPanel + j] = values[c];
      }
    }
  });
  return packed;
}

struct Entry {
  Entry(const at::Tensor& weight, c10::ScalarType packed_as)
      : owner(weight.getIntrusivePtr()),
        data(weight.data_ptr()),
        version(static_cast<int64_t>(weight._version())),
        dtype(packed_as),
        sizes(weight.sizes().vec()),
        strides(weight.strides().vec()) {
    c10::InferenceMode inference;
    packed = dtype == at::kBFloat16 ? bf16_pack_b(weight.detach().to(at::kBFloat16).t()).panels : pack(weight.detach());
  }
  bool holds(const at::Tensor& weight, c10::ScalarType packed_as) const {
    if (owner.expired() || dtype != packed_as) return false;
    if (frozen) return true;
    return data == weight.data_ptr() && version == static_cast<int64_t>(weight._version()) &&
           weight.sizes() == c10::IntArrayRef(sizes) && weight.strides() == c10::IntArrayRef(strides);
  }
  c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl> owner;
  const void* data;
  int64_t version;
  c10::ScalarType dtype;  // of the panels: float32 (pack's) or bf16 (bf16_pack_b's, the weight rounded)
  std::vector<int64_t> sizes, strides;
  at::Tensor packed;
  bool frozen = false;  // pack_in_place: the tensor's own values are gone; the panels are the weight
};

// Packed weights by the identity of their tensor. An entry holds a weak reference, so its address
// cannot be reused by another tensor while the entry exists; expired entries are dropped. A change
// of data pointer, shape or version counter (every in-place write through the tensor itself)
// repacks; a write through another tensor sharing the storage is not seen (none in this project).
class PackedWeights {
 public:
  struct Packed {
    at::Tensor panels;
    int64_t n, k;
    c10::ScalarType dtype;
  };
  Packed get(const at::Tensor& weight) {
    std::lock_guard<std::mutex> lock(mutex_);
    const Entry& e = find_or_pack(weight, at::kFloat);
    return {e.packed, e.sizes[0], e.sizes[1], e.dtype};
  }
  // The weight packed in place, or nothing (no lock taken while no weight was).
  std::optional<Packed> frozen(const at::Tensor& weight) {
    if (frozen_ == 0) return std::nullopt;
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(weight.unsafeGetTensorImpl());
    if (it == entries_.end() || !it->second.frozen || it->second.owner.expired()) return std::nullopt;
    return Packed{it->second.packed, it->second.sizes[0], it->second.sizes[1], it->second.dtype};
  }
  void freeze(const at::Tensor& weight, c10::ScalarType packed_as) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(weight.unsafeGetTensorImpl());
    TORCH_CHECK(it == entries_.end() || !it->second.frozen || it->second.owner.expired(),
                "pack_in_place: the weight is packed in place already");
    find_or_pack(weight, packed_as).frozen = true;
    ++frozen_;
  }
  size_t live() {
    std::lock_guard<std::mutex> lock(mutex_);
    drop_expired();
    return entries_.size();
  }

 private:
  Entry& find_or_pack(const at::Tensor& weight, c10::ScalarType packed_as) {
    c10::TensorImpl* impl = weight.unsafeGetTensorImpl();
    auto it = entries_.find(impl);
    if (it != entries_.end() && it->second.holds(weight, packed_as)) return it->second;
    drop_expired();
    return entries_.insert_or_assign(impl, Entry(weight, packed_as)).first->second;
  }
  void drop_expired() {
    for (auto e = entries_.begin(); e != entries_.end();) {
      if (!e->second.owner.expired()) {
        ++e;
        continue;
      }
      if (e->second.frozen) --frozen_;
      e = entries_.erase(e);
    }
  }
  std::mutex mutex_;
  std::unordered_map<c10::TensorImpl*, Entry> entries_;
  std::atomic<size_t> frozen_{0};
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

// r_i += v_i * the 8 weights at w, for kernel_avx2's R rows.
template <int R>
__attribute__((target("avx2,fma"), always_inline)) inline void column_avx2(const float* w, __m256 v0, __m256 v1,
                                                                           __m256 v2, __m256& r0, __m256& r1,
                                                                           __m256& r2) {
  const __m256 wv = _mm256_loadu_ps(w);
  r0 = _mm256_fmadd_ps(v0, wv, r0);
  if constexpr (R > 1) r1 = _mm256_fmadd_ps(v1, wv, r1);
  if constexpr (R > 2) r2 = _mm256_fmadd_ps(v2, wv, r2);
}

// The same as kernel() for CPUs with AVX2 and FMA (no AVX-512F): each row's 32 columns in four
// 8-float registers, the sum in k order as above. The 12 accumulators are named variables: as an
// array GCC 12 stored every one of them to the stack at every k.
template <int R>
__attribute__((target("avx2,fma"))) void kernel_avx2(const float* x, int64_t ldx, const float* panel, int64_t k,
                                                     const float* bias, float* c, int64_t ldc, int64_t cols) {
  static_assert(R >= 1 && R <= 3, "three rows at most: 12 accumulators, 3 inputs and a weight");
  __m256 a00 = _mm256_setzero_ps(), a01 = a00, a02 = a00, a03 = a00;
  __m256 a10 = a00, a11 = a00, a12 = a00, a13 = a00;
  __m256 a20 = a00, a21 = a00, a22 = a00, a23 = a00;
  const float* x1 = x + (R > 1 ? ldx : 0);
  const float* x2 = x + (R > 2 ? 2 * ldx : 0);
  for (int64_t i = 0; i < k; ++i) {
    const float* w = panel + i * kPanel;
    const __m256 v0 = _mm256_broadcast_ss(x + i);
    const __m256 v1 = _mm256_broadcast_ss(x1 + i);
    const __m256 v2 = _mm256_broadcast_ss(x2 + i);
    column_avx2<R>(w, v0, v1, v2, a00, a10, a20);
    column_avx2<R>(w + 8, v0, v1, v2, a01, a11, a21);
    column_avx2<R>(w + 16, v0, v1, v2, a02, a12, a22);
    column_avx2<R>(w + 24, v0, v1, v2, a03, a13, a23);
  }
  alignas(32) float sums[3][kPanel];
  const __m256 rows[3][4] = {{a00, a01, a02, a03}, {a10, a11, a12, a13}, {a20, a21, a22, a23}};
  for (int r = 0; r < R; ++r)
    for (int q = 0; q < 4; ++q) _mm256_store_ps(sums[r] + 8 * q, rows[r][q]);
  for (int r = 0; r < R; ++r) {
    float* out = c + r * ldc;
    for (int64_t j = 0; j < cols; ++j) out[j] = bias != nullptr ? sums[r][j] + bias[j] : sums[r][j];
  }
}

using Kernel = void (*)(const float*, int64_t, const float*, int64_t, const float*, float*, int64_t, int64_t);
constexpr Kernel kKernels[kRows] = {kernel<1>, kernel<2>, kernel<3>, kernel<4>,
                                    kernel<5>, kernel<6>, kernel<7>, kernel<8>};
constexpr Kernel kKernelsAvx2[kRowsAvx2] = {kernel_avx2<1>, kernel_avx2<2>, kernel_avx2<3>};
#endif

}  // namespace

PackedLinearScope::PackedLinearScope() : previous_(scope_enabled) { scope_enabled = true; }
PackedLinearScope::~PackedLinearScope() { scope_enabled = previous_; }

bool packed_linear_supported() { return core::cpu_has_avx512f() || core::cpu_has_avx2_fma(); }

void pack_in_place(at::Tensor weight, c10::ScalarType packed_as) {
  TORCH_CHECK(packed_as == at::kFloat || packed_as == at::kBFloat16, "pack_in_place: float32 or bf16 panels only");
  TORCH_CHECK(packed_as == at::kBFloat16 ? bf16_gemm_supported() : packed_linear_supported(),
              "pack_in_place: this CPU has no kernel for ", packed_as == at::kFloat ? "float32" : "bf16", " panels (",
              packed_as == at::kFloat ? "AVX-512F, or AVX2 with FMA" : "AVX512_BF16", ")");
  TORCH_CHECK(weight.device().is_cpu() && weight.scalar_type() == at::kFloat && weight.dim() == 2,
              "pack_in_place: a float32 (N, K) CPU weight expected");
  packed_weights().freeze(weight, packed_as);
  torch::NoGradGuard no_grad;
  weight.set_data(at::empty({0}, weight.options()));
}

bool packed_in_place(const at::Tensor& weight) { return packed_weights().frozen(weight).has_value(); }

at::Tensor packed_rows(const at::Tensor& weight, const at::Tensor& indices) {
  std::optional<PackedWeights::Packed> packed = packed_weights().frozen(weight);
  TORCH_CHECK(packed.has_value(), "packed_rows: the weight was not packed in place");
  // Row n is column n % 32 of panel n / 32: (P, K, 32)[n / 32, :, n % 32]. In bf16 panels the
  // rows' pairs of values are interleaved: (P, pairs, 32, 2)[n / 32, :, n % 32, :], the first K.
  const at::Tensor rows = indices.to(at::kLong);
  using at::indexing::Slice;
  if (packed->dtype == at::kFloat)
    return packed->panels.index({rows.div(kPanel, "floor"), Slice(), rows.remainder(kPanel)});
  const int64_t k = packed->k, pairs = (k + 1) / 2;
  const at::Tensor values = packed->panels.view(at::kBFloat16).view({-1, pairs, kPanel, 2});
  const at::Tensor picked =
      values.index({rows.reshape({-1}).div(kPanel, "floor"), Slice(), rows.reshape({-1}).remainder(kPanel)});
  std::vector<int64_t> shape(rows.sizes().begin(), rows.sizes().end());
  shape.push_back(k);
  return picked.reshape({-1, 2 * pairs}).narrow(1, 0, k).to(at::kFloat).view(shape);
}

size_t packed_weight_count() { return packed_weights().live(); }

namespace {

// x (..., K) @ the packed weight (N, K)^T + bias, on the kernels of this CPU; bf16 panels: the
// AVX512_BF16 kernel, out in x's dtype.
at::Tensor multiply(const at::Tensor& x, const PackedWeights::Packed& packed, const at::Tensor& bias) {
  const int64_t n = packed.n, k = packed.k;
  TORCH_CHECK(x.size(-1) == k, "packed_linear: the input's last dimension is ", x.size(-1), ", the weight's ", k);
  std::vector<int64_t> out_shape(x.sizes().begin(), x.sizes().end());
  out_shape.back() = n;
  if (packed.dtype == at::kBFloat16)
    return bf16_matmul(x.reshape({-1, k}), Bf16PackedB{packed.panels, k, n}, x.scalar_type(), bias).view(out_shape);
  TORCH_CHECK(x.device().is_cpu() && x.scalar_type() == at::kFloat, "packed_linear: a float32 CPU input expected");
  TORCH_CHECK(!bias.defined() || (bias.device().is_cpu() && bias.scalar_type() == at::kFloat && bias.numel() == n),
              "packed_linear: float32 CPU bias of N values expected");
  const at::Tensor& panels = packed.panels;
  const at::Tensor input = x.reshape({-1, k}).contiguous();
  const at::Tensor b = bias.defined() ? bias.contiguous() : bias;
  const int64_t m = input.size(0);
  at::Tensor out = at::empty({m, n}, x.options());
#ifdef FSQ_AVX512_KERNELS
  const float* xp = input.data_ptr<float>();
  const float* pp = panels.data_ptr<float>();
  const float* bp = b.defined() ? b.data_ptr<float>() : nullptr;
  float* cp = out.data_ptr<float>();
  const bool wide = core::cpu_has_avx512f();
  const Kernel* kernels = wide ? kKernels : kKernelsAvx2;
  const int64_t rows_per_call = wide ? kRows : kRowsAvx2;
  // Intra-op threads share the panels of a product of more than ~50 MFLOP (a hand-over costs tens of us).
  const int64_t grain = std::max<int64_t>(1, 50'000'000 / std::max<int64_t>(1, 2 * m * k * kPanel));
  at::parallel_for(0, panels.size(0), grain, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const float* panel = pp + p * k * kPanel;
      const int64_t col = p * kPanel;
      const int64_t cols = std::min(kPanel, n - col);
      for (int64_t row = 0; row < m; row += rows_per_call) {
        const int64_t rows = std::min(rows_per_call, m - row);
        kernels[rows - 1](xp + row * k, k, panel, k, bp ? bp + col : nullptr, cp + row * n + col, n, cols);
      }
    }
  });
#endif
  return out.view(out_shape);
}

}  // namespace

at::Tensor packed_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  TORCH_CHECK(packed_linear_supported(), "packed_linear: this CPU has neither AVX-512F nor AVX2 with FMA");
  // A weight packed in place is empty (no lock taken for the others).
  if (auto in_place = weight.numel() == 0 ? packed_weights().frozen(weight) : std::nullopt)
    return multiply(x, *in_place, bias);
  TORCH_CHECK(weight.device().is_cpu() && weight.scalar_type() == at::kFloat && weight.dim() == 2,
              "packed_linear: a float32 CPU (N, K) weight expected");
  return multiply(x, packed_weights().get(weight), bias);
}

at::Tensor scoped_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  if (at::Tensor copy = low_precision_copy(weight); copy.defined()) {  // training in bf16: the update's copies
    at::Tensor bias_copy = low_precision_copy(bias);
    const at::Tensor& b = bias_copy.defined() ? bias_copy : bias;
    return widens_bf16_products(x) ? widened_bf16_linear(x, copy, b) : at::linear(x, copy, b);
  }
  const bool needs_grad =
      at::GradMode::is_enabled() && (x.requires_grad() || weight.requires_grad() || (bias.defined() && bias.requires_grad()));
  if (weight.numel() == 0 && x.device().is_cpu()) {  // packed or quantized in place: no gradient reaches it
    if (auto in_place = packed_weights().frozen(weight)) return multiply(x, *in_place, bias);
    if (auto quantized = int8_weight_for(weight)) return int8_linear(x, *quantized, bias);  // quantized in place
  }
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
  if (widens_bf16_products(x)) return widened_bf16_linear(x, weight, bias);  // bf16 on a CPU without bf16 products
  return at::linear(x, weight, bias);
}

}  // namespace fairseq_cpp::nn
