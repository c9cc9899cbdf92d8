#pragma once
// NCCL for CUDA tensors. Compiled with a CUDA build of LibTorch (FSQ_WITH_CUDA); in the CPU build
// asking for it is a clear error.

#include <chrono>

#include <c10/util/intrusive_ptr.h>

#include "fairseq_cpp/core/torch_compat.h"

namespace c10d {
class Store;
#if FSQ_C10D_HAS_BACKEND
class Backend;
#else
class ProcessGroup;
#endif
}  // namespace c10d

namespace fairseq_cpp::distributed {

#if FSQ_C10D_HAS_BACKEND
using NcclBackendBase = c10d::Backend;
#else
using NcclBackendBase = c10d::ProcessGroup;
#endif

c10::intrusive_ptr<NcclBackendBase> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                      std::chrono::milliseconds timeout);

}  // namespace fairseq_cpp::distributed
