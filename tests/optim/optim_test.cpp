// Optimizers, gradient clipping and LR schedules against closed forms and hand computations. What
// computes with tensors runs on every device of testing::test_devices(); the schedules are scalars.
#include <gtest/gtest.h>

#include <cmath>

#include <torch/serialize.h>
#include "tests/support/torch.h"

#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/optim/lr_scheduler.h"
#include "fairseq_cpp/optim/optimizer.h"
#include "tests/support/devices.h"

namespace fairseq_cpp::optim {
namespace {

// A test that runs on each device (`.../cpu`, `.../cuda`); inputs are made on the CPU and moved.
class OnDevice : public ::testing::TestWithParam<std::string> {
 protected:
  torch::Device device() const { return torch::Device(GetParam()); }
  // A one-element float32 leaf on the device.
  at::Tensor scalar_param(double value) const {
    return torch::tensor({static_cast<float>(value)}).to(device()).requires_grad_(true);
  }
  void set_grad(at::Tensor& p, double g) const {
    p.mutable_grad() = torch::tensor({static_cast<float>(g)}).to(device());
  }
};

OptimizerOptions adam_options(double lr, double wd) {
  OptimizerOptions o;
  o.name = "adam";
  o.lr = lr;
  o.betas = {0.9, 0.98};
  o.eps = 1e-8;
  o.weight_decay = wd;
  return o;
}

// The closed forms below hold to float32's precision on every device: each update is a few
// elementwise float32 ops on one element (no reduction whose order could differ).
class Adam : public OnDevice {};

TEST_P(Adam, ConstantGradientFollowsTheClosedForm) {
  // With a constant gradient g: m_t = g (1 - b1^t), v_t = g^2 (1 - b2^t), so each update is
  // p <- p (1 - lr wd) - lr g sqrt(1 - b2^t) / (|g| sqrt(1 - b2^t) + eps).
  at::Tensor p = scalar_param(1.0);
  auto adam = build_optimizer(adam_options(0.1, 0.01), {p});
  double expected = 1.0;
  const double g = 0.5;
  for (int t = 1; t <= 5; ++t) {
    set_grad(p, g);
    adam->step();
    EXPECT_EQ(p.device(), device());
    const double bc2 = std::sqrt(1 - std::pow(0.98, t));
    expected = expected * (1 - 0.1 * 0.01) - 0.1 * g * bc2 / (g * bc2 + 1e-8);
    EXPECT_NEAR(p.item<double>(), expected, 1e-6) << "step " << t;
  }
}

TEST_P(Adam, TwoStepsWithChangingGradientsMatchAHandComputation) {
  at::Tensor p = scalar_param(1.0);
  auto adam = build_optimizer(adam_options(0.01, 0.0), {p});
  set_grad(p, 1.0);
  adam->step();
  // m1 = 0.1, v1 = 0.02; step size 0.01 * sqrt(0.02) / 0.1; eps added to sqrt(v1) (not bias-corrected).
  double p1 = 1.0 - 0.01 * std::sqrt(0.02) / 0.1 * 0.1 / (std::sqrt(0.02) + 1e-8);
  EXPECT_NEAR(p.item<double>(), p1, 1e-7);
  set_grad(p, -2.0);
  adam->step();
  const double m2 = 0.9 * 0.1 + 0.1 * -2.0, v2 = 0.98 * 0.02 + 0.02 * 4.0;
  const double step = 0.01 * std::sqrt(1 - 0.98 * 0.98) / (1 - 0.9 * 0.9);
  EXPECT_NEAR(p.item<double>(), p1 - step * m2 / (std::sqrt(v2) + 1e-8), 1e-7);
}

INSTANTIATE_TEST_SUITE_P(Devices, Adam, ::testing::ValuesIn(testing::test_devices()), testing::device_name);

class Sgd : public OnDevice {};

TEST_P(Sgd, MomentumAndL2DecayAsTorchOptimSgd) {
  at::Tensor p = scalar_param(1.0);
  OptimizerOptions o;
  o.name = "sgd";
  o.lr = 0.1;
  o.momentum = 0.9;
  o.weight_decay = 0.01;
  auto sgd = build_optimizer(o, {p});
  set_grad(p, 1.0);
  sgd->step();  // d = 1 + 0.01 * 1 = 1.01; buf = d; p = 1 - 0.101
  EXPECT_NEAR(p.item<double>(), 0.899, 1e-6);
  set_grad(p, 2.0);
  sgd->step();  // d = 2 + 0.00899; buf = 0.9 * 1.01 + d = 2.91799; p = 0.899 - 0.291799
  EXPECT_NEAR(p.item<double>(), 0.607201, 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Devices, Sgd, ::testing::ValuesIn(testing::test_devices()), testing::device_name);

class Nag : public OnDevice {};

TEST_P(Nag, FairseqsNesterovUpdateWithLrCorrection) {
  at::Tensor p = scalar_param(1.0);
  OptimizerOptions o;
  o.name = "nag";
  o.lr = 0.1;
  o.momentum = 0.9;
  auto nag = build_optimizer(o, {p});
  set_grad(p, 1.0);
  nag->step();  // buf 0: p -= (1 + 0.9) * 0.1 -> 0.81; buf = -0.1
  EXPECT_NEAR(p.item<double>(), 0.81, 1e-6);
  nag->set_lr(0.05);  // lr_correct = 0.5
  set_grad(p, 1.0);
  nag->step();  // p += 0.81 * 0.5 * -0.1 -> 0.7695; p -= 1.9 * 0.05 -> 0.6745
  EXPECT_NEAR(p.item<double>(), 0.6745, 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Devices, Nag, ::testing::ValuesIn(testing::test_devices()), testing::device_name);

class ClipGradNorm : public OnDevice {};

TEST_P(ClipGradNorm, ScalesByTheGlobalNormAndReturnsIt) {
  at::Tensor a = torch::zeros({2}, device()).requires_grad_(true);
  at::Tensor b = torch::zeros({1}, device()).requires_grad_(true);
  a.mutable_grad() = torch::tensor({3.f, 4.f}).to(device());
  b.mutable_grad() = torch::tensor({12.f}).to(device());
  EXPECT_NEAR(clip_grad_norm({a, b}, 0.0), 13.0, 1e-5);  // 0 = off, still measured
  EXPECT_NEAR(clip_grad_norm({a, b}, 20.0), 13.0, 1e-5);
  EXPECT_FLOAT_EQ(b.grad().item<float>(), 12.f);
  EXPECT_NEAR(clip_grad_norm({a, b}, 6.5), 13.0, 1e-5);
  const double coef = 6.5 / (13.0 + 1e-6);
  EXPECT_EQ(a.grad().device(), device());
  EXPECT_NEAR(a.grad()[0].item<double>(), 3 * coef, 1e-6);
  EXPECT_NEAR(b.grad().item<double>(), 12 * coef, 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Devices, ClipGradNorm, ::testing::ValuesIn(testing::test_devices()), testing::device_name);

class OptimizerState : public OnDevice {};

TEST_P(OptimizerState, RoundTripsThroughPickleIncludingTheLearningRate) {
  torch::manual_seed(0);
  at::Tensor w1 = torch::randn({3, 2}).to(device()).requires_grad_(true);
  at::Tensor w2 = torch::randn({3, 2}).to(device()).requires_grad_(true);
  {
    torch::NoGradGuard no_grad;
    w2.copy_(w1);
  }
  auto first = build_optimizer(adam_options(0.1, 0.01), {w1});
  for (int i = 0; i < 2; ++i) {
    w1.mutable_grad() = torch::full({3, 2}, 0.3f * (i + 1), device());
    first->step();
  }
  first->set_lr(0.0123);
  // Through the bytes a checkpoint holds.
  auto bytes = torch::pickle_save(c10::IValue(first->state_dict()));
  StateDict restored = torch::pickle_load(bytes).toGenericDict();
  auto second = build_optimizer(adam_options(1.0, 0.01), {w2});
  {
    torch::NoGradGuard no_grad;
    w2.copy_(w1);
  }
  second->load_state_dict(restored);
  EXPECT_DOUBLE_EQ(second->lr(), 0.0123);
  w1.mutable_grad() = torch::full({3, 2}, -0.7f, device());
  w2.mutable_grad() = torch::full({3, 2}, -0.7f, device());
  first->step();
  second->step();
  EXPECT_EQ(w2.device(), device());
  // The same elementwise kernels on the same values: equal on every device.
  EXPECT_TRUE(torch::equal(w1.to(torch::kCPU), w2.to(torch::kCPU)));
  // Another optimizer's state is refused.
  OptimizerOptions sgd;
  sgd.name = "sgd";
  EXPECT_THROW(build_optimizer(sgd, {w2})->load_state_dict(restored), DataError);
}

INSTANTIATE_TEST_SUITE_P(Devices, OptimizerState, ::testing::ValuesIn(testing::test_devices()), testing::device_name);

LrSchedulerOptions schedule(const std::string& name, std::vector<double> lr) {
  LrSchedulerOptions o;
  o.name = name;
  o.lr = std::move(lr);
  return o;
}

TEST(LrScheduler, InverseSqrtWarmsUpLinearlyThenDecays) {
  auto o = schedule("inverse_sqrt", {5e-4});
  o.warmup_updates = 400;
  auto s = build_lr_scheduler(o);
  EXPECT_DOUBLE_EQ(s->lr(), 0.0);  // warmup_init_lr < 0 -> 0
  EXPECT_NEAR(s->step_update(0), 0.0, 1e-15);
  EXPECT_NEAR(s->step_update(200), 2.5e-4, 1e-15);
  EXPECT_NEAR(s->step_update(400), 5e-4, 1e-15);
  EXPECT_NEAR(s->step_update(1600), 5e-4 * std::sqrt(400.0 / 1600.0), 1e-15);
  EXPECT_NEAR(s->step(3, 4.2), s->lr(), 0);  // epochs do not change it
  o.warmup_init_lr = 1e-4;
  EXPECT_NEAR(build_lr_scheduler(o)->step_update(100), 1e-4 + 100 * (4e-4 / 400), 1e-15);
  o.warmup_updates = 0;
  EXPECT_THROW(build_lr_scheduler(o), UserError);
}

TEST(LrScheduler, InverseSqrtWithoutWarmupUpdatesWarmsUpForFairseqs4000) {
  // A config that leaves `warmup_updates` unset (fairseq's `--lr-scheduler inverse_sqrt` alone).
  config::LrSchedulerConfig scheduler;
  scheduler._name = "inverse_sqrt";
  config::OptimizationConfig optimization;
  optimization.lr = {5e-4};
  auto o = lr_scheduler_options(scheduler, optimization, config::CheckpointConfig{});
  EXPECT_EQ(o.warmup_updates, 4000);
  auto s = build_lr_scheduler(o);
  EXPECT_NEAR(s->step_update(2000), 2.5e-4, 1e-15);
  EXPECT_NEAR(s->step_update(16000), 5e-4 * std::sqrt(4000.0 / 16000.0), 1e-15);
  scheduler._name = "polynomial_decay";  // the others: no warm-up, as fairseq's
  EXPECT_EQ(lr_scheduler_options(scheduler, optimization, config::CheckpointConfig{}).warmup_updates, 0);
}

TEST(LrScheduler, FixedUsesThePerEpochListWarmUpAndForcedAnnealing) {
  auto o = schedule("fixed", {1.0, 0.5, 0.25});
  auto s = build_lr_scheduler(o);
  EXPECT_DOUBLE_EQ(s->lr(), 1.0);
  EXPECT_DOUBLE_EQ(s->step(1, std::nullopt), 0.5);
  EXPECT_DOUBLE_EQ(s->step(2, std::nullopt), 0.25);
  EXPECT_DOUBLE_EQ(s->step(7, std::nullopt), 0.25);
  o.force_anneal = 2;
  o.lr_shrink = 0.1;
  s = build_lr_scheduler(o);
  EXPECT_DOUBLE_EQ(s->step(1, std::nullopt), 0.5);
  EXPECT_NEAR(s->step(2, std::nullopt), 0.025, 1e-15);
  EXPECT_NEAR(s->step(3, std::nullopt), 0.0025, 1e-15);
  auto w = schedule("fixed", {1.0});
  w.warmup_updates = 4;
  s = build_lr_scheduler(w);
  EXPECT_DOUBLE_EQ(s->lr(), 0.25);
  EXPECT_DOUBLE_EQ(s->step_update(2), 0.75);  // (n + 1) / warmup, as fairseq v0.9
  EXPECT_DOUBLE_EQ(s->step_update(10), 1.0);
}

TEST(LrScheduler, PolynomialDecayClosedForm) {
  auto o = schedule("polynomial_decay", {1.0});
  o.end_learning_rate = 0.1;
  o.power = 2.0;
  o.total_num_update = 100;
  o.warmup_updates = 10;
  auto s = build_lr_scheduler(o);
  EXPECT_DOUBLE_EQ(s->step_update(5), 0.5);
  EXPECT_DOUBLE_EQ(s->step_update(10), 1.0);
  EXPECT_NEAR(s->step_update(55), 0.9 * 0.25 + 0.1, 1e-12);  // (1 - 45/90)^2
  EXPECT_DOUBLE_EQ(s->step_update(100), 0.1);
  EXPECT_DOUBLE_EQ(s->step_update(150), 0.1);
  o.total_num_update = 0;
  o.max_update = 0;
  EXPECT_THROW(build_lr_scheduler(o), UserError);
}

TEST(LrScheduler, CosineClosedFormWithRestartsShrinkAndTMult) {
  auto o = schedule("cosine", {1.0});
  o.min_lr = 0.1;
  o.warmup_updates = 10;
  o.lr_period_updates = 100;
  o.lr_shrink = 0.5;
  auto s = build_lr_scheduler(o);
  EXPECT_DOUBLE_EQ(s->lr(), 0.1);  // warmup_init_lr < 0 -> min_lr
  EXPECT_NEAR(s->step_update(5), 0.55, 1e-12);
  EXPECT_NEAR(s->step_update(10), 1.0, 1e-12);
  EXPECT_NEAR(s->step_update(60), 0.55, 1e-12);  // half a period: the middle
  EXPECT_NEAR(s->step_update(110), 0.5, 1e-12);  // second period, shrunk by 0.5
  EXPECT_NEAR(s->step_update(160), 0.275, 1e-12);
  o.t_mult = 2.0;
  s = build_lr_scheduler(o);
  // curr 150: period i = floor(log2(1 + 150/100)) = 1, t_i = 200, t_curr = 50.
  EXPECT_NEAR(s->step_update(160), 0.05 + 0.225 * (1 + std::cos(M_PI * 50 / 200)), 1e-12);
}

TEST(LrScheduler, ReduceOnPlateauShrinksAfterPatience) {
  auto o = schedule("reduce_lr_on_plateau", {1.0});
  o.lr_patience = 1;
  o.lr_shrink = 0.5;
  auto s = build_lr_scheduler(o);
  EXPECT_DOUBLE_EQ(s->step(1, 10.0), 1.0);
  EXPECT_DOUBLE_EQ(s->step(2, 9.9995), 1.0);  // not below 10 * (1 - 1e-4): one bad epoch
  EXPECT_DOUBLE_EQ(s->step(3, 11.0), 0.5);    // two bad epochs > patience 1
  EXPECT_DOUBLE_EQ(s->step(4, 9.0), 0.5);
  EXPECT_DOUBLE_EQ(*s->best(), 9.0);
  o.warmup_updates = 4;
  s = build_lr_scheduler(o);
  EXPECT_DOUBLE_EQ(s->step_update(2), 0.5);
  EXPECT_DOUBLE_EQ(s->step(1, 5.0), 0.5);  // no plateau logic during warm-up
  EXPECT_DOUBLE_EQ(s->step_update(5), 0.5);
}

TEST(LrScheduler, StateRoundTripRestoresTheRateAndPosition) {
  auto o = schedule("reduce_lr_on_plateau", {1.0});
  o.lr_shrink = 0.5;
  auto a = build_lr_scheduler(o);
  a->step(1, 3.0);
  a->step(2, 4.0);  // patience 0: shrink to 0.5
  auto bytes = torch::pickle_save(c10::IValue(a->state_dict()));
  auto b = build_lr_scheduler(o);
  b->load_state_dict(torch::pickle_load(bytes).toGenericDict());
  EXPECT_DOUBLE_EQ(b->lr(), 0.5);
  EXPECT_DOUBLE_EQ(*b->best(), 3.0);
  EXPECT_DOUBLE_EQ(a->step(3, 3.5), b->step(3, 3.5));  // same plateau state: shrinks again
  EXPECT_DOUBLE_EQ(b->lr(), 0.25);
  auto inv = schedule("inverse_sqrt", {1.0});
  inv.warmup_updates = 10;
  EXPECT_THROW(build_lr_scheduler(inv)->load_state_dict(a->state_dict()), DataError);
}

}  // namespace
}  // namespace fairseq_cpp::optim

namespace fairseq_cpp::optim {
namespace {

// Parameters of a few shapes, with gradients, the same for every call.
// Drawn on the CPU, then moved to `device`: the same values on every device.
std::vector<at::Tensor> some_parameters(torch::Device device) {
  torch::manual_seed(11);
  std::vector<at::Tensor> out{torch::randn({7, 5}), torch::randn({5}), torch::randn({3, 2, 4}), torch::randn({1})};
  for (auto& p : out) p = p.to(device).requires_grad_(true);
  return out;
}

void set_gradients(std::vector<at::Tensor>& params, int step) {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params.size(); ++i) {
    torch::manual_seed(static_cast<uint64_t>(100 * step + static_cast<int>(i)));
    at::Tensor g = torch::randn(params[i].sizes()).to(params[i].device());
    if (params[i].grad().defined())
      params[i].mutable_grad().copy_(g);  // in place: the flat views stay
    else
      params[i].mutable_grad() = g;
  }
}

// The flat buffers change how many ops an update takes, not its result: Adam (with weight decay)
// over flat buffers gives the per-parameter updates, its state saves one storage per tensor and
// loads back into the views, and a gradient replaced by another tensor falls back to the loop.
// Bit for bit on every device: both paths run the same elementwise kernels in the same order, and
// an elementwise kernel computes each element alone (no reduction, no atomics).
class FlatOptimizer : public OnDevice {};

bool equal_on_cpu(const at::Tensor& a, const at::Tensor& b) {
  return torch::equal(a.to(torch::kCPU), b.to(torch::kCPU));
}

TEST_P(FlatOptimizer, AdamOverFlatBuffersEqualsOneParameterAtATime) {
  OptimizerOptions o = adam_options(1e-2, 0.01);
  auto loose = some_parameters(device()), flat = some_parameters(device());
  auto a = build_optimizer(o, loose), b = build_optimizer(o, flat);
  ASSERT_TRUE(b->flatten());
  ASSERT_TRUE(b->flat());
  EXPECT_FALSE(a->flat());
  EXPECT_EQ(b->flat_grads().numel(), 35 + 5 + 24 + 1);
  EXPECT_EQ(b->flat_grads().device(), device());
  for (size_t i = 0; i < flat.size(); ++i) EXPECT_TRUE(equal_on_cpu(flat[i], loose[i]));  // values kept
  for (int step = 1; step <= 4; ++step) {
    set_gradients(loose, step);
    set_gradients(flat, step);
    a->step();
    const auto version = flat[2]._version();
    b->step();
    ASSERT_TRUE(b->flat());
    // A write through the flat buffer moves each parameter's version, as a write through it would
    // (caches of weights, such as the packed weights of generation, depend on it).
    EXPECT_GT(flat[2]._version(), version) << "step " << step;
    for (size_t i = 0; i < flat.size(); ++i)
      EXPECT_TRUE(equal_on_cpu(flat[i], loose[i])) << "step " << step << ", " << i;
  }
  StateDict saved = b->state_dict();
  for (const auto& v : saved.at("exp_avg").toListRef()) {
    const at::Tensor t = v.toTensor();
    EXPECT_EQ(t.storage().nbytes(), static_cast<size_t>(t.numel()) * sizeof(float));
    EXPECT_EQ(t.device(), device());
  }
  auto again = some_parameters(device());
  auto c = build_optimizer(o, again);
  ASSERT_TRUE(c->flatten());
  c->load_state_dict(saved);
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < again.size(); ++i) again[i].copy_(flat[i]);
  }
  set_gradients(again, 5);
  set_gradients(flat, 5);
  b->step();
  c->step();
  EXPECT_TRUE(c->flat());
  for (size_t i = 0; i < flat.size(); ++i) EXPECT_TRUE(equal_on_cpu(flat[i], again[i])) << i;

  // zero_grad clears the flat buffer; a gradient that is no longer a view ends the flat path.
  b->zero_grad();
  EXPECT_EQ(b->flat_grads().abs().sum().item<float>(), 0.0f);
  flat[1].mutable_grad() = torch::ones({5}, device());
  EXPECT_FALSE(b->flat());
  b->step();  // one parameter at a time, with the new gradient
  EXPECT_TRUE(equal_on_cpu(flat[0].grad(), torch::zeros({7, 5})));
  // Other dtypes are left alone.
  std::vector<at::Tensor> doubles{
      torch::zeros({2}, torch::dtype(torch::kFloat64).device(device())).requires_grad_(true)};
  EXPECT_FALSE(build_optimizer(o, doubles)->flatten());
}

// The norm over the flat buffer sums the float32 gradients' squares in float64: it equals the
// float64 reference up to the order of float64 additions (1e-12), on every device; clipping then
// scales by it (float32 products: 1e-6).
TEST_P(FlatOptimizer, ClipGradNormOverTheFlatBufferEqualsThePerParameterNorm) {
  auto params = some_parameters(device());
  set_gradients(params, 1);
  auto opt = build_optimizer(adam_options(1e-2, 0.0), params);
  std::vector<at::Tensor> copies;
  for (const auto& p : params) copies.push_back(p.grad().clone());
  ASSERT_TRUE(opt->flatten());
  double expected = 0;
  for (const auto& g : copies) expected += g.to(torch::kCPU, torch::kFloat64).pow(2).sum().item<double>();
  expected = std::sqrt(expected);
  const double norm = clip_grad_norm(opt->flat_grads(), 1.0);
  EXPECT_NEAR(norm, expected, 1e-12 * expected);
  EXPECT_NEAR(opt->flat_grads().norm().item<double>(), 1.0, 1e-5);  // clipped to max_norm
  EXPECT_TRUE(
      torch::allclose(params[0].grad().to(torch::kCPU), copies[0].to(torch::kCPU) * (1.0 / (norm + 1e-6)), 1e-6, 1e-7));
}

// A buffer of more than 2^23 elements (on the CPU the one-pass sum's 128 blocks, on other
// devices two chunks and a part): the norm is the float64 reference's, and the float32 norm of
// the same buffer is further from it than that.
TEST(ClipGradNorm, ALongBufferSumsItsSquaresInFloat64ChunkByChunk) {
  torch::manual_seed(5);
  const at::Tensor v = torch::randn({(int64_t{1} << 22) * 2 + 12345});
  const double expected = std::sqrt(v.to(torch::kFloat64).pow(2).sum().item<double>());
  const double norm = clip_grad_norm(v, 0.0);
  EXPECT_NEAR(norm, expected, 1e-12 * expected);
  EXPECT_GT(std::abs(v.norm().item<double>() - expected), 1e-12 * expected) << "float32's own norm";
}

// The CPU's one-pass sum: squares of small integers sum exactly (so any order gives the same
// float64), a length with a partial block and a partial lane, and the same bits on 1 and 3 threads.
TEST(ClipGradNorm, TheCpuSumIsExactWhereItCanBeAndTheSameOnAnyNumberOfThreads) {
  const int64_t n = (int64_t{1} << 16) * 3 + 13;
  const at::Tensor ints = torch::arange(n, torch::kFloat32).remainder(1000) - 500;  // squares up to 250,000
  const double exact = ints.to(torch::kFloat64).pow(2).sum().item<double>();
  EXPECT_EQ(clip_grad_norm(ints, 0.0), std::sqrt(exact));
  torch::manual_seed(6);
  const at::Tensor v = torch::randn({n}) * 1e3;
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const double one = clip_grad_norm(v, 0.0);
  at::set_num_threads(3);
  const double three = clip_grad_norm(v, 0.0);
  at::set_num_threads(threads);
  EXPECT_EQ(one, three);
  const double expected = std::sqrt(v.to(torch::kFloat64).pow(2).sum().item<double>());
  EXPECT_NEAR(one, expected, 1e-12 * expected);
  // A strided view takes the general path: the same norm up to the order of additions.
  EXPECT_NEAR(clip_grad_norm(torch::stack({v, v}, 1).select(1, 0), 0.0), expected, 1e-12 * expected);
}

INSTANTIATE_TEST_SUITE_P(Devices, FlatOptimizer, ::testing::ValuesIn(testing::test_devices()), testing::device_name);

}  // namespace
}  // namespace fairseq_cpp::optim
