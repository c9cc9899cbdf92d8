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

// c10d: Gloo and NCCL derive from c10d::ProcessGroup in 1.13 and from c10d::Backend in 2.x; the
// collectives we call (allreduce, allgather, broadcast) have the same signatures in both.
#define FSQ_C10D_HAS_BACKEND FSQ_TORCH_AT_LEAST(2, 0)
