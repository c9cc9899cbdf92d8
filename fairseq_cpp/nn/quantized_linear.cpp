#include "fairseq_cpp/nn/quantized_linear.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
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

#define FSQ_AVX2_TARGET __attribute__((target("avx2,fma")))

// quantize_rows for CPUs with AVX2 only: the same values (the same float32 product, rounded half
// to even by the same conversion), stored as signed bytes (no +128 shift), 0 past K.
FSQ_AVX2_TARGET void quantize_rows_avx2(const float* x, int64_t ldx, int64_t m, int64_t k, int64_t k4, uint8_t* q,
                                        float* scales) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256i lo = _mm256_set1_epi32(-127), hi = _mm256_set1_epi32(127);
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  // Byte 0 of each int32 lane, lanes 0-3 then 4-7, into the low 8 bytes.
  const __m256i bytes = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 4, 8, 12, -1,
                                         -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  for (int64_t r = 0; r < m; ++r) {
    const float* row = x + r * ldx;
    __m256 vmax = _mm256_setzero_ps();
    for (int64_t i = 0; i < k; i += 8) {
      const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(std::min<int64_t>(k - i, 8))), lanes);
      vmax = _mm256_max_ps(vmax, _mm256_andnot_ps(sign, _mm256_maskload_ps(row + i, mask)));
    }
    alignas(32) float maxes[8];
    _mm256_store_ps(maxes, vmax);
    const float amax = *std::max_element(maxes, maxes + 8);
    const float inv = amax > 0 ? 127.0f / amax : 0.0f;
    scales[r] = amax / 127.0f;
    const __m256 vinv = _mm256_set1_ps(inv);
    uint8_t* out = q + r * k4;
    for (int64_t i = 0; i < k; i += 8) {
      const int64_t count = std::min<int64_t>(k - i, 8);
      const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(count)), lanes);
      __m256i v = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_maskload_ps(row + i, mask), vinv));
      v = _mm256_shuffle_epi8(_mm256_min_epi32(_mm256_max_epi32(v, lo), hi), bytes);
      const uint32_t low = static_cast<uint32_t>(_mm256_extract_epi32(v, 0));
      const uint32_t high = static_cast<uint32_t>(_mm256_extract_epi32(v, 4));
      const uint64_t eight = low | static_cast<uint64_t>(high) << 32;
      std::memcpy(out + i, &eight, static_cast<size_t>(count));
    }
    std::fill(out + k, out + k4, uint8_t{0});
  }
}

// acc_r += the int32 sums of 4 products x_r . w for the 8 columns of w (32 bytes of a group), R rows.
// x_r holds a row's 4 signed values in each lane. vpmaddubsw multiplies u8 by s8: |w| by x with w's
// sign, so that each pair of products is at most 2 * 127 * 127 = 32,258 in magnitude and never
// saturates its 16 bits; vpmaddwd by ones adds the pairs into the column's int32 lane. The sums are
// exact, the VNNI kernel's (which takes back its +128 shift).
template <int R>
__attribute__((target("avx2,fma"), always_inline)) inline void column_avx2(const int8_t* w, __m256i x0, __m256i x1,
                                                                           __m256i ones, __m256i& a0, __m256i& a1) {
  const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
  const __m256i magnitude = _mm256_abs_epi8(wv);
  a0 = _mm256_add_epi32(a0, _mm256_madd_epi16(_mm256_maddubs_epi16(magnitude, _mm256_sign_epi8(x0, wv)), ones));
  if constexpr (R > 1)
    a1 = _mm256_add_epi32(a1, _mm256_madd_epi16(_mm256_maddubs_epi16(magnitude, _mm256_sign_epi8(x1, wv)), ones));
}

// A row's 4 signed bytes at p in each 32-bit lane (one vpbroadcastd from memory).
__attribute__((target("avx2"), always_inline)) inline __m256i four_bytes(const uint8_t* p) {
  int32_t four;
  std::memcpy(&four, p, sizeof four);
  return _mm256_set1_epi32(four);
}

// kernel() for CPUs with AVX2 only, R <= 2 rows of quantize_rows_avx2's signed bytes: each row's 32
// columns in four 8-lane registers, named (not an array, which GCC 12 keeps on the stack; with three
// rows it spilled, and measured no faster). No compensation is needed (no shift). The epilogue is the VNNI
// kernel's arithmetic, fma(sum, x_scale * w_scale, bias), so both give the same bits; written with
// 8-lane vectors it made the kernel a third slower here (AMD Zen 3), so it is scalar.
template <int R>
FSQ_AVX2_TARGET void kernel_avx2(const uint8_t* xq, int64_t ldx, const int8_t* panel, int64_t groups,
                                 const float* x_scale, const float* w_scale, const int32_t* /*comp*/, const float* bias,
                                 float* c, int64_t ldc, int64_t cols) {
  static_assert(R >= 1 && R <= 2, "two rows at most: 8 accumulators, 2 inputs, a weight, its magnitude and ones");
  __m256i a00 = _mm256_setzero_si256(), a01 = a00, a02 = a00, a03 = a00;
  __m256i a10 = a00, a11 = a00, a12 = a00, a13 = a00;
  const __m256i ones = _mm256_set1_epi16(1);
  const uint8_t* x1 = xq + (R > 1 ? ldx : 0);
  for (int64_t g = 0; g < groups; ++g) {
    const int8_t* w = panel + g * kPanel * kGroup;
    const __m256i v0 = four_bytes(xq + g * kGroup), v1 = four_bytes(x1 + g * kGroup);
    column_avx2<R>(w, v0, v1, ones, a00, a10);
    column_avx2<R>(w + 32, v0, v1, ones, a01, a11);
    column_avx2<R>(w + 64, v0, v1, ones, a02, a12);
    column_avx2<R>(w + 96, v0, v1, ones, a03, a13);
  }
  alignas(32) int32_t sums[2][kPanel];
  const __m256i rows[2][4] = {{a00, a01, a02, a03}, {a10, a11, a12, a13}};
  for (int r = 0; r < R; ++r)
    for (int q = 0; q < 4; ++q) _mm256_store_si256(reinterpret_cast<__m256i*>(sums[r] + 8 * q), rows[r][q]);
  for (int r = 0; r < R; ++r) {
    float* out = c + r * ldc;
    for (int64_t j = 0; j < cols; ++j)
      out[j] = std::fma(static_cast<float>(sums[r][j]), x_scale[r] * w_scale[j], bias != nullptr ? bias[j] : 0.0f);
  }
}

using Kernel = void (*)(const uint8_t*, int64_t, const int8_t*, int64_t, const float*, const float*, const int32_t*,
                        const float*, float*, int64_t, int64_t);
constexpr Kernel kKernels[kRows] = {kernel<1>, kernel<2>, kernel<3>, kernel<4>,
                                    kernel<5>, kernel<6>, kernel<7>, kernel<8>};
constexpr int64_t kRowsAvx2 = 2;
constexpr Kernel kKernelsAvx2[kRowsAvx2] = {kernel_avx2<1>, kernel_avx2<2>};
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
  bool current(const at::Tensor& weight) const {
    return frozen || (data == weight.data_ptr() && version == version_of(weight));
  }
  c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl> owner;
  const void* data;
  int64_t version;
  std::shared_ptr<const Int8Weight> quantized;
  bool frozen = false;  // quantize_in_place: the tensor's float32 values are gone; the int8 copy is the weight
};

class Int8Registry {
 public:
  void add(const at::Tensor& weight, bool frozen) {
    std::lock_guard<std::mutex> lock(mutex_);
    drop_expired();
    auto it = entries_.find(weight.unsafeGetTensorImpl());
    if (it == entries_.end() || it->second.owner.expired() || !it->second.current(weight))
      it = entries_.insert_or_assign(weight.unsafeGetTensorImpl(), Entry(weight)).first;
    it->second.frozen = it->second.frozen || frozen;
    size_ = entries_.size();
  }
  // The copy of a weight quantized in place (its only values), or null.
  std::shared_ptr<const Int8Weight> frozen(const at::Tensor& weight) {
    if (size_.load(std::memory_order_relaxed) == 0) return nullptr;
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(weight.unsafeGetTensorImpl());
    if (it == entries_.end() || it->second.owner.expired() || !it->second.frozen) return nullptr;
    return it->second.quantized;
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

namespace {

// Whether the AVX-512 VNNI kernel runs here (core::use_avx2_kernels_only sets it aside in tests).
bool use_vnni() {
  static const bool yes = cpu_has("avx512f") && cpu_has("avx512bw") && cpu_has("avx512vl") && cpu_has("avx512vnni");
  return yes && core::cpu_has_avx512f();
}

}  // namespace

std::string int8_linear_unsupported_reason() {
#ifndef FSQ_AVX512_KERNELS
  return "this build has no x86-64 vector kernels (it needs x86-64 and GCC or Clang)";
#else
  if (use_vnni() || core::cpu_has_avx2_fma()) return "";
  return "this CPU lacks both AVX-512 VNNI (avx512_vnni) and AVX2 with FMA (avx2, fma), one of which the int8 "
         "kernel needs (see the flags in /proc/cpuinfo)";
#endif
}

bool int8_linear_supported() {
  // The same with core::use_avx2_kernels_only: a CPU with VNNI has AVX2.
  static const bool yes = int8_linear_unsupported_reason().empty();
  return yes;
}

const char* int8_linear_kernel() { return use_vnni() ? "AVX-512 VNNI" : "AVX2"; }

namespace {

// Weight w[c] times `inv`, rounded half to even and clamped to +-127 (a NaN product: 0), written
// at its place in a row's panel column; returns it.
inline int32_t quantize_into(const float* w, int64_t c, float inv, int8_t* column) {
  const float r = std::nearbyint(w[c] * inv);
  const int32_t q = std::isnan(r) ? 0 : static_cast<int32_t>(std::min(127.0f, std::max(-127.0f, r)));
  column[(c / kGroup) * kPanel * kGroup + c % kGroup] = static_cast<int8_t>(q);
  return q;
}

// Row `row` of the (N, K) float32 weight `w`, quantized symmetrically per output channel:
// q = round(w * (127 / max|w|)) (half to even, clamped to +-127; 0 for an all-zero row, and for
// a NaN product: a non-finite weight, or a zero in a row whose 127 / max|w| overflows) written
// into its column of the panels; its scale max|w| / 127 and its compensation 128 * sum q.
void quantize_row(const float* w, int64_t k, int64_t groups, int8_t* panels, float* scale, int32_t* compensation,
                  int64_t row) {
  float amax = 0.0f;
  for (int64_t c = 0; c < k; ++c) {
    const float a = std::fabs(w[c]);
    amax = std::isnan(a) ? a : std::max(amax, a);  // a NaN stays (std::max keeps its first argument), as amax's
  }
  const float inv = amax > 0 ? 127.0f / amax : 0.0f;  // one float32 division, not 127 * (1 / amax)
  int8_t* column = panels + (row / kPanel) * groups * kPanel * kGroup + (row % kPanel) * kGroup;
  int64_t sum = 0;  // (int32 products overflow the kernels' sums first, past K = 66,000)
  for (int64_t c = 0; c < k; ++c) sum += quantize_into(w, c, inv, column);
  *scale = amax / 127.0f;
  *compensation = static_cast<int32_t>(sum * 128);
}

#ifdef FSQ_AVX512_KERNELS
// quantize_row eight weights at a time with AVX2: the same products, clamped to +-127 and then
// converted half to even (std::nearbyint's rounding in the default mode, the conversion's in the
// default MXCSR), a NaN product to 0; the same scale and sum (a row with a NaN: quantize_row's).
__attribute__((target("avx2,fma"))) void quantize_row_avx2(const float* w, int64_t k, int64_t groups, int8_t* panels,
                                                           float* scale, int32_t* compensation, int64_t row) {
  const int64_t vectors = k / 8 * 8;
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 vmax = _mm256_setzero_ps(), unordered = _mm256_setzero_ps();
  for (int64_t c = 0; c < vectors; c += 8) {
    const __m256 a = _mm256_andnot_ps(sign, _mm256_loadu_ps(w + c));
    unordered = _mm256_or_ps(unordered, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
    vmax = _mm256_max_ps(a, vmax);  // a NaN `a` gives vmax (the second operand): noted above instead
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, vmax);
  float amax = *std::max_element(lanes, lanes + 8);
  bool nan = _mm256_movemask_ps(unordered) != 0;
  for (int64_t c = vectors; c < k; ++c) {
    const float a = std::fabs(w[c]);
    nan = nan || std::isnan(a);
    amax = std::max(amax, a);
  }
  if (nan) {  // the scalar loop's scale keeps the NaN's own bits
    quantize_row(w, k, groups, panels, scale, compensation, row);
    return;
  }
  const float inv = amax > 0 ? 127.0f / amax : 0.0f;
  int8_t* column = panels + (row / kPanel) * groups * kPanel * kGroup + (row % kPanel) * kGroup;
  const __m256 vinv = _mm256_set1_ps(inv), lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
  // Byte 0 of each int32 lane: lanes 0-3 into the low half's first 4 bytes, lanes 4-7 the high's.
  const __m256i bytes = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 4, 8, 12, -1,
                                         -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  __m256i sums = _mm256_setzero_si256();  // per lane at most 127 * K / 8: no overflow below K = 135M
  for (int64_t c = 0; c < vectors; c += 8) {
    const __m256 x = _mm256_mul_ps(_mm256_loadu_ps(w + c), vinv);
    // max(NaN, -127) is -127 (the second operand); the ordered mask then makes it 0.
    const __m256 clamped = _mm256_and_ps(_mm256_min_ps(_mm256_max_ps(x, lo), hi), _mm256_cmp_ps(x, x, _CMP_ORD_Q));
    const __m256i q = _mm256_cvtps_epi32(clamped);
    sums = _mm256_add_epi32(sums, q);
    const __m256i packed = _mm256_shuffle_epi8(q, bytes);
    const int32_t first = _mm256_extract_epi32(packed, 0), second = _mm256_extract_epi32(packed, 4);
    std::memcpy(column + (c / kGroup) * kPanel * kGroup, &first, kGroup);
    std::memcpy(column + (c / kGroup + 1) * kPanel * kGroup, &second, kGroup);
  }
  alignas(32) int32_t lane_sums[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lane_sums), sums);
  int64_t sum = 0;
  for (int32_t lane : lane_sums) sum += lane;
  for (int64_t c = vectors; c < k; ++c) sum += quantize_into(w, c, inv, column);
  *scale = amax / 127.0f;
  *compensation = static_cast<int32_t>(sum * 128);
}
#endif

// quantize_row_avx2 where the CPU has AVX2 and FMA, else quantize_row.
using QuantizeRow = void (*)(const float*, int64_t, int64_t, int8_t*, float*, int32_t*, int64_t);
QuantizeRow row_quantizer() {
#ifdef FSQ_AVX512_KERNELS
  if (core::cpu_has_avx2_fma()) return quantize_row_avx2;
#endif
  return quantize_row;
}

}  // namespace

Int8Weight Int8Weight::quantize(const at::Tensor& weight) {
  TORCH_CHECK(weight.dim() == 2 && weight.device().is_cpu() && weight.scalar_type() == at::kFloat,
              "Int8Weight::quantize: a float32 (N, K) CPU weight expected");
  c10::InferenceMode inference;
  const at::Tensor w = weight.detach().contiguous();
  Int8Weight out;
  out.n_ = w.size(0);
  out.k_ = w.size(1);
  const int64_t panels = (out.n_ + kPanel - 1) / kPanel, groups = round_up(out.k_, kGroup) / kGroup;
  // One pass per row, in the layout the kernels read: (P, K4/4, 32, 4), zero past N and K.
  out.panels_ = at::zeros({panels, groups, kPanel, kGroup}, w.options().dtype(at::kChar));
  out.scales_ = at::zeros({panels * kPanel}, w.options());
  out.compensation_ = at::zeros({panels * kPanel}, w.options().dtype(at::kInt));
  const float* src = w.data_ptr<float>();
  int8_t* dst = out.panels_.data_ptr<int8_t>();
  float* scales = out.scales_.data_ptr<float>();
  int32_t* compensation = out.compensation_.data_ptr<int32_t>();
  const int64_t k = out.k_;
  const QuantizeRow quantize_one = row_quantizer();
  at::parallel_for(0, out.n_, std::max<int64_t>(1, (1 << 16) / std::max<int64_t>(k, 1)),
                   [&](int64_t first, int64_t last) {
                     for (int64_t row = first; row < last; ++row)
                       quantize_one(src + row * k, k, groups, dst, scales + row, compensation + row, row);
                   });
  return out;
}

at::Tensor Int8Weight::scales() const { return scales_.narrow(0, 0, n_); }

at::Tensor Int8Weight::values() const {
  const int64_t panels = panels_.size(0), groups = panels_.size(1);
  // (P, K4/4, 32, 4) -> (P, 32, K4/4, 4) -> (P*32, K4)
  return panels_.permute({0, 2, 1, 3}).reshape({panels * kPanel, groups * kGroup}).narrow(0, 0, n_).narrow(1, 0, k_);
}

at::Tensor Int8Weight::rows(const at::Tensor& indices) const {
  const at::Tensor n = indices.to(at::kLong);
  TORCH_CHECK(n.numel() == 0 || (n.min().item<int64_t>() >= 0 && n.max().item<int64_t>() < n_),
              "Int8Weight::rows: indices in [0, ", n_, ") expected");
  // Row n is column n % 32 of panel n / 32, in groups of 4: (P, K4/4, 32, 4)[n / 32, :, n % 32, :],
  // which indexing puts in front: (..., K4/4, 4).
  using at::indexing::Slice;
  const at::Tensor q = panels_.index({n.div(kPanel, "floor"), Slice(), n.remainder(kPanel), Slice()});
  return q.flatten(-2).narrow(-1, 0, k_).to(at::kFloat) * scales_.index({n}).unsqueeze(-1);
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
  const bool vnni = use_vnni();
  (vnni ? quantize_rows : quantize_rows_avx2)(input.data_ptr<float>(), k, m, k, k4, xq.data(), x_scales.data());
  const Kernel* kernels = vnni ? kKernels : kKernelsAvx2;
  const int64_t rows_per_call = vnni ? kRows : kRowsAvx2;
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
      for (int64_t row = 0; row < m; row += rows_per_call) {
        const int64_t rows = std::min(rows_per_call, m - row);
        kernels[rows - 1](xq.data() + row * k4, k4, panel, groups, x_scales.data() + row, ws + col, comp + col,
                          bp ? bp + col : nullptr, cp + row * n + col, n, cols);
      }
    }
  });
#endif
  return out.view(out_shape);
}

void use_int8_weight(const at::Tensor& weight) {
  TORCH_CHECK(int8_linear_supported(), "use_int8_weight: ", int8_linear_unsupported_reason());
  registry().add(weight, /*frozen=*/false);
}

void quantize_in_place(at::Tensor weight) {
  TORCH_CHECK(int8_linear_supported(), "quantize_in_place: ", int8_linear_unsupported_reason());
  TORCH_CHECK(weight.device().is_cpu() && weight.scalar_type() == at::kFloat && weight.dim() == 2,
              "quantize_in_place: a float32 (N, K) CPU weight expected");
  registry().add(weight, /*frozen=*/true);
  torch::NoGradGuard no_grad;
  weight.set_data(at::empty({0}, weight.options()));
}

bool quantized_in_place(const at::Tensor& weight) { return registry().frozen(weight) != nullptr; }

at::Tensor int8_rows(const at::Tensor& weight, const at::Tensor& indices) {
  const std::shared_ptr<const Int8Weight> quantized = registry().frozen(weight);
  TORCH_CHECK(quantized != nullptr, "int8_rows: the weight was not quantized in place");
  return quantized->rows(indices);
}

std::shared_ptr<const Int8Weight> int8_weight_for(const at::Tensor& weight) { return registry().find(weight); }

size_t int8_weight_count() { return registry().live(); }

}  // namespace fairseq_cpp::nn
