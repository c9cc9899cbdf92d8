// The CUDA half, on the GPU machine (label `gpu`: tools/test.sh leaves it out where nvidia-smi
// finds no GPU, tools/gpu/run.sh runs it there). Each test fails without CUDA rather than skip.
// The trainer on cuda:0 against the same updates on the CPU, bf16 autocast on CUDA, the NCCL gang
// of one rank (NCCL refuses two ranks on one device) and two Gloo ranks carrying CUDA tensors, and
// gradient buckets all-reduced during backward with CUDA gradients, and adam's state sharded over
// two Gloo ranks on CUDA (zero_sharding os).

#include <gtest/gtest.h>
#include <torch/cuda.h>
#include "tests/support/torch.h"

#include <cmath>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>

#include "fairseq_cpp/distributed/process_group_gang.h"
#include "fairseq_cpp/distributed/topology.h"
#include "fairseq_cpp/models/transformer.h"
#include "fairseq_cpp/trainer/trainer.h"

namespace fairseq_cpp {
namespace {

constexpr int64_t kVocab = 40;
const c10::Device kCuda(c10::kCUDA, 0);

data::Batch make_batch(int64_t n, int64_t seed) {
  torch::manual_seed(static_cast<uint64_t>(seed));
  const int64_t len = 9;
  data::Batch b;
  b.src_tokens = torch::randint(4, kVocab, {n, len}, torch::kLong);
  b.src_tokens.select(1, len - 1).fill_(2);
  b.src_lengths = torch::full({n}, len, torch::kLong);
  b.target = torch::randint(4, kVocab, {n, len}, torch::kLong);
  b.target.select(1, len - 1).fill_(2);
  b.prev_output_tokens = torch::cat({torch::full({n, 1}, 2, torch::kLong), b.target.slice(1, 0, len - 1)}, 1);
  b.ntokens = n * len;
  b.nsentences = n;
  return b;
}

std::shared_ptr<models::TransformerModel> make_model(c10::Device device) {
  torch::manual_seed(11);
  config::ModelConfig m;
  m.arch = "transformer_tiny";
  m.dropout = 0.0;
  m.share_all_embeddings = true;
  auto model = std::make_shared<models::TransformerModel>(
      models::resolve_transformer_options(m, config::TaskConfig{}), models::Vocabularies{kVocab, kVocab, 1, true});
  model->to(device);
  return model;
}

// Adam divides each gradient element by its own running size, so an element that is roundoff on
// both devices takes a step of up to lr whose sign is the roundoff's (the k_proj biases' gradients
// are zero in exact arithmetic: softmax ignores a constant added to a row of scores). Adam's
// parameters on CUDA and on the CPU then differ by more than their arithmetic does (1.6e-2
// relative after 3 updates on the H100, 2026-11-26, with losses and gradient norms equal within
// 1e-4 and 1e-3). SGD's step is linear in the gradient: its parameters are compared.
std::unique_ptr<trainer::Trainer> make_trainer(std::shared_ptr<models::TransformerModel> model, distributed::Gang& gang,
                                               optim::Precision precision, const std::string& optimizer = "adam",
                                               const std::string& zero_sharding = "none") {
  criterions::CriterionOptions co;
  co.name = "label_smoothed_cross_entropy";
  co.label_smoothing = 0.1;
  optim::OptimizerOptions oo;
  oo.name = optimizer;
  oo.lr = optimizer == "adam" ? 1e-3 : 0.5;
  optim::LrSchedulerOptions so;
  trainer::TrainerOptions to;
  to.clip_norm = 1.0;
  to.precision = precision;
  to.bucket_cap_mb = 0.01;
  to.shard_optimizer_state = zero_sharding != "none";
  to.shard_gradients = zero_sharding == "os_grad";
  return std::make_unique<trainer::Trainer>(to, model, criterions::Criterion(co),
                                            optim::build_optimizer(oo, models::unique_parameters(*model)),
                                            optim::build_lr_scheduler(so), gang);
}

double max_relative_difference(torch::nn::Module& a, torch::nn::Module& b) {
  double worst = 0;
  auto pb = b.named_parameters();
  for (const auto& item : a.named_parameters()) {
    at::Tensor x = item.value().to(at::kCPU).to(at::kDouble), y = pb[item.key()].to(at::kCPU).to(at::kDouble);
    worst = std::max(worst, ((x - y).norm() / y.norm().clamp_min(1e-12)).item<double>());
  }
  return worst;
}

TEST(Cuda, IsPresent) {
  ASSERT_TRUE(torch::cuda::is_available()) << "no CUDA device: the gpu tests need one";
  EXPECT_GE(torch::cuda::device_count(), 1u);
}

TEST(Cuda, TrainerOnCudaFollowsTheCpu) {
  ASSERT_TRUE(torch::cuda::is_available());
  for (const std::string optimizer : {"adam", "sgd"}) {
    SCOPED_TRACE(optimizer);
    auto cpu_model = make_model(c10::Device(c10::kCPU)), cuda_model = make_model(kCuda);
    distributed::FakeGang cpu_gang, cuda_gang(1, 0, kCuda);
    auto cpu = make_trainer(cpu_model, cpu_gang, optim::Precision::kFloat32, optimizer);
    auto cuda = make_trainer(cuda_model, cuda_gang, optim::Precision::kFloat32, optimizer);
    for (int n = 0; n < 3; ++n) {
      std::vector<data::Batch> group{make_batch(4, 100 + n), make_batch(3, 200 + n)};
      trainer::StepStats a = cpu->train_step(group), b = cuda->train_step(group);
      EXPECT_NEAR(b.loss.loss_sum, a.loss.loss_sum, 1e-4 * a.loss.loss_sum) << "update " << n + 1;
      EXPECT_NEAR(b.gnorm, a.gnorm, 1e-3 * a.gnorm) << "update " << n + 1;
    }
    for (const auto& p : cuda_model->parameters()) EXPECT_TRUE(p.is_cuda());
    // (Adam's: see make_trainer.)
    if (optimizer == "sgd") {
      EXPECT_LT(max_relative_difference(*cuda_model, *cpu_model), 1e-4);
    }
  }
}

TEST(Cuda, Bf16AutocastOnCudaKeepsFloat32WeightsCloseToFp32) {
  ASSERT_TRUE(torch::cuda::is_available());
  auto fp32_model = make_model(kCuda), bf16_model = make_model(kCuda);
  std::vector<at::Tensor> initial;
  for (const auto& p : fp32_model->parameters()) initial.push_back(p.detach().clone());
  distributed::FakeGang gang(1, 0, kCuda);
  auto fp32 = make_trainer(fp32_model, gang, optim::Precision::kFloat32);
  auto bf16 = make_trainer(bf16_model, gang, optim::Precision::kBFloat16);
  for (int n = 0; n < 3; ++n) {
    std::vector<data::Batch> group{make_batch(4, 300 + n)};
    trainer::StepStats a = fp32->train_step(group), b = bf16->train_step(group);
    EXPECT_NEAR(b.loss.loss_sum, a.loss.loss_sum, 0.05 * a.loss.loss_sum) << "update " << n + 1;
    EXPECT_NE(b.loss.loss_sum, a.loss.loss_sum) << "bf16 changed nothing at update " << n + 1;
  }
  for (const auto& p : bf16_model->parameters()) EXPECT_EQ(p.scalar_type(), at::kFloat);
  // The three updates together: the same direction and size, not equal.
  double diff = 0, size = 0;
  auto a = fp32_model->parameters(), b = bf16_model->parameters();
  for (size_t i = 0; i < a.size(); ++i) {
    at::Tensor da = (a[i] - initial[i]).to(at::kDouble), db = (b[i] - initial[i]).to(at::kDouble);
    diff += (da - db).pow(2).sum().item<double>();
    size += da.pow(2).sum().item<double>();
  }
  EXPECT_GT(diff, 0.0);
  EXPECT_LT(std::sqrt(diff / size), 0.25) << "relative difference of the updates";
}

// The collectives on CUDA tensors: NCCL with one rank, Gloo with two ranks of one process.
void run_collectives(distributed::Gang& gang) {
  const int n = gang.size();
  at::Tensor t = torch::full({3}, static_cast<double>(gang.rank() + 1), at::TensorOptions().device(kCuda));
  gang.all_reduce(t, distributed::ReduceOp::sum);
  EXPECT_EQ(t[0].item<double>(), n * (n + 1) / 2.0);
  at::Tensor m = torch::full({2}, static_cast<float>(gang.rank()), at::TensorOptions().device(kCuda));
  gang.all_reduce(m, distributed::ReduceOp::max);
  EXPECT_EQ(m[1].item<float>(), static_cast<float>(n - 1));
  at::Tensor g = gang.all_gather(torch::full({2}, gang.rank(), at::TensorOptions().dtype(at::kLong).device(kCuda)));
  EXPECT_EQ(g.size(0), n);
  EXPECT_EQ(g[n - 1][0].item<int64_t>(), n - 1);
  at::Tensor b = torch::full({2}, gang.rank() == 0 ? 7.0 : 0.0, at::TensorOptions().device(kCuda));
  gang.broadcast(b, 0);
  EXPECT_EQ(b[1].item<double>(), 7.0);
  at::Tensor a = torch::ones({5}, at::TensorOptions().dtype(at::kDouble).device(kCuda));
  gang.start_all_sum(a, "an asynchronous all-reduce")->wait();
  EXPECT_EQ(a[4].item<double>(), n);
  gang.barrier();
}

// Runs `body(rank, gang)` on 2 ranks, threads of one Gloo gang whose tensors live on cuda:0; an
// exception on a rank fails the test and names the rank.
void on_two_gloo_cuda_ranks(const std::function<void(int, distributed::Gang&)>& body) {
  const int port = distributed::pick_free_port();
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      try {
        distributed::ProcessGroupOptions o;
        o.master_port = port;
        o.rank = r;
        o.world_size = 2;
        o.device = kCuda;
        o.backend = "gloo";
        o.timeout_seconds = 60;
        auto gang = distributed::make_process_group_gang(o);
        body(r, *gang);
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << r << ": " << e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
}

TEST(Cuda, NcclGangOfOneRunsTheCollectives) {
  ASSERT_TRUE(torch::cuda::is_available());
  distributed::ProcessGroupOptions o;
  o.master_port = distributed::pick_free_port();
  o.device = kCuda;
  o.timeout_seconds = 60;
  const bool user_set = std::getenv("NCCL_SOCKET_IFNAME") != nullptr;
  auto gang = distributed::make_process_group_gang(o);
  EXPECT_TRUE(gang->device().is_cuda());
  // NCCL's sockets on the interface Gloo's would use: loopback for a master on 127.0.0.1.
  if (!user_set) {
    EXPECT_STREQ(std::getenv("NCCL_SOCKET_IFNAME"), "lo");
  }
  run_collectives(*gang);
}

TEST(Cuda, TwoGlooRanksCarryCudaTensors) {
  ASSERT_TRUE(torch::cuda::is_available());
  on_two_gloo_cuda_ranks([](int, distributed::Gang& gang) { run_collectives(gang); });
}

// Gradient buckets on CUDA gradients, started by backward's hooks (on the autograd engine's
// device thread), give the update of the CPU's two workers.
TEST(Cuda, BucketsAllReducedDuringBackwardOnCuda) {
  ASSERT_TRUE(torch::cuda::is_available());
  std::vector<std::vector<data::Batch>> batches{{make_batch(3, 400), make_batch(2, 401)},
                                                {make_batch(4, 402), make_batch(3, 403)}};
  auto cpu_model = make_model(c10::Device(c10::kCPU));
  distributed::FakeGang one;
  auto cpu = make_trainer(cpu_model, one, optim::Precision::kFloat32, "sgd");  // (see make_trainer)
  for (int n = 0; n < 2; ++n) cpu->train_step({batches[0][n], batches[1][n]});
  std::vector<std::shared_ptr<models::TransformerModel>> models{make_model(kCuda), make_model(kCuda)};
  std::vector<int64_t> started(2);
  on_two_gloo_cuda_ranks([&](int r, distributed::Gang& gang) {
    auto trainer = make_trainer(models[static_cast<size_t>(r)], gang, optim::Precision::kFloat32, "sgd");
    for (int n = 0; n < 2; ++n)
      started[static_cast<size_t>(r)] =
          trainer->train_step({batches[static_cast<size_t>(r)][static_cast<size_t>(n)]}).buckets_started_by_backward;
  });
  EXPECT_GT(started[0], 0);
  EXPECT_EQ(started[0], started[1]);
  EXPECT_EQ(max_relative_difference(*models[0], *models[1]), 0.0);
  EXPECT_LT(max_relative_difference(*models[0], *cpu_model), 1e-4);
}

// zero_sharding os on CUDA: each of two Gloo ranks keeps adam's state of half the flat buffer,
// updates its slice and all-gathers the weights; in bf16, with clipping, the weights end as the
// unsharded ranks' to the bit, and each rank holds half the optimizer's bytes. os_grad the same,
// with each rank keeping half the gradient (its buckets all-reduced from CUDA gradients, its slice
// summed in float64 on the device).
TEST(Cuda, ShardedAdamStateOnTwoGlooCudaRanksTrainsTheUnshardedRunToTheBit) {
  ASSERT_TRUE(torch::cuda::is_available());
  std::vector<std::vector<data::Batch>> batches{{make_batch(3, 500), make_batch(2, 501), make_batch(4, 502)},
                                                {make_batch(4, 503), make_batch(3, 504), make_batch(2, 505)}};
  const std::vector<std::string> modes{"none", "os", "os_grad"};
  std::vector<std::vector<std::shared_ptr<models::TransformerModel>>> models(modes.size());  // [mode][rank]
  std::vector<std::vector<trainer::ModelStateBytes>> bytes(modes.size(), std::vector<trainer::ModelStateBytes>(2));
  for (size_t m = 0; m < modes.size(); ++m) {
    models[m] = {make_model(kCuda), make_model(kCuda)};
    on_two_gloo_cuda_ranks([&](int r, distributed::Gang& gang) {
      auto i = static_cast<size_t>(r);
      auto trainer = make_trainer(models[m][i], gang, optim::Precision::kBFloat16, "adam", modes[m]);
      for (const auto& batch : batches[i]) trainer->train_step({batch});
      bytes[m][i] = trainer->model_state_bytes();
    });
  }
  const auto& plain = bytes[0];
  for (size_t m = 1; m < modes.size(); ++m) {
    for (size_t i = 0; i < 2; ++i) {
      SCOPED_TRACE(modes[m] + ", rank " + std::to_string(i));
      EXPECT_EQ(max_relative_difference(*models[m][i], *models[0][i]), 0.0);
      EXPECT_LE(bytes[m][i].optimizer, plain[i].optimizer / 2 + 8);  // (8 bytes: an odd scalar)
      if (modes[m] == "os_grad") {
        EXPECT_LE(bytes[m][i].gradients, plain[i].gradients / 2 + 4);
      }
    }
    EXPECT_EQ(bytes[m][0].optimizer + bytes[m][1].optimizer, plain[0].optimizer);
  }
  EXPECT_EQ(max_relative_difference(*models[0][0], *models[0][1]), 0.0);
}

}  // namespace
}  // namespace fairseq_cpp
