#include "fairseq_cpp/core/autocast_state.h"

#include <ATen/autocast_mode.h>

#include "fairseq_cpp/core/torch_compat.h"

namespace fairseq_cpp::compat {

AutocastState autocast_state(c10::DeviceType device) {
#if FSQ_TORCH_AT_LEAST(2, 4)
  return {at::autocast::is_autocast_enabled(device), at::autocast::get_autocast_dtype(device)};
#else
  if (device == c10::DeviceType::CUDA) return {at::autocast::is_enabled(), at::autocast::get_autocast_gpu_dtype()};
  return {at::autocast::is_cpu_enabled(), at::autocast::get_autocast_cpu_dtype()};
#endif
}

void set_autocast_state(c10::DeviceType device, const AutocastState& state) {
#if FSQ_TORCH_AT_LEAST(2, 4)
  at::autocast::set_autocast_enabled(device, state.enabled);
  at::autocast::set_autocast_dtype(device, state.dtype);
#else
  if (device == c10::DeviceType::CUDA) {
    at::autocast::set_enabled(state.enabled);
    at::autocast::set_autocast_gpu_dtype(state.dtype);
  } else {
    at::autocast::set_cpu_enabled(state.enabled);
    at::autocast::set_autocast_cpu_dtype(state.dtype);
  }
#endif
}

}  // namespace fairseq_cpp::compat
