#include "fairseq_cpp/optim/mixed_precision.h"

#include <ATen/autocast_mode.h>

#include "fairseq_cpp/core/autocast_state.h"
#include "fairseq_cpp/core/runtime.h"

namespace fairseq_cpp::optim {

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

std::optional<c10::ScalarType> autocast_dtype(Precision precision, c10::DeviceType device) {
  if (precision == Precision::kBFloat16) return c10::ScalarType::BFloat16;
  if (precision == Precision::kFloat16 && device == c10::DeviceType::CUDA) return c10::ScalarType::Half;
  return std::nullopt;
}

AutocastScope::AutocastScope(Precision precision, c10::DeviceType device) : device_(device) {
  const std::optional<c10::ScalarType> dtype = autocast_dtype(precision, device);
  if (!dtype) return;
  active_ = true;
  previous_ = compat::autocast_state(device_);
  compat::set_autocast_state(device_, {true, *dtype});
  at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope() {
  if (!active_) return;
  // The cache holds the bf16 copies of the weights made in this forward pass: stale after the update.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  compat::set_autocast_state(device_, previous_);
}

c10::ScalarType loss_matmul_dtype(Precision precision, c10::DeviceType device) {
  return loss_matmul_dtype(precision, device, device == c10::DeviceType::CPU && core::cpu_has_bf16_products());
}

c10::ScalarType loss_matmul_dtype(Precision precision, c10::DeviceType device, bool cpu_bf16_products) {
  const bool bf16_products = device == c10::DeviceType::CUDA || (device == c10::DeviceType::CPU && cpu_bf16_products);
  // fp16 keeps float32: the loss's gradient A = p - onehot, unscaled (the loss scale multiplies it
  // only in backward), is mostly below fp16's normal range at a 32k vocabulary.
  return precision == Precision::kBFloat16 && bf16_products ? c10::ScalarType::BFloat16 : c10::ScalarType::Float;
}

}  // namespace fairseq_cpp::optim
