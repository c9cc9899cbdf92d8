#include "fairseq_cpp/criterions/loss_rows.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include <ATen/Parallel.h>

#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/core/exp_polynomial.h"
#include "fairseq_cpp/core/runtime.h"

#ifdef FSQ_AVX512_KERNELS
#include <immintrin.h>
#endif

namespace fairseq_cpp::criterions {
namespace {

std::atomic<bool> portable_only{false};

// A row's maximum, and whether every value of it is finite.
struct RowScan {
  float max = -std::numeric_limits<float>::infinity();
  bool finite = true;
};

// The row's sums against its maximum: sum_v exp(z_v - max) and sum_v (z_v - max).
struct RowExp {
  double sum_exp = 0;
  double sum_shifted = 0;
};

// The three passes over a row, each as a loop over [from, to) in portable C++; the AVX2 form below
// runs its vector body and leaves the tail (fewer than 8 values) to these.
struct PortablePasses {
  static void scan(const float* z, int64_t from, int64_t to, RowScan& scan) {
    for (int64_t v = from; v < to; ++v) {
      scan.finite = scan.finite && std::isfinite(z[v]);
      scan.max = std::max(scan.max, z[v]);
    }
  }
  // With `keep`, z_v becomes exp(z_v - max).
  static void exponentials(float* z, int64_t from, int64_t to, float max, bool keep, RowExp& sums) {
    for (int64_t v = from; v < to; ++v) {
      const float shifted = z[v] - max;
      const float e = std::exp(shifted);
      sums.sum_exp += e;
      sums.sum_shifted += shifted;
      if (keep) z[v] = e;
    }
  }
  // A_v = e_v / S - eps / V, from the exponentials e in z.
  static void gradient(const float* e, int64_t from, int64_t to, float inv_sum, float smoothing, RowGradient out) {
    for (int64_t v = from; v < to; ++v) {
      const float a = std::fma(e[v], inv_sum, -smoothing);
      if (out.f32 != nullptr) out.f32[v] = a;
      if (out.bf16 != nullptr) out.bf16[v] = c10::BFloat16(a);
    }
  }
};

#ifdef FSQ_AVX512_KERNELS
// exp(x) for x <= 0 (core/exp_polynomial.h), times 2^n built in the exponent bits; below -87
// (where float32's normal numbers end) the result is 0.
__attribute__((target("avx2,fma"))) inline __m256 exp_nonpositive_avx2(__m256 x) {
  const __m256 in_range = _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_GE_OQ);
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
  const __m256 n =
      _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(core::kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(core::kLn2High), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(core::kLn2Low), r);
  __m256 p = _mm256_set1_ps(core::kExpTaylor[0]);
  for (size_t i = 1; i < core::kExpTaylorTerms; ++i) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(core::kExpTaylor[i]));
  const __m256i exponent = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(exponent)), in_range);
}

// Eight float32 to bf16, rounded to nearest even, NaN to 0x7FC0 (c10::BFloat16's rounding).
__attribute__((target("avx2,fma"))) inline void store_bf16_avx2(c10::BFloat16* out, __m256 a) {
  const __m256i bits = _mm256_castps_si256(a);
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(bits, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7FFF))), 16);
  rounded =
      _mm256_blendv_epi8(rounded, _mm256_set1_epi32(0x7FC0), _mm256_castps_si256(_mm256_cmp_ps(a, a, _CMP_UNORD_Q)));
  // The 16-bit halves of each 128-bit lane, then the two lanes' halves side by side.
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(rounded, rounded), 0xD8);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm256_castsi256_si128(packed));
}

// The largest and the sum of the 8 lanes.
__attribute__((target("avx2,fma"))) float lane_max(__m256 v) {
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, v);
  return *std::max_element(lanes, lanes + 8);
}
__attribute__((target("avx2,fma"))) float lane_sum(__m256 v) {
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, v);
  return std::accumulate(lanes, lanes + 8, 0.0f);
}

struct Avx2Passes {
  __attribute__((target("avx2,fma"))) static void scan(const float* z, int64_t from, int64_t to, RowScan& scan) {
    const int64_t body = from + (to - from) / 8 * 8;
    __m256 m = _mm256_set1_ps(scan.max);
    __m256 poison = _mm256_setzero_ps();  // x * 0 is NaN for a NaN or an infinity, else 0
    for (int64_t v = from; v < body; v += 8) {
      const __m256 x = _mm256_loadu_ps(z + v);
      m = _mm256_max_ps(m, x);
      poison = _mm256_add_ps(poison, _mm256_mul_ps(x, _mm256_setzero_ps()));
    }
    scan.max = lane_max(m);
    scan.finite = scan.finite && lane_sum(poison) == 0.0f;
    PortablePasses::scan(z, body, to, scan);
  }
  __attribute__((target("avx2,fma"))) static void exponentials(float* z, int64_t from, int64_t to, float max, bool keep,
                                                               RowExp& sums) {
    const int64_t body = from + (to - from) / 8 * 8;
    const __m256 vmax = _mm256_set1_ps(max);
    __m256 sum_exp = _mm256_setzero_ps(), sum_shifted = _mm256_setzero_ps();
    for (int64_t v = from; v < body; v += 8) {
      const __m256 shifted = _mm256_sub_ps(_mm256_loadu_ps(z + v), vmax);
      const __m256 e = exp_nonpositive_avx2(shifted);
      sum_exp = _mm256_add_ps(sum_exp, e);
      sum_shifted = _mm256_add_ps(sum_shifted, shifted);
      if (keep) _mm256_storeu_ps(z + v, e);
    }
    sums.sum_exp += lane_sum(sum_exp);
    sums.sum_shifted += lane_sum(sum_shifted);
    PortablePasses::exponentials(z, body, to, max, keep, sums);
  }
  __attribute__((target("avx2,fma"))) static void gradient(const float* e, int64_t from, int64_t to, float inv_sum,
                                                           float smoothing, RowGradient out) {
    const int64_t body = from + (to - from) / 8 * 8;
    const __m256 vinv = _mm256_set1_ps(inv_sum), vsmoothing = _mm256_set1_ps(smoothing);
    for (int64_t v = from; v < body; v += 8) {
      const __m256 a = _mm256_fmsub_ps(_mm256_loadu_ps(e + v), vinv, vsmoothing);
      if (out.f32 != nullptr) _mm256_storeu_ps(out.f32 + v, a);
      if (out.bf16 != nullptr) store_bf16_avx2(out.bf16 + v, a);
    }
    PortablePasses::gradient(e, body, to, inv_sum, smoothing, out);
  }
};
#endif

struct RowResult {
  double nll = 0, smooth = 0;
  bool correct = false;
};

// One row through the passes: the sums, and A when `out` names a destination (this row's).
template <typename Passes>
RowResult one_row(float* z, int64_t target, int64_t vocab, double epsilon, bool count_correct, RowGradient out) {
  const bool keep = out.f32 != nullptr || out.bf16 != nullptr;
  RowScan scan;
  Passes::scan(z, 0, vocab, scan);
  RowResult result;
  if (!scan.finite) {
    result.nll = result.smooth = std::numeric_limits<double>::quiet_NaN();
    if (out.f32 != nullptr) std::fill(out.f32, out.f32 + vocab, std::numeric_limits<float>::quiet_NaN());
    if (out.bf16 != nullptr)
      std::fill(out.bf16, out.bf16 + vocab, c10::BFloat16(std::numeric_limits<float>::quiet_NaN()));
    return result;
  }
  const float at_target = z[target];
  // argmax's first largest: the target's value is the maximum and no earlier value reaches it.
  result.correct = count_correct && at_target == scan.max && std::find(z, z + target, scan.max) == z + target;
  RowExp sums;
  Passes::exponentials(z, 0, vocab, scan.max, keep, sums);
  const double log_sum = std::log(sums.sum_exp);
  result.nll = log_sum - (static_cast<double>(at_target) - scan.max);
  result.smooth = static_cast<double>(vocab) * log_sum - sums.sum_shifted;
  if (!keep) return result;
  const auto inv_sum = static_cast<float>(1.0 / sums.sum_exp);
  const auto smoothing = static_cast<float>(epsilon / static_cast<double>(vocab));
  const float e_target = z[target];
  Passes::gradient(z, 0, vocab, inv_sum, smoothing, out);
  const float a_target = std::fma(e_target, inv_sum, -smoothing) - static_cast<float>(1.0 - epsilon);
  if (out.f32 != nullptr) out.f32[target] = a_target;
  if (out.bf16 != nullptr) out.bf16[target] = c10::BFloat16(a_target);
  return result;
}

template <typename Passes>
void all_rows(float* logits, const int64_t* target, int64_t rows, int64_t vocab, double epsilon, bool count_correct,
              RowGradient gradient, std::vector<RowResult>& results) {
  at::parallel_for(0, rows, std::max<int64_t>(1, 32768 / vocab), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      RowGradient out;
      if (gradient.f32 != nullptr) out.f32 = gradient.f32 + r * vocab;
      if (gradient.bf16 != nullptr) out.bf16 = gradient.bf16 + r * vocab;
      results[r] = one_row<Passes>(logits + r * vocab, target[r], vocab, epsilon, count_correct, out);
    }
  });
}

}  // namespace

RowLossSums label_smoothed_rows(float* logits, const int64_t* target, int64_t rows, int64_t vocab, double epsilon,
                                bool count_correct, RowGradient gradient) {
  for (int64_t r = 0; r < rows; ++r) {
    if (target[r] < 0 || target[r] >= vocab) {
      raise<DataError>("a target id is {}, outside the model's vocabulary of {} words.", target[r], vocab);
    }
  }
  std::vector<RowResult> results(static_cast<size_t>(rows));
#ifdef FSQ_AVX512_KERNELS
  if (!portable_only.load() && core::cpu_has_avx2_fma()) {
    all_rows<Avx2Passes>(logits, target, rows, vocab, epsilon, count_correct, gradient, results);
  } else {
    all_rows<PortablePasses>(logits, target, rows, vocab, epsilon, count_correct, gradient, results);
  }
#else
  all_rows<PortablePasses>(logits, target, rows, vocab, epsilon, count_correct, gradient, results);
#endif
  RowLossSums sums;
  for (const RowResult& row : results) {  // in row order: the same sums on any number of threads
    sums.nll += row.nll;
    sums.smooth += row.smooth;
    sums.correct += row.correct ? 1 : 0;
  }
  return sums;
}

void use_portable_loss_rows(bool portable) { portable_only.store(portable); }

}  // namespace fairseq_cpp::criterions
