// bf16 autocast scopes (what runs in bfloat16 inside, and that the state is restored after), and
// fp16's dynamic loss scaler against fairseq's rules.
#include "fairseq_cpp/optim/mixed_precision.h"

#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/optim/loss_scaler.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace fairseq_cpp::optim {
namespace {

TEST(AutocastScope, LinearsRunInBf16InsideAndFloat32Outside) {
  torch::manual_seed(1);
  at::Tensor x = torch::randn({4, 8}), w = torch::randn({16, 8}), b = torch::randn({16});
  at::Tensor reference = torch::nn::functional::linear(x, w, b);
  EXPECT_EQ(reference.scalar_type(), at::kFloat);
  // The product of the inputs rounded to bf16 (8 bits of mantissa), accumulated in float32.
  at::Tensor expected = torch::nn::functional::linear(x.to(at::kBFloat16).to(at::kFloat),
                                                      w.to(at::kBFloat16).to(at::kFloat),
                                                      b.to(at::kBFloat16).to(at::kFloat));
  {
    AutocastScope autocast(Precision::kBFloat16, c10::DeviceType::CPU);
    at::Tensor y = torch::nn::functional::linear(x, w, b);
    EXPECT_EQ(y.scalar_type(), at::kBFloat16);
    EXPECT_TRUE(torch::allclose(y.to(at::kFloat), expected, 1e-2, 1e-2));
    EXPECT_FALSE(torch::equal(y.to(at::kFloat), reference));
    // Layer norm stays float32 on float32 input.
    EXPECT_EQ(torch::layer_norm(x, {8}).scalar_type(), at::kFloat);
    {
      AutocastScope fp32(Precision::kFloat32, c10::DeviceType::CPU);  // a float32 scope changes nothing
      EXPECT_EQ(torch::nn::functional::linear(x, w, b).scalar_type(), at::kBFloat16);
    }
    EXPECT_EQ(torch::nn::functional::linear(x, w, b).scalar_type(), at::kBFloat16);
  }
  EXPECT_TRUE(torch::equal(torch::nn::functional::linear(x, w, b), reference));
  EXPECT_EQ(precision_name(Precision::kBFloat16), "bf16");
  EXPECT_EQ(precision_name(Precision::kFloat32), "fp32");
}

TEST(AutocastScope, GradientsOfFloat32WeightsStayFloat32) {
  torch::manual_seed(2);
  at::Tensor w = torch::randn({3, 5}).requires_grad_(true);
  at::Tensor x = torch::randn({2, 5});
  at::Tensor loss;
  {
    AutocastScope autocast(Precision::kBFloat16, c10::DeviceType::CPU);
    loss = torch::nn::functional::linear(x, w).to(at::kFloat).pow(2).sum();
  }
  loss.backward();
  EXPECT_EQ(w.grad().scalar_type(), at::kFloat);
  // d/dw sum((x w^T)^2) = 2 (x w^T)^T x, here with x w^T in bf16: within bf16's precision.
  at::Tensor exact = 2 * torch::matmul(torch::matmul(x, w.detach().t()).t(), x);
  EXPECT_TRUE(torch::allclose(w.grad(), exact, 3e-2, 3e-2)) << (w.grad() - exact).abs().max();
}

}  // namespace
}  // namespace fairseq_cpp::optim

namespace fairseq_cpp::optim {
namespace {

// fairseq's DynamicLossScaler, step by step (fairseq/optim/dynamic_loss_scaler.py by hand).
TEST(DynamicLossScaler, GrowsAfterAWindowAndHalvesOnOverflow) {
  LossScalerOptions o;
  o.init_scale = 8;
  o.scale_window = 3;
  DynamicLossScaler s(o);
  EXPECT_EQ(s.loss_scale(), 8);
  s.update();  // iter 0: (0 - -1) % 3 = 1
  s.update();  // iter 1: 2
  EXPECT_EQ(s.loss_scale(), 8);
  s.update();  // iter 2: 3 % 3 = 0: doubles
  EXPECT_EQ(s.loss_scale(), 16);
  s.overflow();  // iter 3: one overflow in one update since the rescale at 2: halves
  EXPECT_EQ(s.loss_scale(), 8);
  EXPECT_EQ(s.state().iter, 4);
  EXPECT_EQ(s.state().last_overflow_iter, 3);
  s.update();  // iter 4: (4 - 3) % 3 = 1
  s.update();  // iter 5: 2
  EXPECT_EQ(s.loss_scale(), 8);
  s.update();  // iter 6: 0: doubles, three updates after the overflow
  EXPECT_EQ(s.loss_scale(), 16);
}

TEST(DynamicLossScaler, ToleranceThresholdAndMinimum) {
  LossScalerOptions o;
  o.init_scale = 4;
  o.scale_window = 100;
  o.tolerance = 0.5;
  DynamicLossScaler s(o);
  for (int i = 0; i < 3; ++i) s.update();  // iters 0-2: 1, 2, 3 % 100, no change
  EXPECT_EQ(s.loss_scale(), 4);
  // Iter 3: 1 overflow in 4 updates since the start (last rescale -1): 1/4 < 0.5, kept.
  s.overflow();
  EXPECT_EQ(s.loss_scale(), 4);
  EXPECT_EQ(s.state().overflows_since_rescale, 1);
  // Iter 4: 2 in 5 = 0.4, kept; iter 5: 3 in 6 = 0.5, halved.
  s.overflow();
  EXPECT_EQ(s.loss_scale(), 4);
  s.overflow();
  EXPECT_EQ(s.loss_scale(), 2);
  EXPECT_EQ(s.state().overflows_since_rescale, 0);
  EXPECT_EQ(s.state().last_rescale_iter, 5);

  // The threshold is a floor; the minimum stops training and leaves the scale as it was.
  LossScalerOptions t;
  t.init_scale = 4;
  t.threshold = 3.0;
  t.min_loss_scale = 1.0;
  DynamicLossScaler floor(t);
  floor.overflow();
  EXPECT_EQ(floor.loss_scale(), 3.0);
  LossScalerOptions m;
  m.init_scale = 2;
  m.min_loss_scale = 1.0;
  DynamicLossScaler minimum(m);
  try {
    minimum.overflow();  // 2 / 2 = 1 <= 1
    FAIL() << "the minimum loss scale must stop training";
  } catch (const OperationalError& e) {
    EXPECT_NE(std::string(e.what()).find("Minimum loss scale reached (1)"), std::string::npos) << e.what();
  }
  EXPECT_EQ(minimum.loss_scale(), 2);
  // try_overflow: the same decisions without the throw; at the minimum nothing changes at all.
  EXPECT_FALSE(minimum.try_overflow());
  EXPECT_EQ(minimum.loss_scale(), 2);
  EXPECT_EQ(minimum.state().iter, 0);
  EXPECT_EQ(minimum.state().last_overflow_iter, -1);
  EXPECT_EQ(minimum.state().overflows_since_rescale, 0);
  m.init_scale = 4;
  DynamicLossScaler lowered(m);
  EXPECT_TRUE(lowered.try_overflow());  // 4 / 2 = 2 > 1
  EXPECT_EQ(lowered.loss_scale(), 2);
  EXPECT_EQ(lowered.state().iter, 1);
  EXPECT_EQ(lowered.state().last_overflow_iter, 0);
  // reset: a fresh scaler, as after a spell in the fallback precision.
  lowered.reset();
  EXPECT_EQ(lowered.loss_scale(), 4);
  EXPECT_EQ(lowered.state().iter, 0);
  EXPECT_EQ(lowered.state().last_overflow_iter, -1);
  EXPECT_EQ(lowered.state().last_rescale_iter, -1);

  // The state round trip.
  DynamicLossScaler copy(o);
  copy.load_state(s.state());
  EXPECT_EQ(copy.loss_scale(), 2);
  EXPECT_EQ(copy.state().iter, s.state().iter);
}

}  // namespace
}  // namespace fairseq_cpp::optim
