// bf16 autocast scopes: what runs in bfloat16 inside, and that the state is restored after.
#include "fairseq_cpp/optim/mixed_precision.h"

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
