#include "fairseq_cpp/optim/mixed_precision.h"

#include <ATen/autocast_mode.h>

#include "fairseq_cpp/core/torch_compat.h"

namespace fairseq_cpp::optim {
namespace {

// LibTorch 1.13 has one switch per device kind; 2.4+ takes the device type.
bool autocast_enabled(c10::DeviceType device) {
#if FSQ_TORCH_AT_LEAST(2, 4)
  return at::autocast::is_autocast_enabled(device);
#else
  return device == c10::DeviceType::CUDA ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
#endif
}

void set_autocast(c10::DeviceType device, bool enabled, c10::ScalarType dtype) {
#if FSQ_TORCH_AT_LEAST(2, 4)
  at::autocast::set_autocast_enabled(device, enabled);
  at::autocast::set_autocast_dtype(device, dtype);
#else
  if (device == c10::DeviceType::CUDA) {
    at::autocast::set_enabled(enabled);
    at::autocast::set_autocast_gpu_dtype(dtype);
  } else {
    at::autocast::set_cpu_enabled(enabled);
    at::autocast::set_autocast_cpu_dtype(dtype);
  }
#endif
}

c10::ScalarType autocast_dtype(c10::DeviceType device) {
#if FSQ_TORCH_AT_LEAST(2, 4)
  return at::autocast::get_autocast_dtype(device);
#else
  return device == c10::DeviceType::CUDA ? at::autocast::get_autocast_gpu_dtype()
                                         : at::autocast::get_autocast_cpu_dtype();
#endif
}

}  // namespace

Precision precision_of(const config::CommonConfig& common) {
  if (common.bf16) return Precision::kBFloat16;
  return common.fp16 ? Precision::kFloat16 : Precision::kFloat32;
}

std::string precision_name(Precision precision) {
  switch (precision) {
    case Precision::kBFloat16:
      return "bf16";
    case Precision::kFloat16:
      return "fp16";
    default:
      return "fp32";
  }
}

AutocastScope::AutocastScope(Precision precision, c10::DeviceType device) : device_(device) {
  if (precision == Precision::kFloat32) return;
  if (precision == Precision::kFloat16 && device != c10::DeviceType::CUDA) return;
  active_ = true;
  was_enabled_ = autocast_enabled(device_);
  previous_dtype_ = autocast_dtype(device_);
  set_autocast(device_, true, precision == Precision::kFloat16 ? c10::ScalarType::Half : c10::ScalarType::BFloat16);
  at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope() {
  if (!active_) return;
  // The cache holds the bf16 copies of the weights made in this forward pass: stale after the update.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  set_autocast(device_, was_enabled_, previous_dtype_);
}

c10::ScalarType loss_matmul_dtype(Precision precision, c10::DeviceType device) {
  if (device != c10::DeviceType::CUDA) return c10::ScalarType::Float;
  // fp16 keeps float32: the loss's gradient A = p - onehot, unscaled (the loss scale multiplies it
  // only in backward), is mostly below fp16's normal range at a 32k vocabulary.
  return precision == Precision::kBFloat16 ? c10::ScalarType::BFloat16 : c10::ScalarType::Float;
}

}  // namespace fairseq_cpp::optim
