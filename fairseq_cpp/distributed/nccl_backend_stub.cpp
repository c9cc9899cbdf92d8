// The CPU build's make_nccl_backend: LibTorch was built without CUDA, so there is no NCCL.
#include "fairseq_cpp/distributed/nccl_backend.h"

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "fairseq_cpp/core/errors.h"

namespace fairseq_cpp::distributed {

c10::intrusive_ptr<NcclBackendBase> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>&, int, int,
                                                      std::chrono::milliseconds) {
  raise<UserError>("NCCL needs a CUDA build of LibTorch; this build is CPU-only (use the gloo backend).");
}

}  // namespace fairseq_cpp::distributed
