#pragma once
// Linear layers for beam search on CPU with their weights packed once.
//
// A decoding step multiplies a few hundred rows (beam x sentences) by every weight of the decoder
// and by the (vocabulary x width) output embedding. BLAS re-packs the weight into its panel layout
// on every call, which at these row counts is 10-30% of the GEMM (16% of a translation's time on an
// AVX2 EPYC, in OpenBLAS's sgemm_incopy). Here each weight (N, K) is packed once into panels of 32
// output columns x K, kept while the weight is unchanged, and multiplied by a register-blocked
// kernel: 8 rows x 32 columns with AVX-512F, 3 rows x 32 columns on CPUs with only AVX2 and FMA.
// The sum over K runs in order, as OpenBLAS's kernel does.
//
//   nn::PackedLinearScope packed;        // this thread's inference may use packed weights
//   at::Tensor y = nn::scoped_linear(x, layer->weight, layer->bias);
//
// Outside a scope, for tensors that need gradients, off CPU, not float32, or on a CPU without
// AVX-512F or AVX2 with FMA, nn::scoped_linear is ATen's linear (at::linear), except for a weight
// packed in place (nn::pack_in_place, below), which always runs its kernel. A weight registered by
// nn::use_int8_weight (quantized_linear.h) runs int8 whenever no gradient is needed, inside a
// scope or not; one quantized in place (nn::quantize_in_place) always runs int8.

#include <ATen/Tensor.h>
#include <c10/core/ScalarType.h>

namespace fairseq_cpp::nn {

// Enables packed weights for nn::scoped_linear calls on this thread while alive (nests).
class PackedLinearScope {
 public:
  PackedLinearScope();
  ~PackedLinearScope();
  PackedLinearScope(const PackedLinearScope&) = delete;
  PackedLinearScope& operator=(const PackedLinearScope&) = delete;

 private:
  bool previous_;
};

// Whether this CPU can run the packed kernel (x86-64 with AVX-512F, or AVX2 and FMA).
bool packed_linear_supported();

// x (..., K) @ weight (N, K)^T + bias (N) -> (..., N); bias may be undefined. at::linear, or the
// packed kernel inside a PackedLinearScope (see above).
at::Tensor scoped_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias = at::Tensor());

// The packed path itself, whatever the scope (requires packed_linear_supported(), float32 CPU
// tensors); packs the weight on first use and again after it changes.
at::Tensor packed_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias = at::Tensor());

// For inference only (generation): packs `weight`, a float32 (N, K) CPU tensor, and frees its own
// values, so that the model's weights exist once, packed, not twice. From then on
// nn::scoped_linear(x, weight, bias) runs the packed kernel with it, inside a scope or not, and no
// gradient reaches it; nothing else may read the tensor (it is empty) but packed_rows. Requires
// packed_linear_supported(). With `packed_as` bf16 (--bf16 generation on the CPU), the weight is
// rounded to bf16 (half the memory) and packed for the bf16 kernel of nn/bf16_gemm.h, which
// rounds each float32 input to bf16 and sums in float32: a float32 x gives a float32 product, as
// if x and the weight were rounded to bf16 first. Requires bf16_gemm_supported().
void pack_in_place(at::Tensor weight, c10::ScalarType packed_as = c10::kFloat);
// Whether `weight` was packed in place.
bool packed_in_place(const at::Tensor& weight);
// Rows `indices` (int64, any shape) of a weight packed in place, as embedding(weight, indices) reads
// them from the float32 weight (rounded to bf16 where packed as bf16): float32 (..., K). For an
// embedding shared with an output projection.
at::Tensor packed_rows(const at::Tensor& weight, const at::Tensor& indices);

// Number of packed weights whose tensors are alive (tests).
size_t packed_weight_count();

}  // namespace fairseq_cpp::nn
