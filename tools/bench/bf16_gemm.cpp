// The products of a bf16 training update on a CPU with AVX512_BF16: this project's kernel
// (nn/bf16_gemm.h) against LibTorch's bf16 product (at::mm: oneDNN in LibTorch 1.13 and 2.x), the
// previous way, and the float32 product (SGEMM), on the same operands. The shapes are those of the
// Multi30k model's linear layers at 4,096 tokens (d 256, FFN 1024, 8,000 words), each in its three
// products (forward x W^T, the input's gradient g W, the weight's gradient g^T x), and a 2048^3
// product. Prints TFLOP/s (the median of RUNS timings of ITERS products each), the ratios, and the
// largest error of each bf16 result against the float64 product of the same operands, relative to
// the largest value of that product.
//
//   OMP_WAIT_POLICY=PASSIVE build/tools/bench/fsq_bench_bf16_gemm [--threads 2] [--runs 5] [--iters 5]
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "fairseq_cpp/core/torch.h"

#include "fairseq_cpp/nn/bf16_gemm.h"
#include "tools/bench/multi30k_model.h"  // bench::flag, bench::median_seconds

using namespace fairseq_cpp;

namespace {

struct Product {
  std::string what;
  at::Tensor a, b;  // bf16 operands, as the update's product reads them (transposed views where it does)
};

at::Tensor bf16(at::IntArrayRef sizes) { return at::randn(sizes).to(at::kBFloat16); }

// The three products of a linear layer (N, K) at M rows.
void add_layer(std::vector<Product>& out, const char* name, int64_t m, int64_t k, int64_t n) {
  const at::Tensor x = bf16({m, k}), w = (bf16({n, k}) / std::sqrt(static_cast<double>(k))).to(at::kBFloat16);
  const at::Tensor g = bf16({m, n});
  out.push_back({std::string(name) + " fwd", x, w.t()});
  out.push_back({std::string(name) + " dx", g, w});
  out.push_back({std::string(name) + " dW", g.t(), x});
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t threads = bench::flag(argc, argv, "--threads", 2);
  const int64_t runs = bench::flag(argc, argv, "--runs", 5);
  const int64_t iters = bench::flag(argc, argv, "--iters", 5);
  if (!nn::bf16_gemm_supported()) {
    std::fprintf(stderr, "fsq_bench_bf16_gemm: this CPU has no AVX512_BF16\n");
    return 1;
  }
  torch::NoGradGuard no_grad;
  at::set_num_threads(static_cast<int>(threads));
  at::manual_seed(1);
  std::vector<Product> products;
  add_layer(products, "q/k/v/out 256x256", 4096, 256, 256);
  add_layer(products, "fc1 256->1024", 4096, 256, 1024);
  add_layer(products, "fc2 1024->256", 4096, 1024, 256);
  add_layer(products, "output 256->8000", 4096, 256, 8000);
  products.push_back({"2048^3", bf16({2048, 2048}), bf16({2048, 2048})});
  std::printf("bf16 products, TFLOP/s, median of %lld x %lld products on %lld threads\n", static_cast<long long>(runs),
              static_cast<long long>(iters), static_cast<long long>(threads));
  std::printf("%-24s %5s %5s %5s %8s %8s %8s %8s %8s %9s %9s\n", "product", "M", "K", "N", "ours", "LibTorch", "fp32",
              "vs bf16", "vs fp32", "err ours", "LibTorch");
  double ours_total = 0, theirs_total = 0, fp32_total = 0;
  for (const Product& p : products) {
    const int64_t m = p.a.size(0), k = p.a.size(1), n = p.b.size(1);
    const double tflop = 2.0 * m * k * n / 1e12;
    const at::Tensor a32 = p.a.to(at::kFloat), b32 = p.b.to(at::kFloat);
    const double ours = bench::median_seconds([&] { return nn::bf16_matmul(p.a, p.b, at::kBFloat16); }, runs, iters);
    const double theirs = bench::median_seconds([&] { return at::mm(p.a, p.b); }, runs, iters);
    const double fp32 = bench::median_seconds([&] { return at::mm(a32, b32); }, runs, iters);
    const at::Tensor exact = p.a.to(at::kDouble).mm(p.b.to(at::kDouble));
    const double scale = exact.abs().max().item<double>();
    const double ours_diff =
        (nn::bf16_matmul(p.a, p.b, at::kBFloat16).to(at::kDouble) - exact).abs().max().item<double>() / scale;
    const double theirs_diff = (at::mm(p.a, p.b).to(at::kDouble) - exact).abs().max().item<double>() / scale;
    if (p.what != "2048^3") ours_total += ours, theirs_total += theirs, fp32_total += fp32;
    std::printf("%-24s %5lld %5lld %5lld %8.3f %8.3f %8.3f %7.2fx %7.2fx %9.1e %9.1e\n", p.what.c_str(),
                static_cast<long long>(m), static_cast<long long>(k), static_cast<long long>(n), tflop / ours,
                tflop / theirs, tflop / fp32, theirs / ours, fp32 / ours, ours_diff, theirs_diff);
  }
  std::printf("%-24s %17s %7.1f ms %7.1f ms %7.1f ms %6.2fx %7.2fx\n", "the layers' 12 products", "", ours_total * 1e3,
              theirs_total * 1e3, fp32_total * 1e3, theirs_total / ours_total, fp32_total / ours_total);
  return 0;
}
