#pragma once
// What a program that trains or runs a model does first on the CPU: set the intra-op threads
// (common.cpu_threads, default: cores / local processes) and warn when fp32 GEMM runs on the
// slow reference BLAS (LIBTORCH.md, traps 1 and 2).

#include "fairseq_cpp/config/sections.h"

namespace fairseq_cpp::tasks {

// Returns the number of intra-op threads set.
int setup_compute(const config::Config& cfg);

// Local processes on this node, as far as the environment tells: LOCAL_WORLD_SIZE (torchrun and
// our spawn), SLURM_NTASKS_PER_NODE, else distributed_world_size.
int local_processes_hint(const config::Config& cfg);

}  // namespace fairseq_cpp::tasks
