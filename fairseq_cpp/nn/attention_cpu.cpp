// Scaled dot-product attention for float32 CPU tensors as one autograd node, one small GEMM per
// (batch, head) straight through BLAS. LibTorch 1.13's CPU bmm runs a loop of select + addmm per
// batch element, about 14 us of dispatch each: on a Multi30k batch (about 1,000 sentence-heads per
// call, 54 calls per update) that was 38% of a training step. Here each head's matrices are read
// and written in place through their strides, so the (B, T, H, D) projections need no transposed
// copies, and only the softmax weights (and the dropout mask) are kept for backward.

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#ifdef FSQ_AVX512_KERNELS
#include <immintrin.h>
#endif

#include <ATen/Parallel.h>
#include "fairseq_cpp/core/runtime.h"
#include "fairseq_cpp/core/torch.h"

#include "fairseq_cpp/nn/attention.h"
#include "fairseq_cpp/nn/dropout.h"

namespace fairseq_cpp::nn {
namespace {

// Fortran BLAS sgemm (column-major), looked up in the BLAS that LibTorch loaded.
using Sgemm = void (*)(const char*, const char*, const int*, const int*, const int*, const float*, const float*,
                       const int*, const float*, const int*, const float*, float*, const int*, size_t, size_t);

Sgemm blas_sgemm() {
  static const Sgemm fn = reinterpret_cast<Sgemm>(dlsym(RTLD_DEFAULT, "sgemm_"));
  return fn;
}

// Row-major C (m x n, row stride ldc) = alpha op(A) op(B) + beta C, op(A) m x k, op(B) k x n; a
// transposed operand is stored row-major the other way round. Row-major C = A B is column-major
// C^T = B^T A^T, hence the swapped operands.
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  const char ta = trans_a ? 'T' : 'N';
  const char tb = trans_b ? 'T' : 'N';
  const int im = static_cast<int>(m), in = static_cast<int>(n), ik = static_cast<int>(k);
  const int ilda = static_cast<int>(lda), ildb = static_cast<int>(ldb), ildc = static_cast<int>(ldc);
  blas_sgemm()(&tb, &ta, &in, &im, &ik, &alpha, b, &ildb, a, &ilda, &beta, c, &ildc, 1, 1);
}

// The grain of a parallel_for over a call's (batch, head) pairs: the pairs on the intra-op threads
// when each head's products are small enough for BLAS to run on the calling thread (OpenBLAS
// threads a GEMM from 2^18 multiply-adds), else one after another on this thread, each product on
// BLAS's own threads as before the library had OpenMP (BLAS threads started inside each intra-op
// thread would oversubscribe the cores).
int64_t heads_grain(int64_t pairs, int64_t tq, int64_t tk, int64_t dim) {
  constexpr int64_t kBlasThreadsFrom = int64_t{1} << 18;
  return tq * tk * dim >= kBlasThreadsFrom ? std::max<int64_t>(pairs, 1) : 1;
}

// A (B, H, T, D) operand as per-head matrices: element (b, h, t, d) at b*sb + h*sh + t*st + d.
struct Heads {
  float* data;
  int64_t sb, sh, st;
  explicit Heads(const at::Tensor& x)
      : data(x.data_ptr<float>()), sb(x.stride(0)), sh(x.stride(1)), st(x.stride(2)) {}
  float* at(int64_t b, int64_t h) const { return data + b * sb + h * sh; }
};

// A (B, T, H, D) contiguous tensor for results, handed out as its (B, H, T, D) transpose.
at::Tensor empty_heads(int64_t batch, int64_t heads, int64_t rows, int64_t dim, const at::TensorOptions& options) {
  return at::empty({batch, rows, heads, dim}, options).transpose(1, 2);
}

bool row_major_heads(const at::Tensor& x) { return x.dim() == 4 && x.stride(3) == 1 && x.stride(2) >= x.size(3); }

// One head's attention weights through the dropout mask: out = p * keep / (1 - dropout), or p
// itself without dropout.
const float* dropped_weights(const float* p, const uint8_t* keep, float keep_scale, int64_t n,
                             std::vector<float>& out) {
  if (keep == nullptr) return p;
  for (int64_t j = 0; j < n; ++j) out[j] = p[j] * (static_cast<float>(keep[j]) * keep_scale);
  return out.data();
}

// softmax over one row of scores in place, -inf where the mask (stride ms) is set.
void softmax_row(float* row, int64_t n, const bool* mask, int64_t ms) {
  if (mask != nullptr) {
    for (int64_t s = 0; s < n; ++s)
      if (mask[s * ms]) row[s] = -std::numeric_limits<float>::infinity();
  }
  float max = -std::numeric_limits<float>::infinity();
  for (int64_t s = 0; s < n; ++s) max = std::max(max, row[s]);
  float sum = 0;
  for (int64_t s = 0; s < n; ++s) {
    row[s] = std::exp(row[s] - max);
    sum += row[s];
  }
  const float inv = 1.0f / sum;  // a row with every key masked gives NaN, as softmax does
  for (int64_t s = 0; s < n; ++s) row[s] *= inv;
}

#ifdef FSQ_AVX512_KERNELS
// One query against tk keys (a decoder's step): p = softmax(q k^T * scale + mask), out = p v,
// without BLAS, whose sgemm packs all of k and v before multiplying them by a single row (OpenBLAS:
// three quarters of the attention's time in a beam search). N = dim / 8 registers hold q, then out.
// Row s of k is at k + s * ks, plus rows[s] * kr where `rows` is given (a cache kept in place).
template <int N>
__attribute__((target("avx2,fma"))) void attend_row_avx2(const float* q, const float* k, int64_t ks, int64_t kr,
                                                         const float* v, int64_t vs, int64_t vr, const int64_t* rows,
                                                         int64_t tk, float scale, const bool* mask, int64_t ms,
                                                         float* p, float* out) {
  __m256 qv[N];
  for (int j = 0; j < N; ++j) qv[j] = _mm256_loadu_ps(q + 8 * j);
  for (int64_t s = 0; s < tk; ++s) {
    const float* key = k + s * ks + (rows != nullptr ? rows[s] * kr : 0);
    __m256 a = _mm256_mul_ps(qv[0], _mm256_loadu_ps(key));
    for (int j = 1; j < N; ++j) a = _mm256_fmadd_ps(qv[j], _mm256_loadu_ps(key + 8 * j), a);
    const __m128 h = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    const __m128 h2 = _mm_add_ps(h, _mm_movehl_ps(h, h));
    p[s] = _mm_cvtss_f32(_mm_add_ss(h2, _mm_shuffle_ps(h2, h2, 1))) * scale;
  }
  softmax_row(p, tk, mask, ms);
  __m256 acc[N];
  for (int j = 0; j < N; ++j) acc[j] = _mm256_setzero_ps();
  for (int64_t s = 0; s < tk; ++s) {
    const __m256 w = _mm256_set1_ps(p[s]);
    const float* value = v + s * vs + (rows != nullptr ? rows[s] * vr : 0);
    for (int j = 0; j < N; ++j) acc[j] = _mm256_fmadd_ps(w, _mm256_loadu_ps(value + 8 * j), acc[j]);
  }
  for (int j = 0; j < N; ++j) _mm256_storeu_ps(out + 8 * j, acc[j]);
}
#endif

using RowKernel = void (*)(const float*, const float*, int64_t, int64_t, const float*, int64_t, int64_t, const int64_t*,
                           int64_t, float, const bool*, int64_t, float*, float*);

std::atomic<bool> row_kernels_on{true};  // set_row_attention_kernels

// The row kernel attend() takes for one query row of `dim` without dropout, or null: on CPUs with
// AVX2 and FMA, for head sizes 32, 64 (fairseq's transformers) and 128.
RowKernel row_kernel(int64_t tq, int64_t dim, bool dropout) {
#ifdef FSQ_AVX512_KERNELS
  if (!core::cpu_has_avx2_fma() || tq != 1 || dropout || !row_kernels_on.load(std::memory_order_relaxed)) {
    return nullptr;
  }
  if (dim == 32) return attend_row_avx2<4>;
  if (dim == 64) return attend_row_avx2<8>;
  if (dim == 128) return attend_row_avx2<16>;
#else
  (void)tq, (void)dim, (void)dropout;
#endif
  return nullptr;
}

// softmax(q k^T * scale + mask) (through the dropout mask) v for every (batch, head): probs
// (B, H, Tq, Tk) receives the softmax weights, out the result; key/value row kv_rows[b] (or b), or
// with `by_position`, key/value t of row b in row kv_rows[b * Tk + t] (the row kernel only).
void attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
            const int64_t* kv_rows, bool by_position, const at::Tensor& keep, float keep_scale, at::Tensor& probs,
            at::Tensor& out) {
  const int64_t batch = q.size(0), heads = q.size(1), tq = q.size(2), dim = q.size(3), tk = k.size(2);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(dim)));
  // An empty mask stands for none (apply() needs a defined tensor).
  at::Tensor full_mask = mask.numel() > 0 ? mask.expand({batch, heads, tq, tk}) : at::Tensor();
  const bool* mask_data = full_mask.defined() ? full_mask.data_ptr<bool>() : nullptr;
  const int64_t mb = mask_data ? full_mask.stride(0) : 0, mh = mask_data ? full_mask.stride(1) : 0;
  const int64_t mt = mask_data ? full_mask.stride(2) : 0, ms = mask_data ? full_mask.stride(3) : 0;
  Heads qh(q), kh(k), vh(v), oh(out);
  float* p_all = probs.data_ptr<float>();
  const uint8_t* keep_all = keep.defined() ? keep.data_ptr<uint8_t>() : nullptr;
  const RowKernel one_row = row_kernel(tq, dim, keep_all != nullptr);
  TORCH_CHECK(!by_position || one_row != nullptr, "cpu_attention: keys by position need the row kernel");
  const int64_t grain = one_row != nullptr ? 1 : heads_grain(batch * heads, tq, tk, dim);
  at::parallel_for(0, batch * heads, grain, [&](int64_t first, int64_t last) {
    std::vector<float> dropped(keep_all ? tq * tk : 0);
    for (int64_t i = first; i < last; ++i) {
      const int64_t b = i / heads, h = i % heads;
      const int64_t kv = by_position ? 0 : kv_rows != nullptr ? kv_rows[b] : b;
      float* p = p_all + i * tq * tk;
      const bool* m = mask_data != nullptr ? mask_data + b * mb + h * mh : nullptr;
      if (one_row != nullptr) {
        one_row(qh.at(b, h), kh.at(kv, h), kh.st, kh.sb, vh.at(kv, h), vh.st, vh.sb,
                by_position ? kv_rows + b * tk : nullptr, tk, scale, m, ms, p, oh.at(b, h));
        continue;
      }
      gemm(false, true, tq, tk, dim, scale, qh.at(b, h), qh.st, kh.at(kv, h), kh.st, 0.0f, p, tk);
      for (int64_t t = 0; t < tq; ++t) softmax_row(p + t * tk, tk, m != nullptr ? m + t * mt : nullptr, ms);
      const uint8_t* kp = keep_all ? keep_all + i * tq * tk : nullptr;
      const float* weights = dropped_weights(p, kp, keep_scale, tq * tk, dropped);
      gemm(false, false, tq, dim, tk, 1.0f, weights, tk, vh.at(kv, h), vh.st, 0.0f, oh.at(b, h), oh.st);
    }
  });
}

at::Tensor row_major(const at::Tensor& x) { return row_major_heads(x) ? x : x.contiguous(); }

struct CpuAttention : public torch::autograd::Function<CpuAttention> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q_in, const at::Tensor& k_in,
                            const at::Tensor& v_in, const at::Tensor& mask, double dropout) {
    at::Tensor q = row_major(q_in), k = row_major(k_in), v = row_major(v_in);
    const int64_t batch = q.size(0), heads = q.size(1), tq = q.size(2), dim = q.size(3), tk = k.size(2);
    at::Tensor probs = at::empty({batch, heads, tq, tk}, q.options());  // softmax weights, kept for backward
    at::Tensor keep;                                                     // dropout mask of the weights
    if (dropout > 0) keep = dropout_keep_mask(probs.sizes(), dropout);
    const float keep_scale = dropout > 0 ? static_cast<float>(1.0 / (1.0 - dropout)) : 1.0f;
    at::Tensor out = empty_heads(batch, heads, tq, dim, q.options());
    attend(q, k, v, mask, nullptr, false, keep, keep_scale, probs, out);
    ctx->save_for_backward({q, k, v, probs});
    ctx->saved_data["keep"] = keep;
    ctx->saved_data["keep_scale"] = static_cast<double>(keep_scale);
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor& q = saved[0];
    const at::Tensor& k = saved[1];
    const at::Tensor& v = saved[2];
    const at::Tensor& probs = saved[3];
    at::Tensor keep = ctx->saved_data["keep"].toTensor();
    const auto keep_scale = static_cast<float>(ctx->saved_data["keep_scale"].toDouble());
    at::Tensor grad_out = row_major_heads(grads[0]) ? grads[0] : grads[0].contiguous();
    const int64_t batch = q.size(0), heads = q.size(1), tq = q.size(2), dim = q.size(3), tk = k.size(2);
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(dim)));
    at::Tensor dq = empty_heads(batch, heads, tq, dim, q.options());
    at::Tensor dk = empty_heads(batch, heads, tk, dim, k.options());
    at::Tensor dv = empty_heads(batch, heads, tk, dim, v.options());
    Heads qh(q), kh(k), vh(v), gh(grad_out), dqh(dq), dkh(dk), dvh(dv);
    const float* p_all = probs.data_ptr<float>();
    const uint8_t* keep_all = keep.defined() ? keep.data_ptr<uint8_t>() : nullptr;
    at::parallel_for(0, batch * heads, heads_grain(batch * heads, tq, tk, dim), [&](int64_t first, int64_t last) {
      std::vector<float> dp(tq * tk);
      std::vector<float> dropped(keep_all ? tq * tk : 0);
      for (int64_t i = first; i < last; ++i) {
        const int64_t b = i / heads, h = i % heads;
        const float* p = p_all + i * tq * tk;
        const uint8_t* kp = keep_all ? keep_all + i * tq * tk : nullptr;
        const float* weights = dropped_weights(p, kp, keep_scale, tq * tk, dropped);
        // dV = W^T dO; dW = dO V^T, through the dropout mask; dS = P * (dW - rowsum(dW * P)).
        gemm(true, false, tk, dim, tq, 1.0f, weights, tk, gh.at(b, h), gh.st, 0.0f, dvh.at(b, h), dvh.st);
        gemm(false, true, tq, tk, dim, 1.0f, gh.at(b, h), gh.st, vh.at(b, h), vh.st, 0.0f, dp.data(), tk);
        for (int64_t t = 0; t < tq; ++t) {
          float* d = dp.data() + t * tk;
          const float* pr = p + t * tk;
          if (kp != nullptr) {
            const uint8_t* kr = kp + t * tk;
            for (int64_t s = 0; s < tk; ++s) d[s] *= static_cast<float>(kr[s]) * keep_scale;
          }
          float dot = 0;
          for (int64_t s = 0; s < tk; ++s) dot += d[s] * pr[s];
          for (int64_t s = 0; s < tk; ++s) d[s] = pr[s] * (d[s] - dot);
        }
        // dQ = scale dS K; dK = scale dS^T Q.
        gemm(false, false, tq, dim, tk, scale, dp.data(), tk, kh.at(b, h), kh.st, 0.0f, dqh.at(b, h), dqh.st);
        gemm(true, false, tk, dim, tq, scale, dp.data(), tk, qh.at(b, h), qh.st, 0.0f, dkh.at(b, h), dkh.st);
      }
    });
    return {dq, dk, dv, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

bool row_attention_kernel_applies(int64_t head_dim) { return row_kernel(1, head_dim, false) != nullptr; }

void set_row_attention_kernels(bool on) { row_kernels_on.store(on, std::memory_order_relaxed); }

bool cpu_attention_applies(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& kv_rows) {
  if (blas_sgemm() == nullptr) return false;
  for (const at::Tensor* x : {&q, &k, &v}) {
    if (!x->is_cpu() || x->scalar_type() != at::kFloat || x->dim() != 4) return false;
  }
  const bool by_row = kv_rows.defined() && kv_rows.dim() == 1;
  const bool by_position = kv_rows.defined() && kv_rows.dim() == 2 && kv_rows.size(1) == k.size(2) && q.size(2) == 1 &&
                           row_attention_kernel_applies(q.size(3));
  const bool rows_agree = kv_rows.defined()
                              ? (by_row || by_position) && kv_rows.is_cpu() && kv_rows.size(0) == q.size(0)
                              : q.size(0) == k.size(0);
  return rows_agree && k.sizes() == v.sizes() && q.size(1) == k.size(1) && q.size(3) == k.size(3) && q.size(2) > 0 &&
         k.size(2) > 0;
}

at::Tensor cpu_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
                         double dropout, bool training, const at::Tensor& kv_rows, at::Tensor* probs_out) {
  at::Tensor m = mask.defined() ? mask.to(at::kBool) : at::empty({0}, q.options().dtype(at::kBool));
  if (!kv_rows.defined()) return CpuAttention::apply(q, k, v, m, training ? dropout : 0.0);
  TORCH_CHECK(!at::GradMode::is_enabled() || !(q.requires_grad() || k.requires_grad() || v.requires_grad()),
              "cpu_attention with kv_rows has no gradient");
  at::Tensor qr = row_major(q);
  at::Tensor rows = kv_rows.to(at::kLong).contiguous();
  const int64_t* row_of = rows.data_ptr<int64_t>();
  const int64_t n = rows.numel();
  TORCH_CHECK(std::all_of(row_of, row_of + n, [&](int64_t r) { return r >= 0 && r < k.size(0); }),
              "cpu_attention: kv_rows out of range for ", k.size(0), " key rows");
  const bool by_position = rows.dim() == 2;
  TORCH_CHECK(!by_position ||
                  (rows.size(0) == q.size(0) && rows.size(1) == k.size(2) && q.size(2) == 1 && k.sizes() == v.sizes()),
              "cpu_attention: kv_rows (B, Tk) needs one query row, a row of the map per query row and per key, "
              "and keys and values of one shape");
  at::Tensor probs = at::empty({q.size(0), q.size(1), q.size(2), k.size(2)}, q.options());
  at::Tensor out = empty_heads(q.size(0), q.size(1), q.size(2), q.size(3), q.options());
  attend(qr, row_major(k), row_major(v), m, row_of, by_position, at::Tensor(), 1.0f, probs, out);
  if (probs_out != nullptr) *probs_out = probs;
  return out;
}

}  // namespace fairseq_cpp::nn
