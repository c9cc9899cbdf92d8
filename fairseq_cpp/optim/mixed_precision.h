#pragma once
// Mixed precision (fairseq's --bf16): matmuls and linear layers of the forward pass run in
// bfloat16 through LibTorch's autocast, while the weights, their gradients and the optimizer's
// state stay float32 (fairseq's master weights) and no loss scaler is needed. The same code on
// the CPU and on CUDA.
//
//   {
//     AutocastScope autocast(Precision::kBFloat16, device.type());
//     decoded = model.forward_features(...);    // linears in bf16, layer norms and softmax in float32
//   }
//   loss.backward();                              // outside the scope, as PyTorch recommends

#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

#include <optional>
#include <string>

#include "fairseq_cpp/config/sections.h"
#include "fairseq_cpp/core/autocast_state.h"

namespace fairseq_cpp::optim {

enum class Precision {
  kFloat32,   // everything in float32
  kBFloat16,  // autocast to bfloat16 (common.bf16)
  kFloat16,   // autocast to float16 on CUDA (common.fp16, with a loss scaler); float32 arithmetic on the CPU
};

// The precision `common.bf16` / `common.fp16` ask for.
Precision precision_of(const config::CommonConfig& common);

// "fp32" / "bf16" / "fp16", as the start-up line names it.
std::string precision_name(Precision precision);

// The dtype autocast runs the products in on `device` for `precision`: bf16, fp16 on CUDA, or none
// (fp32, and fp16 on the CPU, whose arithmetic stays float32).
std::optional<c10::ScalarType> autocast_dtype(Precision precision, c10::DeviceType device);

// The precision of the output projection's products in the loss (Criterion's matmul_dtype): bf16
// in bf16 on CUDA (on the tensor cores, as fairseq's half-precision output layer) and on a CPU
// that multiplies bf16 in hardware (AVX512_BF16 or AMX: core::cpu_has_bf16_products()), where
// the projection is about a quarter of a Multi30k update's products and float32 runs it at
// SGEMM's rate (on an AVX512_BF16 EPYC, 0.119 TFLOP/s against bf16's 0.786: the GEMM ceiling
// of docs/benchmarks/cpu.md; on a Zen 4 with AVX512_BF16, 0.19 against 0.41); float32 for
// fp16 (the loss's unscaled gradient would fall below fp16's normal range), for fp32, and on
// other CPUs, whose bf16 products are widened to float32 anyway (nn/widened_bf16.h). The CPU's
// choice follows the hardware, not nn::set_bf16_widening (tests and benchmarks force the linear
// layers' widening).
c10::ScalarType loss_matmul_dtype(Precision precision, c10::DeviceType device);
// The same for a CPU that has bf16 products or not.
c10::ScalarType loss_matmul_dtype(Precision precision, c10::DeviceType device, bool cpu_bf16_products);

// Autocast on `device` for the scope's lifetime (nothing for kFloat32, nor for kFloat16 on the CPU,
// where LibTorch 1.13 has no float16 autocast); restores the previous
// state at its end and clears autocast's cast cache when the outermost scope ends.
class AutocastScope {
 public:
  AutocastScope(Precision precision, c10::DeviceType device);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool active_ = false;
  c10::DeviceType device_;
  compat::AutocastState previous_;
};

}  // namespace fairseq_cpp::optim
