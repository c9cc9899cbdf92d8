// Autocast scopes on each device (what runs in bfloat16 or float16 inside, and that the state is
// restored after), and fp16's dynamic loss scaler against fairseq's rules (scalars: no device).
#include "fairseq_cpp/optim/mixed_precision.h"
#include "fairseq_cpp/core/runtime.h"

#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/core/torch_compat.h"
#include "fairseq_cpp/optim/loss_scaler.h"

#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>
#include <torch/nn/functional/linear.h>
#include "tests/support/torch.h"

#include "tests/support/devices.h"

namespace fairseq_cpp::optim {
namespace {

// Each test on each device (`.../cpu`, `.../cuda`), with inputs drawn on the CPU and moved.
// AutocastScope promises bf16 autocast on both, and fp16 autocast on CUDA only (on the CPU, where
// LibTorch 1.13 has no float16 autocast, a kFloat16 scope leaves float32 arithmetic alone).
class Autocast : public ::testing::TestWithParam<std::string> {
 protected:
  torch::Device device() const { return torch::Device(GetParam()); }
  at::Tensor randn(at::IntArrayRef sizes) const { return torch::randn(sizes).to(device()); }
};

// Autocast's switch for the device kind under test (LibTorch 1.13 has one per kind; 2.4+ takes it).
bool autocast_on(c10::DeviceType type) {
#if FSQ_TORCH_AT_LEAST(2, 4)
  return at::autocast::is_autocast_enabled(type);
#else
  return type == c10::DeviceType::CUDA ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
#endif
}

TEST_P(Autocast, LinearsRunInBf16InsideAndFloat32Outside) {
  torch::manual_seed(1);
  at::Tensor x = randn({4, 8}), w = randn({16, 8}), b = randn({16});
  at::Tensor reference = torch::nn::functional::linear(x, w, b);
  EXPECT_EQ(reference.scalar_type(), at::kFloat);
  // The product of the inputs rounded to bf16 (8 bits of mantissa), accumulated in float32.
  at::Tensor expected =
      torch::nn::functional::linear(x.to(at::kBFloat16).to(at::kFloat), w.to(at::kBFloat16).to(at::kFloat),
                                    b.to(at::kBFloat16).to(at::kFloat))
          .to(at::kCPU);
  {
    AutocastScope autocast(Precision::kBFloat16, device().type());
    EXPECT_TRUE(autocast_on(device().type()));
    at::Tensor y = torch::nn::functional::linear(x, w, b);
    EXPECT_EQ(y.scalar_type(), at::kBFloat16);
    EXPECT_EQ(y.device(), device());
    EXPECT_TRUE(torch::allclose(y.to(at::kCPU, at::kFloat), expected, 1e-2, 1e-2));
    EXPECT_FALSE(torch::equal(y.to(at::kCPU, at::kFloat), reference.to(at::kCPU)));
    // Layer norm stays float32 on float32 input.
    EXPECT_EQ(torch::layer_norm(x, {8}).scalar_type(), at::kFloat);
    {
      AutocastScope fp32(Precision::kFloat32, device().type());  // a float32 scope changes nothing
      EXPECT_EQ(torch::nn::functional::linear(x, w, b).scalar_type(), at::kBFloat16);
    }
    EXPECT_EQ(torch::nn::functional::linear(x, w, b).scalar_type(), at::kBFloat16);
  }
  EXPECT_FALSE(autocast_on(device().type()));
  // The same kernel on the same inputs as the reference: equal on every device.
  EXPECT_TRUE(torch::equal(torch::nn::functional::linear(x, w, b).to(at::kCPU), reference.to(at::kCPU)));
  EXPECT_EQ(precision_name(Precision::kBFloat16), "bf16");
  EXPECT_EQ(precision_name(Precision::kFloat32), "fp32");
}

// common.fp16's scope: float16 autocast on CUDA; on the CPU nothing at all (the trainer's fp16 is
// then float32 arithmetic with a loss scale).
TEST_P(Autocast, Fp16RunsLinearsInFloat16OnCudaAndChangesNothingOnTheCpu) {
  torch::manual_seed(3);
  at::Tensor x = randn({4, 8}), w = randn({16, 8}), b = randn({16});
  at::Tensor reference = torch::nn::functional::linear(x, w, b);
  // The inputs rounded to float16 (11 bits of mantissa), the product in float32: made before the
  // scope, where fp16 autocast would run this linear in float16 too.
  at::Tensor expected = torch::nn::functional::linear(x.to(at::kHalf).to(at::kFloat), w.to(at::kHalf).to(at::kFloat),
                                                      b.to(at::kHalf).to(at::kFloat));
  const bool cuda = device().is_cuda();
  {
    AutocastScope autocast(Precision::kFloat16, device().type());
    EXPECT_EQ(autocast_on(device().type()), cuda);
    at::Tensor y = torch::nn::functional::linear(x, w, b);
    if (cuda) {
      EXPECT_EQ(y.scalar_type(), at::kHalf);
      ASSERT_EQ(expected.scalar_type(), at::kFloat);
      EXPECT_TRUE(torch::allclose(y.to(at::kCPU, at::kFloat), expected.to(at::kCPU), 2e-3, 2e-3))
          << (y.to(at::kFloat) - expected).abs().max();
      EXPECT_FALSE(torch::equal(y.to(at::kCPU, at::kFloat), reference.to(at::kCPU)));
      EXPECT_EQ(torch::layer_norm(x, {8}).scalar_type(), at::kFloat);
    } else {
      EXPECT_EQ(y.scalar_type(), at::kFloat);
      EXPECT_TRUE(torch::equal(y, reference));
    }
    {
      // bf16 inside fp16 takes over for its scope (on the CPU too, where bf16 autocast exists).
      AutocastScope bf16(Precision::kBFloat16, device().type());
      EXPECT_EQ(torch::nn::functional::linear(x, w, b).scalar_type(), at::kBFloat16);
    }
    EXPECT_EQ(torch::nn::functional::linear(x, w, b).scalar_type(), cuda ? at::kHalf : at::kFloat);
  }
  EXPECT_FALSE(autocast_on(device().type()));
  EXPECT_TRUE(torch::equal(torch::nn::functional::linear(x, w, b).to(at::kCPU), reference.to(at::kCPU)));
  EXPECT_EQ(precision_name(Precision::kFloat16), "fp16");
}

TEST_P(Autocast, GradientsOfFloat32WeightsStayFloat32) {
  torch::manual_seed(2);
  at::Tensor w = randn({3, 5}).requires_grad_(true);
  at::Tensor x = randn({2, 5});
  at::Tensor loss;
  {
    AutocastScope autocast(Precision::kBFloat16, device().type());
    loss = torch::nn::functional::linear(x, w).to(at::kFloat).pow(2).sum();
  }
  loss.backward();
  EXPECT_EQ(w.grad().scalar_type(), at::kFloat);
  EXPECT_EQ(w.grad().device(), device());
  // d/dw sum((x w^T)^2) = 2 (x w^T)^T x, here with x w^T in bf16: within bf16's precision.
  at::Tensor exact = (2 * torch::matmul(torch::matmul(x, w.detach().t()).t(), x)).to(at::kCPU);
  at::Tensor grad = w.grad().to(at::kCPU);
  EXPECT_TRUE(torch::allclose(grad, exact, 3e-2, 3e-2)) << (grad - exact).abs().max();
}

INSTANTIATE_TEST_SUITE_P(Devices, Autocast, ::testing::ValuesIn(testing::test_devices()), testing::device_name);

// The loss's output projection: bf16 products only on CUDA in bf16; fp16 and the CPU keep float32.
TEST(LossMatmulDtype, Bf16OnCudaAndOnCpusWithBf16Products) {
  for (bool cpu_bf16 : {false, true}) {
    EXPECT_EQ(loss_matmul_dtype(Precision::kBFloat16, c10::DeviceType::CUDA, cpu_bf16), c10::ScalarType::BFloat16);
    EXPECT_EQ(loss_matmul_dtype(Precision::kFloat16, c10::DeviceType::CUDA, cpu_bf16), c10::ScalarType::Float);
    EXPECT_EQ(loss_matmul_dtype(Precision::kFloat32, c10::DeviceType::CUDA, cpu_bf16), c10::ScalarType::Float);
    EXPECT_EQ(loss_matmul_dtype(Precision::kBFloat16, c10::DeviceType::CPU, cpu_bf16),
              cpu_bf16 ? c10::ScalarType::BFloat16 : c10::ScalarType::Float);
    for (Precision p : {Precision::kFloat16, Precision::kFloat32})
      EXPECT_EQ(loss_matmul_dtype(p, c10::DeviceType::CPU, cpu_bf16), c10::ScalarType::Float);
  }
  // This machine's answer follows its CPU.
  EXPECT_EQ(loss_matmul_dtype(Precision::kBFloat16, c10::DeviceType::CPU),
            core::cpu_has_bf16_products() ? c10::ScalarType::BFloat16 : c10::ScalarType::Float);
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
