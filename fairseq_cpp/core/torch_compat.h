#pragma once
// Every difference between Debian's LibTorch 1.13 (CPU) and PyTorch 2.x (CUDA wheels) that the
// code depends on lives here (LIBTORCH.md, "c10d, 1.13 vs 2.x").

#include <torch/version.h>

#define FSQ_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace fairseq_cpp::compat {

// LibTorch's version as "1.13.1".
inline constexpr const char* kTorchVersion = TORCH_VERSION;
// Whether at::scaled_dot_product_attention exists (PyTorch 2.0+).
inline constexpr bool kHasFusedAttention = FSQ_TORCH_AT_LEAST(2, 0);

}  // namespace fairseq_cpp::compat
