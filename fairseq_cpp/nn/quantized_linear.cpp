#include "fairseq_cpp/nn/quantized_linear.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <ATen/Parallel.h>
#include <c10/util/intrusive_ptr.h>
#include "fairseq_cpp/core/torch.h"

#include "fairseq_cpp/core/runtime.h"

#ifdef FSQ_AVX512_KERNELS
#include <immintrin.h>
#endif

namespace fairseq_cpp::nn {
namespace {

constexpr int64_t kPanel = 32;  // output columns per panel: two 16-lane int32 registers
constexpr int64_t kGroup = 4;   // inner products per int32 lane (vpdpbusd)
constexpr int64_t kRows = 8;    // rows per kernel call: 16 accumulators

int64_t round_up(int64_t v, int64_t to) { return (v + to - 1) / to * to; }

#ifdef FSQ_AVX512_KERNELS
// GCC 12's AVX-512 intrinsics pass _mm512_undefined_ps() as the unused merge source and then warn
// about it (GCC bug 105593, fixed in 13).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#define FSQ_VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))

__mmask16 first_lanes(int64_t count) {
  return static_cast<__mmask16>(count >= 16 ? 0xFFFF : count <= 0 ? 0 : (1u << count) - 1);
}

// Rows of x (M, K) -> u8 (M, K4): round(x * 127 / max|x_r|) + 128, 128 (zero) past K; scales[r] =
// max|x_r| / 127.
FSQ_VNNI_TARGET void quantize_rows(const float* x, int64_t ldx, int64_t m, int64_t k, int64_t k4, uint8_t* q,
                                   float* scales) {
  const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127), shift = _mm512_set1_epi32(128);
  for (int64_t r = 0; r < m; ++r) {
    const float* row = x + r * ldx;
    __m512 vmax = _mm512_setzero_ps();
    for (int64_t i = 0; i < k; i += 16)
      vmax = _mm512_max_ps(vmax, _mm512_abs_ps(_mm512_maskz_loadu_ps(first_lanes(k - i), row + i)));
    const float amax = _mm512_reduce_max_ps(vmax);
    const float inv = amax > 0 ? 127.0f / amax : 0.0f;
    scales[r] = amax / 127.0f;
    const __m512 vinv = _mm512_set1_ps(inv);
    uint8_t* out = q + r * k4;
    for (int64_t i = 0; i < k; i += 16) {
      const __mmask16 mask = first_lanes(k - i);
      // _mm512_cvtps_epi32 rounds half to even (the default MXCSR mode), as torch.round does.
      __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_maskz_loadu_ps(mask, row + i), vinv));
      v = _mm512_add_epi32(_mm512_min_epi32(_mm512_max_epi32(v, lo), hi), shift);
      _mm_mask_storeu_epi8(out + i, mask, _mm512_cvtepi32_epi8(v));
    }
    std::fill(out + k, out + k4, uint8_t{128});
  }
}

// C[r][0..cols) = (sum_g xq[r][4g..4g+4) . panel[g][j]) - comp[j]) * x_scale[r] * w_scale[j] + bias[j]
// for R rows; the int32 sums are exact.
template <int R>
FSQ_VNNI_TARGET void kernel(const uint8_t* xq, int64_t ldx, const int8_t* panel, int64_t groups, const float* x_scale,
                            const float* w_scale, const int32_t* comp, const float* bias, float* c, int64_t ldc,
                            int64_t cols) {
  __m512i acc[R][2];
  for (int r = 0; r < R; ++r) {
    acc[r][0] = _mm512_setzero_si512();
    acc[r][1] = _mm512_setzero_si512();
  }
  for (int64_t g = 0; g < groups; ++g) {
    const __m512i w0 = _mm512_loadu_si512(panel + g * kPanel * kGroup);
    const __m512i w1 = _mm512_loadu_si512(panel + g * kPanel * kGroup + 64);
    for (int r = 0; r < R; ++r) {
      int32_t four;
      std::memcpy(&four, xq + r * ldx + g * kGroup, sizeof four);
      const __m512i xv = _mm512_set1_epi32(four);
      acc[r][0] = _mm512_dpbusd_epi32(acc[r][0], xv, w0);
      acc[r][1] = _mm512_dpbusd_epi32(acc[r][1], xv, w1);
    }
  }
  const __mmask16 low = first_lanes(cols), high = first_lanes(cols - 16);
  const __m512i c0 = _mm512_loadu_si512(comp), c1 = _mm512_loadu_si512(comp + 16);
  const __m512 s0 = _mm512_loadu_ps(w_scale), s1 = _mm512_loadu_ps(w_scale + 16);
  const __m512 b0 = bias ? _mm512_maskz_loadu_ps(low, bias) : _mm512_setzero_ps();
  const __m512 b1 = bias ? _mm512_maskz_loadu_ps(high, bias + 16) : _mm512_setzero_ps();
  for (int r = 0; r < R; ++r) {
    const __m512 sx = _mm512_set1_ps(x_scale[r]);
    const __m512 y0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(acc[r][0], c0)), _mm512_mul_ps(sx, s0), b0);
    const __m512 y1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(acc[r][1], c1)), _mm512_mul_ps(sx, s1), b1);
    _mm512_mask_storeu_ps(c + r * ldc, low, y0);
    _mm512_mask_storeu_ps(c + r * ldc + 16, high, y1);
  }
}

using Kernel = void (*)(const uint8_t*, int64_t, const int8_t*, int64_t, const float*, const float*, const int32_t*,
                        const float*, float*, int64_t, int64_t);
constexpr Kernel kKernels[kRows] = {kernel<1>, kernel<2>, kernel<3>, kernel<4>,
                                    kernel<5>, kernel<6>, kernel<7>, kernel<8>};
#pragma GCC diagnostic pop
#endif

bool cpu_has(const char* feature) {
#ifdef FSQ_AVX512_KERNELS
  // __builtin_cpu_supports needs a literal; the features this kernel needs, one by one.
  const std::string f = feature;
  if (f == "avx512f") return __builtin_cpu_supports("avx512f");
  if (f == "avx512bw") return __builtin_cpu_supports("avx512bw");
  if (f == "avx512vl") return __builtin_cpu_supports("avx512vl");
  if (f == "avx512vnni") return __builtin_cpu_supports("avx512vnni");
#endif
  (void)feature;
  return false;
}

// An inference tensor has no version counter (and cannot be changed in place outside inference mode).
int64_t version_of(const at::Tensor& t) { return t.is_inference() ? -1 : static_cast<int64_t>(t._version()); }

// Quantized copies by the identity of their float tensor, as packed_linear.cpp's cache: a weak
// reference keeps the address from being reused while the entry exists.
struct Entry {
  explicit Entry(const at::Tensor& weight)
      : owner(weight.getIntrusivePtr()),
        data(weight.data_ptr()),
        version(version_of(weight)),
        quantized(std::make_shared<const Int8Weight>(Int8Weight::quantize(weight))) {}
  bool current(const at::Tensor& weight) const { return data == weight.data_ptr() && version == version_of(weight); }
  c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl> owner;
  const void* data;
  int64_t version;
  std::shared_ptr<const Int8Weight> quantized;
};

class Int8Registry {
 public:
  void add(const at::Tensor& weight) {
    std::lock_guard<std::mutex> lock(mutex_);
    drop_expired();
    entries_.insert_or_assign(weight.unsafeGetTensorImpl(), Entry(weight));
    size_ = entries_.size();
  }
  std::shared_ptr<const Int8Weight> find(const at::Tensor& weight) {
    if (size_.load(std::memory_order_relaxed) == 0) return nullptr;  // no model quantized: no lock
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(weight.unsafeGetTensorImpl());
    if (it == entries_.end() || it->second.owner.expired()) return nullptr;
    if (!it->second.current(weight)) it->second = Entry(weight);
    return it->second.quantized;
  }
  size_t live() {
    std::lock_guard<std::mutex> lock(mutex_);
    drop_expired();
    return size_ = entries_.size();
  }

 private:
  void drop_expired() {
    for (auto e = entries_.begin(); e != entries_.end();) e = e->second.owner.expired() ? entries_.erase(e) : ++e;
  }
  std::mutex mutex_;
  std::unordered_map<c10::TensorImpl*, Entry> entries_;
  std::atomic<size_t> size_{0};
};

Int8Registry& registry() {
  static Int8Registry* r = new Int8Registry();  // never destroyed: no order-of-exit issues
  return *r;
}

}  // namespace

std::string int8_linear_unsupported_reason() {
#ifndef FSQ_AVX512_KERNELS
  return "this build has no AVX-512 kernels (it needs x86-64 and GCC or Clang)";
#else
  std::vector<std::string> missing;
  for (const char* f : {"avx512f", "avx512bw", "avx512vl", "avx512vnni"})
    if (!cpu_has(f)) missing.emplace_back(f);
  if (missing.empty()) return "";
  std::string names;
  for (const auto& f : missing) names += (names.empty() ? "" : ", ") + f;
  return "this CPU lacks " + names + " (the int8 kernel needs AVX-512 VNNI; see the flags in /proc/cpuinfo)";
#endif
}

bool int8_linear_supported() {
  static const bool yes = int8_linear_unsupported_reason().empty();
  return yes;
}

Int8Weight Int8Weight::quantize(const at::Tensor& weight) {
  TORCH_CHECK(weight.dim() == 2 && weight.device().is_cpu() && weight.scalar_type() == at::kFloat,
              "Int8Weight::quantize: a float32 (N, K) CPU weight expected");
  c10::InferenceMode inference;
  const at::Tensor w = weight.detach().contiguous();
  Int8Weight out;
  out.n_ = w.size(0);
  out.k_ = w.size(1);
  const int64_t panels = (out.n_ + kPanel - 1) / kPanel, k4 = round_up(out.k_, kGroup);
  const at::Tensor amax = w.abs().amax(1);  // (N)
  // 127 / amax as one float32 division (not reciprocal * 127), 0 for an all-zero row.
  const at::Tensor inv = at::where(amax > 0, at::full_like(amax, 127.0f) / amax, at::zeros_like(amax));
  const at::Tensor q = (w * inv.unsqueeze(1)).round().clamp(-127, 127).to(at::kChar);  // (N, K)
  at::Tensor padded = at::zeros({panels * kPanel, k4}, q.options());
  padded.narrow(0, 0, out.n_).narrow(1, 0, out.k_).copy_(q);
  // (P*32, K4) -> (P, 32, K4/4, 4) -> (P, K4/4, 32, 4)
  out.panels_ = padded.view({panels, kPanel, k4 / kGroup, kGroup}).permute({0, 2, 1, 3}).contiguous();
  out.scales_ = at::zeros({panels * kPanel}, w.options());
  out.scales_.narrow(0, 0, out.n_).copy_(amax / 127.0f);
  out.compensation_ = at::zeros({panels * kPanel}, w.options().dtype(at::kInt));
  out.compensation_.narrow(0, 0, out.n_).copy_(q.to(at::kInt).sum(1) * 128);
  return out;
}

at::Tensor Int8Weight::scales() const { return scales_.narrow(0, 0, n_); }

at::Tensor Int8Weight::values() const {
  const int64_t panels = panels_.size(0), groups = panels_.size(1);
  // (P, K4/4, 32, 4) -> (P, 32, K4/4, 4) -> (P*32, K4)
  return panels_.permute({0, 2, 1, 3}).reshape({panels * kPanel, groups * kGroup}).narrow(0, 0, n_).narrow(1, 0, k_);
}

at::Tensor int8_linear(const at::Tensor& x, const Int8Weight& weight, const at::Tensor& bias) {
  TORCH_CHECK(int8_linear_supported(), "int8_linear: ", int8_linear_unsupported_reason());
  const int64_t n = weight.n_, k = weight.k_;
  TORCH_CHECK(x.device().is_cpu() && x.scalar_type() == at::kFloat && x.dim() >= 1 && x.size(-1) == k,
              "int8_linear: a float32 CPU (..., ", k, ") input expected");
  TORCH_CHECK(!bias.defined() || (bias.device().is_cpu() && bias.scalar_type() == at::kFloat && bias.numel() == n),
              "int8_linear: a float32 CPU bias of ", n, " values expected");
  const at::Tensor input = x.reshape({-1, k}).contiguous();
  const at::Tensor b = bias.defined() ? bias.contiguous() : bias;
  const int64_t m = input.size(0);
  std::vector<int64_t> out_shape(x.sizes().begin(), x.sizes().end());
  out_shape.back() = n;
  at::Tensor out = at::empty({m, n}, x.options());
#ifdef FSQ_AVX512_KERNELS
  const int64_t groups = weight.panels_.size(1), k4 = groups * kGroup;
  std::vector<uint8_t> xq(static_cast<size_t>(m * k4));
  std::vector<float> x_scales(static_cast<size_t>(m));
  quantize_rows(input.data_ptr<float>(), k, m, k, k4, xq.data(), x_scales.data());
  const int8_t* pp = weight.panels_.data_ptr<int8_t>();
  const float* ws = weight.scales_.data_ptr<float>();
  const int32_t* comp = weight.compensation_.data_ptr<int32_t>();
  const float* bp = b.defined() ? b.data_ptr<float>() : nullptr;
  float* cp = out.data_ptr<float>();
  // Intra-op threads share the panels when each gets at least ~50 M multiply-adds.
  const int64_t grain = std::max<int64_t>(1, 50'000'000 / std::max<int64_t>(1, m * k4 * kPanel));
  at::parallel_for(0, weight.panels_.size(0), grain, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const int8_t* panel = pp + p * groups * kPanel * kGroup;
      const int64_t col = p * kPanel;
      const int64_t cols = std::min(kPanel, n - col);
      for (int64_t row = 0; row < m; row += kRows) {
        const int64_t rows = std::min(kRows, m - row);
        kKernels[rows - 1](xq.data() + row * k4, k4, panel, groups, x_scales.data() + row, ws + col, comp + col,
                           bp ? bp + col : nullptr, cp + row * n + col, n, cols);
      }
    }
  });
#endif
  return out.view(out_shape);
}

void use_int8_weight(const at::Tensor& weight) {
  TORCH_CHECK(int8_linear_supported(), "use_int8_weight: ", int8_linear_unsupported_reason());
  registry().add(weight);
}

std::shared_ptr<const Int8Weight> int8_weight_for(const at::Tensor& weight) { return registry().find(weight); }

size_t int8_weight_count() { return registry().live(); }

}  // namespace fairseq_cpp::nn
