#pragma once
// Process-wide compute settings for programs that train or run a model on the CPU:
// intra-op threads (LIBTORCH.md trap 2) and a check that fp32 GEMM is not on the slow
// reference BLAS (trap 1).

#include <cstdint>
#include <cstdlib>
#include <string>

// Defined where this compiler can build AVX-512 functions (target attributes and <immintrin.h>)
// for a run-time choice by cpu_has_avx512f(); the kernels that use it have a portable fallback.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define FSQ_AVX512_KERNELS 1
#endif

namespace fairseq_cpp::core {

// Idle threads of the two thread pools must not spin against the busy ones:
// - LibTorch's OpenMP threads busy-wait between parallel regions and take the cores from
//   OpenBLAS's threads: a Multi30k training step ran 1.44x faster with OMP_WAIT_POLICY=PASSIVE;
// - OpenBLAS's idle workers call sched_yield in a loop for 2^28 cycles before they sleep, against
//   LibTorch's elementwise work: OPENBLAS_THREAD_TIMEOUT=4 (its minimum, 2^4 cycles) took 10% off
//   the wall time of 16 Multi30k updates and three quarters of the system time.
// Both libraries read their variable when they load, before main: the command a user runs is a
// small launcher without LibTorch (cli/launch.cpp) that sets them and executes the program, and a
// program started directly calls reexec_with_cpu_runtime_settings first, which sets them and
// re-executes itself once (unless the user set them).
// (Setting them from a .preinit_array instead does not work: it runs before libc's initializer,
// which points `environ` back at the process's original block, and the libraries' constructors
// then read that; a Multi30k update took twice as long.)
inline constexpr const char* kCpuRuntimeSettings[][2] = {{"OMP_WAIT_POLICY", "PASSIVE"},
                                                        {"OPENBLAS_THREAD_TIMEOUT", "4"}};
void reexec_with_cpu_runtime_settings(int argc, char** argv);
// Sets the variables of kCpuRuntimeSettings the user did not set; returns whether any was set.
// Inline: the launcher links no library of the project.
inline bool set_cpu_runtime_settings() {
  bool changed = false;
  for (const auto& [name, value] : kCpuRuntimeSettings) {
    if (std::getenv(name) != nullptr) continue;
    setenv(name, value, 1);
    changed = true;
  }
  return changed;
}

// The malloc this process runs on: "jemalloc (narenas 1, dirty_decay_ms -1)" when the programs
// linked jemalloc (cli/allocator.cpp), else "glibc malloc".
std::string allocator_description();

// Hands the allocator's free pages back to the system: jemalloc's (which the programs tell to keep
// them for reuse: cli/allocator.cpp) or glibc's. For the points where what was freed will not be
// asked for again soon: after a search's encoder (its activations would sit beside the decoder's
// caches) and after a batch's search (the next batch's larger caches do not fit in the freed ones).
// Translation on the fixture, beam 5, batch 128: peak 426-445 MiB -> 360 MiB at the same speed.
void release_free_memory();

// Gives back the resident pages mapped read-only from files that this process holds no private copy
// of: the code and constant data of the program and its shared libraries (Debian's LibTorch loads
// about 290, OpenCV, FFmpeg and GDAL among them, which touch their pages while they start and never
// again). A page still in use comes back from the page cache at its next touch, as the kernel's own
// reclaim would bring it. A mapping with a private (written) page, resident or swapped out, is left
// whole, and so is a device's. For a program about to run long after its start (translation on the
// CPU, once the model is loaded), while no other thread maps or unmaps memory: between reading
// /proc/self/smaps and the madvise, a range unmapped and reused would lose its data. Returns the
// bytes given back.
int64_t release_file_pages();

// Ends the process with `code` once stdio is flushed, without the static destructors: LibTorch
// 2.x's touch about 75 MiB at exit (translation of the fixture's test split: peak RSS 527 -> 446
// MiB), and the system frees what the process holds at once. For the programs whose output is
// written and closed when their main function returns (generate, interactive).
[[noreturn]] void exit_without_teardown(int code);

// Cores this process may run on (its CPU affinity mask).
int available_cores();

// Whether this CPU runs AVX-512F (x86-64 with GCC or Clang; false elsewhere): the packed GEMM,
// the vectorized log_softmax and the beam candidates' scan use it; without it, their AVX2 forms
// (cpu_has_avx2_fma) or LibTorch's operators.
bool cpu_has_avx512f();
// Whether this CPU runs AVX2 with FMA (x86-64 with GCC or Clang; false elsewhere): the packed
// GEMM and the beam candidates' scan have AVX2 forms for CPUs without AVX-512F.
bool cpu_has_avx2_fma();
// Tests: while set, cpu_has_avx512f() answers false, so that the AVX2 forms of the kernels run on
// a CPU that has AVX-512F as well (process-wide).
void use_avx2_kernels_only(bool only);

// Whether this CPU multiplies bf16 in hardware (AVX512_BF16 or AMX-BF16, from /proc/cpuinfo's
// flags): without either, LibTorch's bf16 products run slower than float32's.
bool cpu_has_bf16_products();

// Sets LibTorch's intra-op threads and the BLAS's own threads (set_blas_threads): `requested`
// when > 0, else available cores / local processes (at least 1). Returns the number set.
int configure_cpu_threads(int requested, int local_processes);

// The threads of the BLAS's own pool where it has one: OpenBLAS's pthread build (Debian's
// libopenblas0-pthread), which at::set_num_threads does not reach: a worker told to use one
// thread still ran its GEMMs on two. 0 where the loaded BLAS has no such setting (the wheel's MKL
// follows OpenMP's count). set_blas_threads returns the count before (0 where none).
int blas_threads();
int set_blas_threads(int threads);

// The threads that an at::parallel_for in this library's own code runs on: at::get_num_threads()
// when the library is compiled with OpenMP, as CMakeLists.txt does, and 1 without (LibTorch's
// OpenMP backend is a header template, compiled into the caller: without -fopenmp it runs the whole
// range on the calling thread).
int parallel_for_threads();

struct BlasProbe {
  double gflops = 0;    // measured fp32 GEMM speed, best of five 384^3 multiplies
  std::string library;  // the libblas.so.3 this process loaded (real path), empty if none
  bool slow = false;    // below kSlowBlasGflops: almost certainly the netlib reference BLAS
};
// The netlib reference BLAS reaches about 6 GFLOP/s here, OpenBLAS 80-200 on one or two cores.
inline constexpr double kSlowBlasGflops = 12.0;

// Times a small fp32 matmul (about 5 ms on a fast BLAS, 100 ms on the reference one).
BlasProbe probe_blas();
// Probes and logs a warning that names the fix when the GEMM path is slow; returns the probe.
BlasProbe warn_if_slow_blas();

}  // namespace fairseq_cpp::core
