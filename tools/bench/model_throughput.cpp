// Forward+backward throughput of the Multi30k model shape (3+3 layers, d 256, ffn 1024, 4 heads,
// shared 8000-word vocabulary, label smoothing 0.1) on 4096-target-token batches on the CPU,
// against a plain PyTorch reference of the same computation run in the same invocation.
//
//   build/fsq_bench_model [--threads 2] [--iters 5] [--batch 128 --src-len 32 --tgt-len 32]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include <fmt/core.h>
#include "fairseq_cpp/core/torch.h"

#include "fairseq_cpp/criterions/cross_entropy.h"
#include "fairseq_cpp/models/transformer.h"
#include "tools/bench/multi30k_model.h"

using namespace fairseq_cpp;

using bench::flag;

int main(int argc, char** argv) {
  const int64_t threads = flag(argc, argv, "--threads", 2);
  const int64_t iters = flag(argc, argv, "--iters", 5);
  const int64_t batch = flag(argc, argv, "--batch", 128);
  const int64_t src_len = flag(argc, argv, "--src-len", 32);
  const int64_t tgt_len = flag(argc, argv, "--tgt-len", 32);
  at::set_num_threads(static_cast<int>(threads));
  auto model_ptr = bench::multi30k_model();
  models::TransformerModel& model = *model_ptr;
  model.train();
  criterions::CriterionOptions co;
  co.name = "label_smoothed_cross_entropy";
  co.label_smoothing = 0.1;
  criterions::Criterion criterion(co);

  at::Tensor src = torch::randint(4, 8000, {batch, src_len});
  at::Tensor tgt = torch::randint(4, 8000, {batch, tgt_len});
  at::Tensor prev = torch::cat({torch::full({batch, 1}, 2, torch::kLong), tgt.narrow(1, 0, tgt_len - 1)}, 1);
  at::Tensor lengths = torch::full({batch}, src_len, torch::kLong);
  auto step = [&] {
    model.zero_grad();
    criterion(model.forward(src, lengths, prev), tgt).loss.backward();
  };
  step();  // warm-up
  auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < iters; ++i) step();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / static_cast<double>(iters);
  const double ours = static_cast<double>(batch * tgt_len) / seconds;

  std::string command = fmt::format("/usr/bin/python3 {}/tools/bench/model_throughput_ref.py {} {} {} {} {}",
                                    FSQ_SOURCE_DIR, batch, src_len, tgt_len, iters, threads);
  double ref = 0, ref_ms = 0;
  if (FILE* pipe = ::popen(command.c_str(), "r")) {
    if (std::fscanf(pipe, "%lf %lf", &ref, &ref_ms) != 2) ref = 0;
    ::pclose(pipe);
  }
  fmt::print("Multi30k transformer, forward+backward, batch {} x {} -> {} target tokens, {} threads, {} iterations\n",
             batch, tgt_len, batch * tgt_len, threads, iters);
  fmt::print("{:<28} {:>14} {:>12}\n", "implementation", "tokens/s", "ms/iter");
  fmt::print("{:<28} {:>14.0f} {:>12.1f}\n", "fairseq-cpp (LibTorch)", ours, seconds * 1000);
  if (ref > 0) {
    fmt::print("{:<28} {:>14.0f} {:>12.1f}\n", "PyTorch reference (Python)", ref, ref_ms);
    fmt::print("ratio fairseq-cpp / PyTorch: {:.2f}\n", ours / ref);
  } else {
    fmt::print("PyTorch reference failed: {}\n", command);
    return 1;
  }
  return 0;
}
