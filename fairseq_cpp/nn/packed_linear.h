#pragma once
// Linear layers for beam search on CPU with their weights packed once.
//
// A decoding step multiplies a few hundred rows (beam x sentences) by every weight of the decoder
// and by the (vocabulary x width) output embedding. BLAS re-packs the weight into its panel layout
// on every call, which at these row counts is 10-30% of the GEMM. Here each weight (N, K) is packed
// once into panels of 32 output columns x K (AVX-512), kept while the weight is unchanged, and
// multiplied by a register-blocked kernel (8 rows x 32 columns); the sum over K runs in order, as
// OpenBLAS's kernel does.
//
//   nn::PackedLinearScope packed;        // this thread's inference may use packed weights
//   at::Tensor y = nn::scoped_linear(x, layer->weight, layer->bias);
//
// Outside a scope, for tensors that need gradients, off CPU, not float32, or on a CPU without
// AVX-512F, nn::scoped_linear is ATen's linear (at::linear). A weight registered by
// nn::use_int8_weight (quantized_linear.h) runs int8 whenever no gradient is needed, inside a
// scope or not.

#include <ATen/Tensor.h>

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

// Whether this CPU can run the packed kernel (x86-64 with AVX-512F).
bool packed_linear_supported();

// x (..., K) @ weight (N, K)^T + bias (N) -> (..., N); bias may be undefined. at::linear, or the
// packed kernel inside a PackedLinearScope (see above).
at::Tensor scoped_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias = at::Tensor());

// The packed path itself, whatever the scope (requires packed_linear_supported(), float32 CPU
// tensors); packs the weight on first use and again after it changes.
at::Tensor packed_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias = at::Tensor());

// Number of packed weights whose tensors are alive (tests).
size_t packed_weight_count();

}  // namespace fairseq_cpp::nn
