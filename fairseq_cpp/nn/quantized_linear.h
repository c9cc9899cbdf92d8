#pragma once
// Linear layers with int8 weights for CPU inference (`--quantize int8`), on AVX-512 VNNI or AVX2.
//
// A weight (N, K) is quantized once, per output channel and symmetrically:
//   scale_n = max_k |w_nk| / 127,  q_nk = round(w_nk * (127 / max_k |w_nk|))  in [-127, 127]
// (round half to even; a zero row has scale 0). Each call quantizes its input the same way per row
// (dynamic quantization: scale_r from max_k |x_rk|), sums the int8 products exactly in int32 and
// returns, in float32,
//   y_rn = sum_k qx_rk q_nk * scale_r * scale_n + bias_n.
// With AVX-512 VNNI the sums are vpdpbusd's (four u8 x s8 products per 32-bit lane, the input
// shifted by +128 into u8 and the shift taken back by a per-column constant); with AVX2 only,
// vpmaddubsw's on |w| and x with w's sign (no pair of products can saturate), added into int32 by
// vpmaddwd. Both give the same bits.
//
//   nn::Int8Weight w = nn::Int8Weight::quantize(layer->weight);
//   at::Tensor y = nn::int8_linear(x, w, layer->bias);
//   nn::use_int8_weight(layer->weight);  // nn::scoped_linear(x, layer->weight, ...) now runs int8
//
// Needs x86-64 with AVX-512F/BW/VL and VNNI, or AVX2 and FMA; int8_linear_unsupported_reason() says
// what is missing.

#include <cstddef>
#include <memory>
#include <string>

#include <ATen/Tensor.h>

namespace fairseq_cpp::nn {

// Whether this build and CPU run the int8 kernel.
bool int8_linear_supported();
// Empty when supported; otherwise what is missing, e.g. "this CPU lacks both AVX-512 VNNI ...".
std::string int8_linear_unsupported_reason();
// The kernel this CPU runs: "AVX-512 VNNI" or "AVX2" (core::use_avx2_kernels_only picks AVX2).
const char* int8_linear_kernel();

// A float32 (N, K) weight quantized per output channel and packed for the kernel.
class Int8Weight {
 public:
  static Int8Weight quantize(const at::Tensor& weight);

  int64_t out_features() const { return n_; }
  int64_t in_features() const { return k_; }
  at::Tensor scales() const;  // (N) float32: max_k |w_nk| / 127
  at::Tensor values() const;  // (N, K) int8: q_nk, unpacked (tests)
  // (ceil(N / 32) * 32) int32: 128 * sum_k q_nk, zero past N (tests; the VNNI kernel reads it).
  const at::Tensor& compensation() const { return compensation_; }
  // Rows `indices` (integers in [0, N), any shape) as the kernel multiplies by them, dequantized:
  // q_nk * scale_n in float32, (..., K).
  at::Tensor rows(const at::Tensor& indices) const;

 private:
  friend at::Tensor int8_linear(const at::Tensor& x, const Int8Weight& weight, const at::Tensor& bias);
  int64_t n_ = 0;
  int64_t k_ = 0;
  // (ceil(N / 32), ceil(K / 4), 32, 4) int8: panel p, group g, column j, byte t holds q[32p + j][4g + t],
  // zero past N and K; a group's 32 columns are two 64-byte vectors of vpdpbusd's layout.
  at::Tensor panels_;
  at::Tensor scales_;        // (panels * 32) float32, zero past N
  at::Tensor compensation_;  // (panels * 32) int32: 128 * sum_k q_nk (the input's +128 shift)
};

// x (..., K) float32 @ weight^T + bias (N; may be undefined) -> (..., N) float32, as described above.
at::Tensor int8_linear(const at::Tensor& x, const Int8Weight& weight, const at::Tensor& bias = at::Tensor());

// From now on nn::scoped_linear(x, weight, bias) runs int8_linear with `weight` quantized, whenever
// no gradient is needed (inside or outside a PackedLinearScope). The quantized copy is kept while
// the tensor lives, and made again after an in-place change (version counter or data pointer).
// Requires int8_linear_supported() and a float32 (N, K) CPU weight.
void use_int8_weight(const at::Tensor& weight);
// For inference only (generation): use_int8_weight, then the float32 values of `weight` are freed,
// so that the model's weights exist only in int8. From then on nn::scoped_linear(x, weight, bias)
// runs int8 with it, whether or not gradients are enabled (none reaches it); nothing else may read
// the tensor (it is empty). Requires int8_linear_supported() and a float32 (N, K) CPU weight.
void quantize_in_place(at::Tensor weight);
// Whether `weight` was quantized in place.
bool quantized_in_place(const at::Tensor& weight);

// The rows `indices` of a weight quantized in place, dequantized (Int8Weight::rows): how an
// embedding that shares its weight with an output projection quantized in place looks its tokens
// up, as CTranslate2's int8 embeddings do. Requires quantized_in_place(weight).
at::Tensor int8_rows(const at::Tensor& weight, const at::Tensor& indices);
// The quantized copy registered for `weight` (re-quantized if the tensor changed), or null.
std::shared_ptr<const Int8Weight> int8_weight_for(const at::Tensor& weight);
// Number of registered weights whose tensors are alive (tests).
size_t int8_weight_count();

}  // namespace fairseq_cpp::nn
