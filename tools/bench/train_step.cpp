// One training update of fairseq's Transformer, base (`transformer`) or big
// (`transformer_vaswani_wmt_en_de_big`), shared vocabulary of --vocab words, on a fixed batch of
// random sentences of --len tokens (source and target) filling --max-tokens target tokens, through
// the trainer as fairseq-cpp-train runs it: autocast forward (bf16, or float32), the float32
// label-smoothed loss, backward, clipping, flat Adam. On CUDA when present (the GPU issue's
// throughput figure), else on the CPU. Prints one line per setting:
//   arch, precision, device, tokens/step, step time (median ms), target tokens/s, peak memory,
//   model TFLOP/s and MFU against --peak-tflops (dense bf16 peak; H100 SXM and H200: 989).
// FLOPs per update (stated with the output; fairseq's tokens, not padding, are what is counted):
//   6 x (encoder non-embedding parameters x source tokens + decoder non-embedding parameters x
//   target tokens) + 6 x d x V x target tokens (the output projection)
//   + attention scores and values, 3 x 4 x d x (S^2 per encoder layer, T^2 + T x S per decoder layer)
//   per sentence (forward 2 GEMMs of 2 x d FLOPs per query-key pair; backward twice that; the
//   causal mask is not discounted).
//
//   fsq_bench_train_step [--arch transformer|transformer_vaswani_wmt_en_de_big] [--vocab 32000]
//       [--max-tokens 16384] [--len 64] [--bf16 1] [--iters 20] [--warmup 5] [--threads N]
//       [--peak-tflops 989] [--cpu 1] [--gemm 0] [--profile FILE] [--profile-steps 2]
//       [--checkpoint-activations 1] [--workers N --rank R --port P] [--zero-sharding none|os|os_grad]
//       [--layers L] [--low-precision-copies 0] [--widen-bf16 0] [--loss-rows 0]
// --widen-bf16 0: bf16 products by LibTorch even on a CPU without bf16 hardware (nn/widened_bf16.h).
// --checkpoint-activations 1: model.checkpoint_activations (each layer recomputed in backward).
// --low-precision-copies 0: autocast casts each weight at each use (trainer::TrainerOptions).
// --loss-rows 0: the loss's chunks in LibTorch's operators on the CPU too (CriterionOptions::row_kernel).
// --layers L: L encoder and L decoder layers of the architecture's widths (tools/bench/largest_model.sh).
// --workers N: this process is rank R of N, a Gloo group over TCP with rank 0's store on
// 127.0.0.1:P (run one process per rank: tools/bench/memory.sh); each rank trains on its own copy
// of the batch, and --zero-sharding shards the optimizer state (os) and gradients (os_grad) over them.
// On the CPU it also prints one line of memory (in GiB, 2^30 bytes):
//   memory: model state 3.128 (weights 0.782, gradients 0.782, float64 sum 0.000, optimizer 1.564),
//   activations 2.100, peak RSS 6.380
// the model state counted from its tensors (trainer::Trainer::model_state_bytes, after the timed
// updates: os_grad's float64 slice exists during an update only); activations = what one more forward pass and loss of
// the same batch add to the resident set (what backward keeps), measured after the timed updates
// with every allocation of 128 KiB or more served by its own mapping (mallopt M_MMAP_THRESHOLD),
// so that a freed tensor leaves the resident set.
// `--arch multi30k` is the Multi30k preset's model (3+3 layers, d 256, 8,000 words). On the CPU it
// also prints the GEMM-bound ceiling: a 2048^3 matrix product's FLOP rate on the same threads.
// --profile FILE: after the timed updates, profiles --profile-steps more (LibTorch 2.x's Kineto
// profiler; tools/bench/step_profile.h says how time is classified), prints one line
//   profile: GEMM 41.0%, attention 9.3%, optimizer 2.1%, all-reduce 0.0%, other 30.2%, host gaps ...
// (shares of the profiled steps' wall time: of CUDA kernel time on the GPU, of CPU op time on the
// CPU; all-reduce is 0 here, one process) and writes the shares and the largest ops or kernels to FILE.
#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <fmt/core.h>
#include <torch/cuda.h>
#include "fairseq_cpp/core/torch.h"

#if FSQ_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include "fairseq_cpp/core/runtime.h"
#include "fairseq_cpp/core/torch_compat.h"
#include "fairseq_cpp/criterions/cross_entropy.h"
#include "fairseq_cpp/distributed/gang.h"
#include "fairseq_cpp/distributed/process_group_gang.h"
#include "fairseq_cpp/models/transformer.h"
#include "fairseq_cpp/nn/widened_bf16.h"
#include "fairseq_cpp/optim/lr_scheduler.h"
#include "fairseq_cpp/optim/mixed_precision.h"
#include "fairseq_cpp/optim/optimizer.h"
#include "fairseq_cpp/trainer/trainer.h"
#include "tools/bench/multi30k_model.h"
#include "tools/bench/step_profile.h"

using namespace fairseq_cpp;

namespace {

using bench::text_flag;

double double_flag(int argc, char** argv, const std::string& name, double fallback) {
  const std::string text = text_flag(argc, argv, name, "");
  return text.empty() ? fallback : std::stod(text);
}

// Parameters under `prefix` ("encoder." / "decoder.") other than the token embeddings and the
// output projection (the same matrix here, counted apart).
int64_t non_embedding_parameters(torch::nn::Module& model, const std::string& prefix) {
  int64_t n = 0;
  for (const auto& p : model.named_parameters()) {
    const std::string& name = p.key();
    if (name.rfind(prefix, 0) == 0 && name.find("embed_tokens") == std::string::npos &&
        name.find("output_projection") == std::string::npos)
      n += p.value().numel();
  }
  return n;
}

double gib(double bytes) { return bytes / (1 << 30); }

// The resident set of this process now, and its peak so far, in bytes.
double resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  long pages = 0, resident = 0;
  statm >> pages >> resident;
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE));
}
double peak_resident_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) * 1024;
}

double bytes_of(const at::IValue& value) {
  if (value.isTensor()) return static_cast<double>(value.toTensor().nbytes());
  double sum = 0;
  if (value.isList())
    for (const at::IValue& item : value.toListRef()) sum += bytes_of(item);
  return sum;
}

// What the autograd graph of one forward pass and loss holds: the resident set it adds.
double activation_bytes(models::TransformerModel& model, const criterions::Criterion& criterion, const data::Batch& b,
                        optim::Precision precision) {
  const double before = resident_bytes();
  models::DecoderFeatures decoded;
  {
    optim::AutocastScope autocast(precision, c10::DeviceType::CPU);
    decoded = model.forward_features(b.src_tokens, b.src_lengths, b.prev_output_tokens);
  }
  criterions::LossOutput out = criterion(decoded.features, decoded.output_weight, b.target);
  return resident_bytes() - before;
}

// The model state line (see the header).
void print_memory(const trainer::ModelStateBytes& state, double activations) {
  const auto g = [](int64_t bytes) { return gib(static_cast<double>(bytes)); };
  std::printf(
      "memory: model state %.3f (weights %.3f, gradients %.3f, float64 sum %.3f, optimizer %.3f, "
      "low-precision copies %.3f), activations %.3f, peak RSS %.3f\n",
      g(state.total()), g(state.weights), g(state.gradients), g(state.gradient_sum), g(state.optimizer),
      g(state.low_precision), gib(activations), gib(peak_resident_bytes()));
}

// --workers N: this process's rank of a Gloo group over TCP on this host; else a group of one.
std::shared_ptr<distributed::Gang> bench_gang(int argc, char** argv, c10::Device device) {
  const int64_t workers = bench::flag(argc, argv, "--workers", 1);
  if (workers <= 1) return std::make_shared<distributed::FakeGang>(1, 0, device);
  distributed::ProcessGroupOptions o;
  o.master_port = static_cast<int>(bench::flag(argc, argv, "--port", 29533));
  o.rank = static_cast<int>(bench::flag(argc, argv, "--rank", 0));
  o.world_size = static_cast<int>(workers);
  o.timeout_seconds = 1200;
  o.device = device;
  o.backend = "gloo";
  return distributed::make_process_group_gang(o);
}

// The benchmarked model: --arch's widths (--layers deep), its vocabulary shared, or the Multi30k preset's.
std::shared_ptr<models::TransformerModel> bench_model(int argc, char** argv, const std::string& arch, int64_t vocab) {
  if (arch == "multi30k") return bench::multi30k_model();  // the Multi30k preset's model (8,000 words)
  config::ModelConfig m;
  m.arch = arch;
  m.share_all_embeddings = true;
  m.checkpoint_activations = bench::flag(argc, argv, "--checkpoint-activations", 0) != 0;
  if (const int64_t layers = bench::flag(argc, argv, "--layers", 0); layers > 0)
    m.encoder_layers = m.decoder_layers = layers;  // the architecture's widths, this depth
  return std::make_shared<models::TransformerModel>(models::resolve_transformer_options(m, config::TaskConfig{}),
                                                    models::Vocabularies{vocab, vocab, 1, true});
}

// `batch` random sentences of `len` tokens (source and target) ending in </s>, on `device`.
data::Batch bench_batch(int64_t batch, int64_t len, int64_t vocab, c10::Device device) {
  data::Batch b;
  b.src_tokens = torch::randint(4, vocab, {batch, len}, torch::kLong);
  b.src_tokens.select(1, len - 1).fill_(2);
  b.src_lengths = torch::full({batch}, len, torch::kLong);
  b.target = torch::randint(4, vocab, {batch, len}, torch::kLong);
  b.target.select(1, len - 1).fill_(2);
  b.prev_output_tokens = torch::cat({torch::full({batch, 1}, 2, torch::kLong), b.target.narrow(1, 0, len - 1)}, 1);
  b.ntokens = batch * len;
  b.nsentences = batch;
  for (at::Tensor* t : {&b.src_tokens, &b.src_lengths, &b.target, &b.prev_output_tokens}) *t = t->to(device);
  return b;
}

// On the CPU: the GEMM-bound ceiling, a 2048^3 matrix product in the update's precision on the same
// threads, as the update's linear layers take it (in bf16 on a CPU without bf16 products, widened
// to float32: nn/widened_bf16.h), and the share of it that the update's model FLOP rate `tflops` reached.
void print_gemm_ceiling(bool bf16, double tflops) {
  const int64_t n = 2048;
  const auto dtype = bf16 ? at::kBFloat16 : at::kFloat;
  at::Tensor a = torch::randn({n, n}).to(dtype), b = torch::randn({n, n}).to(dtype);
  torch::NoGradGuard no_grad;
  optim::AutocastScope autocast(bf16 ? optim::Precision::kBFloat16 : optim::Precision::kFloat32, c10::DeviceType::CPU);
  const bool widened = nn::widens_bf16_products(a);
  const auto product = [&] { return widened ? nn::widened_bf16_linear(a, b, at::Tensor()) : at::mm(a, b); };
  product();
  std::vector<double> s;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    product();
    s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(s.begin(), s.end());
  const double gemm_tflops = 2.0 * n * n * n / s[s.size() / 2] / 1e12;
  std::printf("GEMM %lldx%lldx%lld %s%s on %d threads: %.3f TFLOP/s; this update ran at %.0f%% of it\n",
              static_cast<long long>(n), static_cast<long long>(n), static_cast<long long>(n), bf16 ? "bf16" : "fp32",
              widened ? " (widened to float32: no bf16 products on this CPU)" : "", at::get_num_threads(), gemm_tflops,
              100 * tflops / gemm_tflops);
}

// Whether --profile and --profile-steps can be followed (the error printed where not).
bool profile_flags_valid(const std::string& path, int64_t steps) {
  if (!path.empty() && !bench::kStepProfileSupported) {
    std::fprintf(stderr, "fsq_bench_train_step: --profile needs LibTorch 2.x (the Kineto profiler); this is %s\n",
                 compat::kTorchVersion);
    return false;
  }
  if (!path.empty() && steps <= 0) {
    std::fprintf(stderr, "fsq_bench_train_step: --profile-steps must be greater than 0, but is %lld instead\n",
                 static_cast<long long>(steps));
    return false;
  }
  return true;
}

// fairseq's recipe for these models: label-smoothed cross-entropy (0.1), adam (0.9, 0.98) at 5e-4,
// inverse_sqrt with 4,000 warm-up updates.
criterions::CriterionOptions bench_criterion_options(int argc, char** argv) {
  criterions::CriterionOptions co;
  co.name = "label_smoothed_cross_entropy";
  co.label_smoothing = 0.1;
  co.row_kernel = bench::flag(argc, argv, "--loss-rows", 1) != 0;
  return co;
}

optim::OptimizerOptions bench_optimizer_options() {
  optim::OptimizerOptions oo;
  oo.name = "adam";
  oo.lr = 5e-4;
  oo.betas = {0.9, 0.98};
  return oo;
}

optim::LrSchedulerOptions bench_schedule() {
  optim::LrSchedulerOptions so;
  so.name = "inverse_sqrt";
  so.lr = {5e-4};
  so.warmup_updates = 4000;
  return so;
}

// The trainer's options from the flags (--bf16, --zero-sharding, --low-precision-copies); none,
// with the error printed, for a --zero-sharding that is not none, os or os_grad.
std::optional<trainer::TrainerOptions> bench_trainer_options(int argc, char** argv, bool bf16) {
  trainer::TrainerOptions to;
  to.clip_norm = 0.0;
  to.check_interval = 0;
  to.precision = bf16 ? optim::Precision::kBFloat16 : optim::Precision::kFloat32;
  const std::string sharding = text_flag(argc, argv, "--zero-sharding", "none");
  if (sharding != "none" && sharding != "os" && sharding != "os_grad") {
    std::fprintf(stderr, "fsq_bench_train_step: --zero-sharding is none, os or os_grad, not `%s'\n", sharding.c_str());
    return std::nullopt;
  }
  to.shard_optimizer_state = sharding != "none";
  to.shard_gradients = sharding == "os_grad";
  to.low_precision_copies = bench::flag(argc, argv, "--low-precision-copies", 1) != 0;
  return to;
}

// The median time of `iters` updates on `b` after `warmup` more; -1, with the error printed, when
// one was skipped.
double median_step_ms(trainer::Trainer& trainer, const data::Batch& b, int64_t warmup, int64_t iters,
                      const std::function<void()>& sync) {
  std::vector<double> ms;
  for (int64_t i = 0; i < warmup + iters; ++i) {
    sync();
    const auto t0 = std::chrono::steady_clock::now();
    trainer::StepStats s = trainer.train_step({b});
    sync();
    const double elapsed = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (s.skipped) {
      std::fprintf(stderr, "update %lld was skipped\n", static_cast<long long>(i + 1));
      return -1;
    }
    if (i >= warmup) ms.push_back(elapsed);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// FLOPs of one update of `batch` sentences of `len` source and target tokens (see the header).
double update_flops(models::TransformerModel& model, int64_t batch, int64_t len, int64_t vocab) {
  const auto& opts = model.options();
  const double d = static_cast<double>(opts.encoder_embed_dim), S = static_cast<double>(len),
               T = static_cast<double>(len), B = static_cast<double>(batch);
  const double enc = static_cast<double>(non_embedding_parameters(model, "encoder."));
  const double dec = static_cast<double>(non_embedding_parameters(model, "decoder."));
  const double tokens = B * T;
  const double flops = 6 * (enc * B * S + dec * tokens) + 6 * d * static_cast<double>(vocab) * tokens +
                       12 * d * B *
                           (static_cast<double>(opts.encoder_layers) * S * S +
                            static_cast<double>(opts.decoder_layers) * (T * T + T * S));
  return flops;
}

#if FSQ_TORCH_AT_LEAST(2, 0)
// Profiles `steps` more calls of `step` and writes the profile's table under `heading` to `path`
// (one line of summary on stdout); false, with the error printed, where that failed.
bool write_step_profile(const std::function<void()>& step, int64_t flat_numel, int64_t steps, bool cuda,
                        const std::string& path, const std::string& heading) {
  bench::StepProfileOptions po;
  po.cuda = cuda;
  po.flat_numel = flat_numel;  // the optimizer's flat buffers: one element per parameter
  const bench::StepProfile profile = bench::profile_steps(step, static_cast<int>(steps), po);
  if (profile.steps != steps || profile.activities == 0) {
    std::fprintf(stderr, "fsq_bench_train_step: the profiler recorded %d of %lld steps, with %lld %s in them%s\n",
                 profile.steps, static_cast<long long>(steps), static_cast<long long>(profile.activities),
                 cuda ? "kernels" : "ops", cuda ? " (CUPTI missing?)" : "");
    return false;
  }
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    std::fprintf(stderr, "fsq_bench_train_step: cannot write %s\n", path.c_str());
    return false;
  }
  std::fputs(heading.c_str(), f);
  std::fprintf(f, "# shares of the steps' wall time: %s\n",
               cuda ? "CUDA kernels, memcpys and memsets (overlaps split evenly); host gaps: nothing on the device"
                    : "CPU ops' self time; host gaps: outside any op");
  std::fprintf(f, "# rules: tools/bench/step_profile.h\n%s", bench::profile_table(profile).c_str());
  std::fclose(f);
  std::printf("profile: %s\n", bench::profile_summary(profile).c_str());
  return true;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  core::reexec_with_cpu_runtime_settings(argc, argv);  // as the programs run: no spinning thread pools
  mallopt(M_MMAP_THRESHOLD, 128 * 1024);               // fixed: a freed large tensor leaves the resident set
  const std::string arch = text_flag(argc, argv, "--arch", "transformer");
  const int64_t vocab = arch == "multi30k" ? 8000 : bench::flag(argc, argv, "--vocab", 32000);
  const int64_t max_tokens = bench::flag(argc, argv, "--max-tokens", 16384);
  const int64_t len = bench::flag(argc, argv, "--len", 64);
  const bool bf16 = bench::flag(argc, argv, "--bf16", 1) != 0;
  const int64_t iters = bench::flag(argc, argv, "--iters", 20);
  const int64_t warmup = bench::flag(argc, argv, "--warmup", 5);
  const double peak_tflops = double_flag(argc, argv, "--peak-tflops", 989.0);
  const bool cuda = torch::cuda::is_available() && bench::flag(argc, argv, "--cpu", 0) == 0;
  if (bench::flag(argc, argv, "--widen-bf16", 1) == 0) nn::set_bf16_widening(nn::Bf16Widening::kNever);
  if (const int64_t threads = bench::flag(argc, argv, "--threads", 0); threads > 0)
    at::set_num_threads(static_cast<int>(threads));
  const c10::Device device = cuda ? c10::Device(c10::kCUDA, 0) : c10::Device(c10::kCPU);
  const std::string profile_path = text_flag(argc, argv, "--profile", "");
  const int64_t profile_steps = bench::flag(argc, argv, "--profile-steps", 2);
  if (!profile_flags_valid(profile_path, profile_steps)) return 2;

  torch::manual_seed(0);
  std::shared_ptr<models::TransformerModel> model = bench_model(argc, argv, arch, vocab);
  model->to(device);
  const int64_t batch = std::max<int64_t>(1, max_tokens / len);
  const data::Batch b = bench_batch(batch, len, vocab, device);

  const criterions::CriterionOptions co = bench_criterion_options(argc, argv);
  const std::optional<trainer::TrainerOptions> to = bench_trainer_options(argc, argv, bf16);
  if (!to) return 2;
  const std::shared_ptr<distributed::Gang> gang = bench_gang(argc, argv, device);
  trainer::Trainer trainer(*to, model, criterions::Criterion(co),
                           optim::build_optimizer(bench_optimizer_options(), models::unique_parameters(*model)),
                           optim::build_lr_scheduler(bench_schedule()), *gang);

  auto sync = [&] {
    if (cuda) torch::cuda::synchronize();
  };
  const double median_ms = median_step_ms(trainer, b, warmup, iters, sync);
  if (median_ms < 0) return 1;
  double peak_gib = 0;
#if FSQ_WITH_CUDA
  if (cuda)
    peak_gib =
        static_cast<double>(c10::cuda::CUDACachingAllocator::getDeviceStats(0).allocated_bytes[0].peak) / (1 << 30);
#endif

  const double tokens = static_cast<double>(batch * len);
  const double flops = update_flops(*model, batch, len, vocab);
  const double tflops = flops / (median_ms / 1000) / 1e12;
  std::printf("%-34s %-5s %-6s %8lld %10.1f %12.0f %10.2f %9.1f %6.1f%%\n", arch.c_str(), bf16 ? "bf16" : "fp32",
              cuda ? "cuda" : "cpu", static_cast<long long>(batch * len), median_ms, tokens / (median_ms / 1000),
              peak_gib, tflops, cuda ? 100 * tflops / peak_tflops : 0.0);
  if (!cuda)
    print_memory(trainer.model_state_bytes(), activation_bytes(*model, criterions::Criterion(co), b, to->precision));
  if (!cuda && bench::flag(argc, argv, "--gemm", 1) != 0) print_gemm_ceiling(bf16, tflops);
#if FSQ_TORCH_AT_LEAST(2, 0)
  if (!profile_path.empty()) {
    const std::string heading = fmt::format(
        "# {} {} {}, {} tokens/step: {} profiled steps after {} timed (median {:.1f} ms unprofiled)\n", arch,
        bf16 ? "bf16" : "fp32", cuda ? "cuda" : "cpu", batch * len, profile_steps, warmup + iters, median_ms);
    const auto step = [&] {
      trainer.train_step({b});
      sync();
    };
    if (!write_step_profile(step, models::count_parameters(*model), profile_steps, cuda, profile_path, heading))
      return 1;
  }
#endif
  return 0;
}
