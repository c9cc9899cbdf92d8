// The optimizer's part of an update on the Multi30k model (3+3 layers, d 256, shared 8000-word
// vocabulary; 7.6M parameters): the ATen ops that Adam's step, zero_grad and gradient clipping
// run (counted with LibTorch's RecordFunction callbacks, the profiler's hook) and their time, one
// parameter at a time against the flat buffers of Optimizer::flatten, in the same invocation, next
// to one forward+backward of a 4096-token batch for the optimizer's share of an update.
//
//   build/tools/bench/fsq_bench_optimizer [--threads 2] [--iters 20]
#include <ATen/record_function.h>

#include <atomic>
#include <chrono>
#include <string>

#include <fmt/core.h>
#include "fairseq_cpp/core/torch.h"

#include "fairseq_cpp/criterions/cross_entropy.h"
#include "fairseq_cpp/models/transformer.h"
#include "fairseq_cpp/optim/optimizer.h"
#include "tools/bench/multi30k_model.h"

using namespace fairseq_cpp;

namespace {

std::atomic<int64_t> g_ops{0};

struct Measured {
  int64_t ops = 0;     // ATen ops of one step + zero_grad + clip
  double ms = 0;       // their time, mean over the iterations
};

Measured measure(bool flat, int64_t iters) {
  auto model = bench::multi30k_model();
  auto params = models::unique_parameters(*model);
  optim::OptimizerOptions o;
  o.name = "adam";
  o.lr = 5e-4;
  o.betas = {0.9, 0.98};
  auto optimizer = optim::build_optimizer(o, params);
  if (flat) optimizer->flatten();
  {
    torch::NoGradGuard no_grad;
    for (auto& p : params) {
      if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
      p.mutable_grad().copy_(torch::randn_like(p) * 1e-3);
    }
  }
  auto update = [&] {
    if (optimizer->flat())
      optim::clip_grad_norm(optimizer->flat_grads(), 0.1);
    else
      optim::clip_grad_norm(params, 0.1);
    optimizer->step();
    optimizer->zero_grad();
  };
  update();  // warm-up (and Adam's state)
  const int64_t before = g_ops.load();
  update();
  Measured out;
  out.ops = g_ops.load() - before;
  const auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < iters; ++i) update();
  out.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() /
           static_cast<double>(iters);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t threads = bench::flag(argc, argv, "--threads", 2);
  const int64_t iters = bench::flag(argc, argv, "--iters", 20);
  at::set_num_threads(static_cast<int>(threads));
  at::addGlobalCallback(at::RecordFunctionCallback(
      [](const at::RecordFunction&) -> std::unique_ptr<at::ObserverContext> {
        g_ops.fetch_add(1, std::memory_order_relaxed);
        return nullptr;
      }));

  const Measured loose = measure(false, iters), flat = measure(true, iters);

  // One forward+backward of a 4096-target-token batch, for the share of an update.
  auto model = bench::multi30k_model();
  model->train();
  criterions::CriterionOptions co;
  co.name = "label_smoothed_cross_entropy";
  co.label_smoothing = 0.1;
  criterions::Criterion criterion(co);
  const int64_t batch = 128, len = 32;
  at::Tensor src = torch::randint(4, 8000, {batch, len}), tgt = torch::randint(4, 8000, {batch, len});
  at::Tensor prev = torch::cat({torch::full({batch, 1}, 2, torch::kLong), tgt.narrow(1, 0, len - 1)}, 1);
  at::Tensor lengths = torch::full({batch}, len, torch::kLong);
  auto fwd_bwd = [&] {
    models::DecoderFeatures d = model->forward_features(src, lengths, prev);
    criterion(d.features, d.output_weight, tgt).loss.backward();
  };
  fwd_bwd();
  const auto start = std::chrono::steady_clock::now();
  const int64_t passes = 3;
  for (int64_t i = 0; i < passes; ++i) fwd_bwd();
  const double fb_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / passes;

  fmt::print("Adam step + zero_grad + clip_grad_norm, Multi30k model ({} parameters), {} threads, {} iterations\n",
             models::count_parameters(*model), threads, iters);
  fmt::print("{:<34} {:>10} {:>10} {:>22}\n", "", "ATen ops", "ms", "share of an update");
  for (const auto& [name, m] : {std::pair<std::string, Measured>{"one parameter at a time", loose},
                                std::pair<std::string, Measured>{"flat buffers (Optimizer::flatten)", flat}}) {
    fmt::print("{:<34} {:>10} {:>10.2f} {:>21.1f}%\n", name, m.ops, m.ms, 100.0 * m.ms / (m.ms + fb_ms));
  }
  fmt::print("forward+backward, 4096 target tokens: {:.1f} ms; flat / loose: {:.2f}x ops, {:.2f}x time\n", fb_ms,
             static_cast<double>(flat.ops) / static_cast<double>(loose.ops), flat.ms / loose.ms);
  return 0;
}
