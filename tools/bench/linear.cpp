// The float32 linear layers of beam search on the CPU: the packed kernel (nn/packed_linear.h, the
// weights packed once) on THREADS intra-op threads, against the same on one thread (how it ran
// before the library was compiled with OpenMP) and ATen's linear (the BLAS LibTorch was built with)
// on the same inputs, for the products one decoding step of the fixture's model makes (d 256, FFN
// 1024, 8,000 words) and of transformer-base (d 512, FFN 2048), at 640 rows (beam 5 x 128
// sentences) and at 64. Prints GFLOP/s (the median of RUNS timings of ITERS products each), the
// ratios, and the largest difference from BLAS's values (float32 rounding). BLAS runs on its own
// threads (OpenBLAS: all cores, or OPENBLAS_NUM_THREADS), whatever --threads says.
//
//   OMP_WAIT_POLICY=PASSIVE build/tools/bench/fsq_bench_linear [--threads 2] [--runs 5] [--iters 20]
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "fairseq_cpp/core/torch.h"

#include "fairseq_cpp/core/runtime.h"
#include "fairseq_cpp/nn/packed_linear.h"
#include "tools/bench/multi30k_model.h"  // bench::flag, bench::median_seconds

using namespace fairseq_cpp;

namespace {

struct Shape {
  const char* what;
  int64_t m, k, n;
};

}  // namespace

int main(int argc, char** argv) {
  const int64_t threads = bench::flag(argc, argv, "--threads", 2);
  const int64_t runs = bench::flag(argc, argv, "--runs", 5);
  const int64_t iters = bench::flag(argc, argv, "--iters", 20);
  if (!nn::packed_linear_supported()) {
    std::fprintf(stderr, "fsq_bench_linear: this CPU has neither AVX-512F nor AVX2 with FMA\n");
    return 1;
  }
  std::vector<Shape> shapes;
  for (int64_t m : {640, 64}) {
    shapes.push_back({"fixture q/k/v/out", m, 256, 256});
    shapes.push_back({"fixture fc1", m, 256, 1024});
    shapes.push_back({"fixture fc2", m, 1024, 256});
    shapes.push_back({"fixture output", m, 256, 8000});
    shapes.push_back({"base q/k/v/out", m, 512, 512});
    shapes.push_back({"base fc1", m, 512, 2048});
    shapes.push_back({"base fc2", m, 2048, 512});
    shapes.push_back({"base output", m, 512, 8000});
  }
  torch::NoGradGuard no_grad;
  nn::PackedLinearScope packed;
  at::set_num_threads(static_cast<int>(threads));
  std::printf("float32 linear, GFLOP/s, median of %lld x %lld products; parallel_for on %d of %lld threads\n",
              static_cast<long long>(runs), static_cast<long long>(iters), core::parallel_for_threads(),
              static_cast<long long>(threads));
  std::printf("%-20s %5s %5s %5s %10s %10s %10s %8s %8s %9s\n", "product", "M", "K", "N", "packed", "packed 1t", "BLAS",
              "vs 1t", "vs BLAS", "max diff");
  for (const Shape& s : shapes) {
    at::manual_seed(1);
    const at::Tensor x = at::randn({s.m, s.k});
    const at::Tensor w = at::randn({s.n, s.k}) / std::sqrt(static_cast<double>(s.k));
    const at::Tensor b = at::randn({s.n});
    const double gflop = 2.0 * s.m * s.k * s.n / 1e9;
    at::set_num_threads(1);  // how the kernel ran before the library was compiled with OpenMP
    const double one_s = bench::median_seconds([&] { return nn::scoped_linear(x, w, b); }, runs, iters);
    at::set_num_threads(static_cast<int>(threads));
    const double packed_s = bench::median_seconds([&] { return nn::scoped_linear(x, w, b); }, runs, iters);
    const double blas_s = bench::median_seconds([&] { return at::linear(x, w, b); }, runs, iters);
    const double diff = (nn::scoped_linear(x, w, b) - at::linear(x, w, b)).abs().max().item<double>();
    std::printf("%-20s %5lld %5lld %5lld %10.1f %10.1f %10.1f %7.2fx %7.2fx %9.2g\n", s.what,
                static_cast<long long>(s.m), static_cast<long long>(s.k), static_cast<long long>(s.n), gflop / packed_s,
                gflop / one_s, gflop / blas_s, one_s / packed_s, blas_s / packed_s, diff);
  }
  return 0;
}
