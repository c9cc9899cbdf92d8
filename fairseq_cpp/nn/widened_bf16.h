#pragma once
// bf16 products on a CPU without bf16 hardware (no AVX512_BF16, no AMX). There, LibTorch multiplies
// bf16 matrices in a scalar loop: on an AVX2 CPU its bf16 GEMM ran at 0.004 TFLOP/s against
// SGEMM's 0.12, and a bf16 training update took 10x the float32 one (the Debian lane; longer on
// the wheel's LibTorch). Here the linear layers and attention under bf16 autocast widen their bf16
// operands to float32 (exact), multiply with SGEMM (float32 sums, as bf16 hardware accumulates)
// and round the result to bf16 once: a bf16 product, at float32 GEMM speed. The linear layers keep
// their bf16 operands for backward; attention runs its float32 path on the widened q, k and v,
// which keeps those and its softmax weights in float32 (so bf16 activations there take about what
// float32's take). A weight is rounded at each use, not once per forward pass as autocast's cache
// does: a weight read twice in one pass would sum its two gradients in float32, not in bf16 (no
// model here reads one twice through nn::scoped_linear).
//
//   if (widens_bf16_products(x)) return widened_bf16_linear(x, weight, bias);  // nn::scoped_linear

#include <ATen/Tensor.h>

#include "fairseq_cpp/core/autocast_state.h"

namespace fairseq_cpp::nn {

// When bf16 products are widened (process-wide): on a CPU without bf16 products (the default),
// always (tests, on any CPU), or never (benchmarks: LibTorch's own bf16 products, the previous way).
enum class Bf16Widening { kAuto, kAlways, kNever };
void set_bf16_widening(Bf16Widening when);

// Whether `x`'s products are widened: x a float32 or bf16 CPU tensor, autocast on for the CPU in
// bf16, and the CPU without bf16 products (core::cpu_has_bf16_products), unless
// set_bf16_widening says otherwise.
bool widens_bf16_products(const at::Tensor& x);

// at::linear(x, weight, bias) as bf16 autocast computes it: each operand rounded to bf16, the
// product in float32 sums, rounded to bf16. Gradients: of x in x's dtype, of weight and bias in
// theirs (a float32 weight receives its bf16-rounded gradient, as under autocast).
at::Tensor widened_bf16_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

// Autocast off for the CPU in this scope (the widened float32 work must not be cast back); the
// state before it is restored at its end.
struct CpuAutocastOff : compat::AutocastStateScope {
  CpuAutocastOff()
      : AutocastStateScope(c10::DeviceType::CPU, {false, compat::autocast_state(c10::DeviceType::CPU).dtype}) {}
};

}  // namespace fairseq_cpp::nn
