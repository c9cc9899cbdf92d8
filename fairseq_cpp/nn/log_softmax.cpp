#include "fairseq_cpp/nn/log_softmax.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <ATen/Parallel.h>
#include "fairseq_cpp/core/torch.h"

#include "fairseq_cpp/core/exp_polynomial.h"
#include "fairseq_cpp/core/runtime.h"

#ifdef FSQ_AVX512_KERNELS
#include <immintrin.h>
#endif

namespace fairseq_cpp::nn {
namespace {

#ifdef FSQ_AVX512_KERNELS
// GCC 12's AVX-512 intrinsics pass _mm512_undefined_ps() as the unused merge source and then warn
// about it (GCC bug 105593, fixed in 13).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// exp(x) for x <= 0: x = n ln2 + r with |r| <= ln2 / 2, exp(r) by its Taylor polynomial of degree
// 6 (truncation below 2e-7 relative), scaled by 2^n; below -104 the result underflows to 0.
__attribute__((target("avx512f"))) inline __m512 exp_nonpositive(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f));
  // Round to nearest (the default rounding mode) through int32: |x log2 e| < 151.
  const __m512 n = _mm512_cvtepi32_ps(_mm512_cvtps_epi32(_mm512_mul_ps(x, _mm512_set1_ps(core::kLog2e))));
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(core::kLn2High), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(core::kLn2Low), r);
  __m512 p = _mm512_set1_ps(core::kExpTaylor[0]);
  for (size_t i = 1; i < core::kExpTaylorTerms; ++i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(core::kExpTaylor[i]));
  return _mm512_scalef_ps(p, n);
}

// The 16 lanes of v combined with op (a stored copy: GCC 12's reduce intrinsics warn).
template <typename Op>
__attribute__((target("avx512f"))) float horizontal(__m512 v, Op op) {
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, v);
  float acc = lanes[0];
  for (int i = 1; i < 16; ++i) acc = op(acc, lanes[i]);
  return acc;
}

__attribute__((target("avx512f"))) void log_softmax_row(const float* in, float* out, int64_t n) {
  const int64_t body = n / 16 * 16;
  const auto tail = static_cast<__mmask16>((1u << (n - body)) - 1);
  const __m512 lowest = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 m = lowest;
  for (int64_t j = 0; j < body; j += 16) m = _mm512_max_ps(m, _mm512_loadu_ps(in + j));
  if (tail) m = _mm512_max_ps(m, _mm512_mask_loadu_ps(lowest, tail, in + body));
  const float max = horizontal(m, [](float a, float b) { return std::max(a, b); });
  const __m512 vmax = _mm512_set1_ps(max);
  __m512 sum = _mm512_setzero_ps();
  for (int64_t j = 0; j < body; j += 16)
    sum = _mm512_add_ps(sum, exp_nonpositive(_mm512_sub_ps(_mm512_loadu_ps(in + j), vmax)));
  if (tail) {
    const __m512 e = exp_nonpositive(_mm512_sub_ps(_mm512_mask_loadu_ps(lowest, tail, in + body), vmax));
    sum = _mm512_add_ps(sum, _mm512_maskz_mov_ps(tail, e));
  }
  const __m512 log_sum = _mm512_set1_ps(std::log(horizontal(sum, [](float a, float b) { return a + b; })));
  for (int64_t j = 0; j < body; j += 16)
    _mm512_storeu_ps(out + j, _mm512_sub_ps(_mm512_sub_ps(_mm512_loadu_ps(in + j), vmax), log_sum));
  if (tail) {
    _mm512_mask_storeu_ps(out + body, tail,
                          _mm512_sub_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, in + body), vmax), log_sum));
  }
}

#pragma GCC diagnostic pop
#endif

}  // namespace

at::Tensor log_softmax_last_dim(const at::Tensor& x) {
#ifdef FSQ_AVX512_KERNELS
  const bool needs_grad = at::GradMode::is_enabled() && x.requires_grad();
  if (core::cpu_has_avx512f() && !needs_grad && x.is_cpu() && x.scalar_type() == at::kFloat && x.dim() > 0 &&
      x.size(-1) > 0) {
    const at::Tensor in = x.contiguous();
    const int64_t n = in.size(-1), rows = in.numel() / n;
    at::Tensor out = at::empty_like(in);
    const float* ip = in.data_ptr<float>();
    float* op = out.data_ptr<float>();
    at::parallel_for(0, rows, std::max<int64_t>(1, 262144 / n), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) log_softmax_row(ip + r * n, op + r * n, n);
    });
    return out;
  }
#endif
  return torch::log_softmax(x, -1);
}

}  // namespace fairseq_cpp::nn
