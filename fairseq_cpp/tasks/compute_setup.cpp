#include "fairseq_cpp/tasks/compute_setup.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include <fmt/format.h>

#include "fairseq_cpp/core/logging.h"
#include "fairseq_cpp/core/runtime.h"

namespace fairseq_cpp::tasks {

int local_processes_hint(const config::Config& cfg) {
  // LOCAL_WORLD_SIZE is "4"; SLURM_NTASKS_PER_NODE is "8" or "8(x2)" (8 tasks on each of 2 nodes).
  for (const char* name : {"LOCAL_WORLD_SIZE", "SLURM_NTASKS_PER_NODE"}) {
    if (const char* value = std::getenv(name); value != nullptr) {
      long local = std::strtol(value, nullptr, 10);
      if (local > 0) return static_cast<int>(local);
    }
  }
  return static_cast<int>(std::max<int64_t>(1, cfg.distributed_training.distributed_world_size));
}

int setup_compute(const config::Config& cfg) {
  int threads = core::configure_cpu_threads(static_cast<int>(cfg.common.cpu_threads), local_processes_hint(cfg));
  std::string settings;
  for (const auto& [name, value] : core::kCpuRuntimeSettings) {
    const char* set = std::getenv(name);
    settings += fmt::format(", {}={}", name, set ? set : "unset");
  }
  log::info("runtime", "{} intra-op CPU threads{}; {}", threads, settings, core::allocator_description());
  if (const int used = core::parallel_for_threads(); used != threads)
    log::warning("runtime", "this build's own CPU kernels run on {} of the {} intra-op threads (built without OpenMP)",
                 used, threads);
  core::warn_if_slow_blas();
  return threads;
}

}  // namespace fairseq_cpp::tasks
