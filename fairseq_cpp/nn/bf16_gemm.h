#pragma once
// bf16 matrix products on CPUs with AVX512_BF16 (AMD Zen 4 and later, Intel Cooper Lake and
// Sapphire Rapids and later), for --bf16 generation: each weight is packed once, in place
// (nn::pack_in_place), where LibTorch's bf16 linear (oneDNN) reorders it at every call, and the
// float32 activations are rounded to bf16 as they are packed. B is packed into panels of 32
// columns x K whose pairs of rows are interleaved (the layout VDPBF16PS reads), A is read in place
// where its rows hold whole pairs, and a register-blocked kernel (12 rows x 32 columns, 24 float32
// accumulators) takes two k at a time. On a 2-core Zen 4 it ran a Multi30k update's 12 products
// (0.15-0.45 TFLOP/s by shape) in 0.97x the time of LibTorch 1.13's bf16 products (oneDNN) and
// 0.49x SGEMM's (tools/bench/bf16_gemm.cpp): training keeps LibTorch's products, since the kernel
// in their place was not faster in a whole-process A/B.
//
// Arithmetic: each product of two bf16 values is exact in float32, summed in float32 two at a time
// as VDPBF16PS adds them (each addition rounded to nearest even), so the result is within K * 2^-24
// of the sum of the absolute products from the exact sum. The instruction counts bf16 subnormal
// inputs as zero and flushes subnormal sums (bf16 shares float32's range: below 1.2e-38 only). A
// bf16 output is the float32 result plus the bias, rounded once to nearest even as LibTorch rounds
// (NaN to 0x7FC0).
//
//   if (nn::bf16_gemm_supported()) y = nn::bf16_matmul(x, w.t(), at::kBFloat16, bias);

#include <ATen/Tensor.h>

namespace fairseq_cpp::nn {

// Whether this CPU runs the kernel (x86-64 with AVX-512F, BW, VL and AVX512_BF16).
bool bf16_gemm_supported();

// a (M, K) @ b (K, N) for bf16 CPU tensors of any strides, plus `bias` (N; float32 or bf16) where
// defined: a contiguous (M, N) tensor in `out_dtype` (float32 or bf16). `a` may also be float32:
// it is rounded to bf16 first (to nearest even, as a.to(at::kBFloat16) rounds), as it is packed.
// Requires bf16_gemm_supported().
at::Tensor bf16_matmul(const at::Tensor& a, const at::Tensor& b, c10::ScalarType out_dtype,
                       const at::Tensor& bias = at::Tensor());

// B (K, N) packed once, for products by the same B (an inference weight's transpose).
struct Bf16PackedB {
  at::Tensor panels;  // int32 words: panels of 32 columns, each pair of rows interleaved
  int64_t k = 0, n = 0;
};
// b (K, N), a bf16 CPU tensor of any strides, packed. Requires bf16_gemm_supported().
Bf16PackedB bf16_pack_b(const at::Tensor& b);
// bf16_matmul with B packed.
at::Tensor bf16_matmul(const at::Tensor& a, const Bf16PackedB& b, c10::ScalarType out_dtype,
                       const at::Tensor& bias = at::Tensor());

}  // namespace fairseq_cpp::nn
