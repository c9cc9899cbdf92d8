#include "fairseq_cpp/core/runtime.h"

#include <atomic>

#include <dlfcn.h>
#include <malloc.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>
#include <vector>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "fairseq_cpp/core/logging.h"
#include "fairseq_cpp/core/meters.h"

namespace fairseq_cpp::core {
namespace {

// The file behind the libblas.so.3 mapping of this process, from /proc/self/maps.
std::string loaded_blas_library() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    auto slash = line.find('/');
    if (slash == std::string::npos) continue;
    std::string path = line.substr(slash);
    if (path.find("libblas.so") != std::string::npos || path.find("libopenblas") != std::string::npos) return path;
  }
  return "";
}

// jemalloc's control function when the program linked jemalloc (cli/allocator.cpp), else null.
using Mallctl = int (*)(const char*, void*, size_t*, void*, size_t);
Mallctl jemalloc_mallctl() {
  static const auto mallctl = reinterpret_cast<Mallctl>(dlsym(RTLD_DEFAULT, "mallctl"));
  return mallctl;
}

}  // namespace

void reexec_with_cpu_runtime_settings(int argc, char** argv) {
  if (!set_cpu_runtime_settings()) return;
  std::vector<char*> args(argv, argv + argc);
  args.push_back(nullptr);
  execv("/proc/self/exe", args.data());
  // exec failed: carry on with the spinning defaults.
}

std::string allocator_description() {
  const Mallctl mallctl = jemalloc_mallctl();
  if (mallctl == nullptr) return "glibc malloc";
  unsigned narenas = 0;
  size_t narenas_size = sizeof(narenas);
  ssize_t decay = 0;
  size_t decay_size = sizeof(decay);
  if (mallctl("opt.narenas", &narenas, &narenas_size, nullptr, 0) != 0 ||
      mallctl("opt.dirty_decay_ms", &decay, &decay_size, nullptr, 0) != 0)
    return "jemalloc";
  return "jemalloc (narenas " + std::to_string(narenas) + ", dirty_decay_ms " + std::to_string(decay) + ")";
}

void release_free_memory() {
  const Mallctl mallctl = jemalloc_mallctl();
  if (mallctl == nullptr) {
    malloc_trim(0);
    return;
  }
  // Every arena (jemalloc's MALLCTL_ARENAS_ALL): its dirty and muzzy pages.
  mallctl("arena.4096.purge", nullptr, nullptr, nullptr, 0);
}

int64_t release_file_pages() {
  std::ifstream smaps("/proc/self/smaps");
  struct Mapping {
    uintptr_t start = 0, end = 0;
    bool read_only_file = false;
    int64_t rss_kb = 0, private_kb = 0;  // private: written pages, in memory (Anonymous) or swapped out (Swap)
  };
  std::vector<Mapping> mappings;
  std::string line;
  while (std::getline(smaps, line)) {
    unsigned long start = 0, end = 0, inode = 0;
    char perms[8] = {};
    unsigned long long offset = 0;
    unsigned major = 0, minor = 0;
    int path = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx %7s %llx %x:%x %lu %n", &start, &end, perms, &offset, &major, &minor, &inode,
                    &path) == 7) {
      // A file's, not a device's (a driver's mapping, as CUDA's of /dev/nvidia*, is left to it).
      const bool file = inode != 0 && line.compare(static_cast<size_t>(path), 1, "/") == 0 &&
                        line.compare(static_cast<size_t>(path), 5, "/dev/") != 0;
      mappings.push_back({start, end, file && perms[1] != 'w', 0, 0});
    } else if (!mappings.empty()) {
      long long kb = 0;
      if (std::sscanf(line.c_str(), "Rss: %lld kB", &kb) == 1) mappings.back().rss_kb = kb;
      if (std::sscanf(line.c_str(), "Anonymous: %lld kB", &kb) == 1) mappings.back().private_kb += kb;
      if (std::sscanf(line.c_str(), "Swap: %lld kB", &kb) == 1) mappings.back().private_kb += kb;
    }
  }
  int64_t released = 0;
  for (const Mapping& m : mappings) {
    // Without write permission and without a private copy (resident or swapped out: a library's
    // relocated data, made read-only after relocation, may be either), every page is the file's.
    if (!m.read_only_file || m.private_kb != 0 || m.rss_kb == 0) continue;
    if (madvise(reinterpret_cast<void*>(m.start), m.end - m.start, MADV_DONTNEED) == 0) released += m.rss_kb * 1024;
  }
  return released;
}

void exit_without_teardown(int code) {
  std::fflush(nullptr);
  _exit(code);
}

int available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1, static_cast<int>(at::get_num_interop_threads()));
}

namespace {
std::atomic<bool> avx2_kernels_only{false};
}  // namespace

void use_avx2_kernels_only(bool only) { avx2_kernels_only = only; }

bool cpu_has_avx512f() {
#ifdef FSQ_AVX512_KERNELS
  static const bool yes = __builtin_cpu_supports("avx512f");
  return yes && !avx2_kernels_only.load(std::memory_order_relaxed);
#else
  return false;
#endif
}

bool cpu_has_avx2_fma() {
#ifdef FSQ_AVX512_KERNELS
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
#else
  return false;
#endif
}

bool cpu_has_bf16_products() {
  static const bool yes = [] {
    std::ifstream in("/proc/cpuinfo");
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("flags", 0) != 0) continue;
      std::istringstream flags(line.substr(line.find(':') + 1));
      for (std::string flag; flags >> flag;)
        if (flag == "avx512_bf16" || flag == "amx_bf16") return true;
      return false;  // (every processor lists the same flags)
    }
    return false;
  }();
  return yes;
}

int configure_cpu_threads(int requested, int local_processes) {
  int threads = requested > 0 ? requested : std::max(1, available_cores() / std::max(1, local_processes));
  at::set_num_threads(threads);
  set_blas_threads(threads);
  return threads;
}

int blas_threads() {
  static const auto get = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  return get != nullptr ? get() : 0;
}

int set_blas_threads(int threads) {
  static const auto set = reinterpret_cast<void (*)(int)>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  const int before = blas_threads();
  if (set != nullptr && before > 0) set(threads);
  return before;
}

int parallel_for_threads() {
  // A range of one element per thread: each thread of the region takes one call, and a region
  // compiled without OpenMP is one call for the whole range.
  std::atomic<int> calls{0};
  at::parallel_for(0, at::get_num_threads(), 1, [&](int64_t, int64_t) { ++calls; });
  return calls.load();
}

BlasProbe probe_blas() {
  constexpr int64_t n = 384;
  at::Tensor a = at::rand({n, n});
  at::Tensor b = at::rand({n, n});
  at::mm(a, b);  // warm-up: first call loads and initialises the BLAS
  double best = 1e9;
  for (int i = 0; i < 5; ++i) {
    double start = monotonic_seconds();
    at::Tensor c = at::mm(a, b);
    best = std::min(best, monotonic_seconds() - start);
  }
  BlasProbe probe;
  probe.gflops = 2.0 * n * n * n / std::max(best, 1e-9) / 1e9;
  probe.library = loaded_blas_library();
  probe.slow = probe.gflops < kSlowBlasGflops;
  return probe;
}

BlasProbe warn_if_slow_blas() {
  BlasProbe probe = probe_blas();
  if (probe.slow) {
    log::warning("runtime",
                 "fp32 matrix multiply runs at {:.1f} GFLOP/s through {}: this is the slow reference BLAS "
                 "(about 20x slower). Fix: `apt-get install libopenblas0-pthread` or `update-alternatives --set "
                 "libblas.so.3-x86_64-linux-gnu /usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3` (as root).",
                 probe.gflops, probe.library.empty() ? "an unknown BLAS" : probe.library);
  } else {
    log::debug("runtime", "fp32 matrix multiply: {:.1f} GFLOP/s through {}", probe.gflops, probe.library);
  }
  return probe;
}

}  // namespace fairseq_cpp::core
