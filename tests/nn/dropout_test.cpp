// nn::dropout: the drop rate, the exact scale, the gradient, reproducibility from the seed and
// independence from the thread count, checked by counting. The contract (rate, scale, gradient,
// identity) on each device (off the CPU nn::dropout is torch's); the CPU kernel's own properties
// (its seeding, thread independence, logical-order mask) on the CPU.
#include "fairseq_cpp/nn/dropout.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include <ATen/Parallel.h>
#include "tests/support/torch.h"

#include "tests/support/devices.h"

namespace fairseq_cpp::nn {
namespace {

// Inputs drawn on the CPU and moved; the masks are drawn on the device.
class Dropout : public ::testing::TestWithParam<std::string> {
 protected:
  torch::Device device() const { return torch::Device(GetParam()); }
};

TEST_P(Dropout, DropsAboutPAndScalesTheRestByOneOverOneMinusP) {
  torch::manual_seed(1);
  const int64_t n = 1 << 20;
  for (double p : {0.1, 0.3}) {
    at::Tensor x = torch::rand({n}) + 0.5;  // no zeros of its own
    at::Tensor y = nn::dropout(x.to(device()), p, true).to(torch::kCPU);
    at::Tensor kept = y.ne(0);
    // n Bernoulli(1 - p) draws: the kept fraction is within 6 standard deviations of 1 - p.
    const double fraction = kept.to(torch::kDouble).mean().item<double>();
    EXPECT_NEAR(fraction, 1 - p, 6 * std::sqrt(p * (1 - p) / n)) << "p " << p;
    // torch's CUDA kernel scales by float(1 / float(1 - p)): the same float as this one for these p.
    at::Tensor expected = x.masked_select(kept) * static_cast<float>(1 / (1 - p));
    EXPECT_TRUE(torch::equal(y.masked_select(kept), expected));
    // Neighbours are independent: both dropped with probability p^2.
    at::Tensor dropped = kept.logical_not().to(torch::kDouble);
    const double both = (dropped.narrow(0, 0, n - 1) * dropped.narrow(0, 1, n - 1)).mean().item<double>();
    EXPECT_NEAR(both, p * p, 6 * std::sqrt(p * p * (1 - p * p) / n)) << "p " << p;
  }
}

TEST_P(Dropout, GradientIsTheSameMaskAndScale) {
  torch::manual_seed(2);
  at::Tensor x = torch::rand({64, 33}).add_(1).to(device()).requires_grad_(true);
  at::Tensor y = nn::dropout(x, 0.25, true);
  (y * 3).sum().backward();
  // dy/dx = keep / (1 - p), so grad = 3 * y / x: the same elementwise float operations on each device.
  at::Tensor grad = x.grad().to(torch::kCPU), out = y.detach().to(torch::kCPU), in = x.detach().to(torch::kCPU);
  EXPECT_TRUE(torch::allclose(grad, 3 * out / in, 1e-6, 1e-6));
  EXPECT_TRUE(torch::equal(grad.eq(0), out.eq(0)));
}

TEST(Dropout, ReproducibleFromTheSeedAndIndependentOfThreads) {
  at::Tensor x = torch::ones({3, 5000, 7});
  const int threads = at::get_num_threads();
  torch::manual_seed(7);
  at::Tensor a = nn::dropout(x, 0.1, true);
  at::Tensor a_next = nn::dropout(x, 0.1, true);
  at::set_num_threads(1);
  torch::manual_seed(7);
  at::Tensor b = nn::dropout(x, 0.1, true);
  at::set_num_threads(threads);
  EXPECT_TRUE(torch::equal(a, b));
  EXPECT_FALSE(torch::equal(a, a_next));  // each call draws a new mask
  torch::manual_seed(8);
  EXPECT_FALSE(torch::equal(a, nn::dropout(x, 0.1, true)));
}

TEST_P(Dropout, IdentityWhenNotTrainingOrPIsZero) {
  at::Tensor x = torch::rand({10, 10}).to(device());
  EXPECT_TRUE(nn::dropout(x, 0.5, false).is_same(x));
  EXPECT_TRUE(nn::dropout(x, 0.0, true).is_same(x));
}

// The CPU kernel draws its mask in the input's logical order (torch's CUDA dropout draws in its own
// order for strided inputs, so this holds on the CPU only).
TEST(Dropout, NonContiguousInputGivesTheContiguousCopysMask) {
  // Non-contiguous input: same values as its contiguous copy under the same seed.
  at::Tensor t = torch::rand({40, 30}).t();
  torch::manual_seed(3);
  at::Tensor from_view = nn::dropout(t, 0.2, true);
  torch::manual_seed(3);
  EXPECT_TRUE(torch::equal(from_view, nn::dropout(t.contiguous(), 0.2, true)));
}

// bf16 on the CPU: the float32 input's mask for the same seed, the product taken in float32 and
// rounded once to bf16 (LibTorch's own rounding is the reference), in forward and backward.
TEST(Dropout, Bf16IsTheFloat32ProductRoundedOnceWithTheSameMask) {
  // p = 1/257 scales by 257/256: the float32 products of bf16 values are exact, and many lie
  // half-way between two bf16 values (ties to even); bf16's largest value rounds up to infinity.
  for (const double p : {0.1, 1.0 / 257}) {
    torch::manual_seed(4);
    at::Tensor x = (torch::randn({3, 4099}) * 3).to(torch::kBFloat16);
    x.view(-1)[5] = std::numeric_limits<float>::quiet_NaN();
    x.view(-1)[6] = std::numeric_limits<float>::infinity();
    x.view(-1)[7] = std::numeric_limits<c10::BFloat16>::max();
    torch::manual_seed(9);
    const auto s = static_cast<float>(1 / (1 - p));
    const at::Tensor scale = nn::dropout_keep_mask(x.sizes(), p).to(torch::kFloat) * s;
    const at::Tensor expected = (x.to(torch::kFloat) * scale).to(torch::kBFloat16);
    const at::Tensor nan = expected.isnan();
    torch::manual_seed(9);
    const at::Tensor from_float32 = nn::dropout(x.to(torch::kFloat), p, true).to(torch::kBFloat16);
    EXPECT_TRUE(torch::equal(from_float32.masked_fill(nan, 0), expected.masked_fill(nan, 0))) << p;
    torch::manual_seed(9);
    at::Tensor leaf = x.clone().requires_grad_(true);
    at::Tensor y = nn::dropout(leaf, p, true);
    ASSERT_EQ(y.scalar_type(), torch::kBFloat16);
    EXPECT_TRUE(torch::equal(y.isnan(), nan)) << p;
    EXPECT_TRUE(torch::equal(y.masked_fill(nan, 0), expected.masked_fill(nan, 0))) << p;
    EXPECT_GT(scale.eq(0).sum().item<int64_t>(), p > 0.05 ? 1000 : 10) << p;  // about p of 12,297 dropped
    if (scale.view(-1)[7].item<float>() != 0) {
      EXPECT_TRUE(std::isinf(y.view(-1)[7].item<float>())) << p;
    }
    // LibTorch's bf16 dropout scales by a bf16 tensor: 1 / 0.9 rounded to 1.109375, other values.
    if (p > 0.05) {
      const at::Tensor bf16_scale = torch::full({}, 1 / (1 - p), torch::kBFloat16);
      EXPECT_FALSE(torch::equal(y.masked_fill(nan, 0), (x * bf16_scale).masked_fill(scale.eq(0).logical_or(nan), 0)));
    }
    const at::Tensor g = (torch::rand({3, 4099}) + 0.5).to(torch::kBFloat16);
    y.backward(g);
    EXPECT_TRUE(torch::equal(leaf.grad(), (g.to(torch::kFloat) * scale).to(torch::kBFloat16))) << p;
  }
}

// The residual add fused with the dropout: the unfused residual + dropout(x) to the bit, forward
// and both gradients, for float32 and bf16 x (rounding ties, NaN and infinities included), the same
// mask for the same seed; the unfused way where it does not apply.
TEST_P(Dropout, ResidualDropoutIsTheAddOfTheDropoutToTheBit) {
  for (c10::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    SCOPED_TRACE(dtype == at::kFloat ? "float32" : "bf16");
    torch::manual_seed(11);
    const at::Tensor r0 = torch::randn({3, 70, 33}).to(device());
    at::Tensor x0 = (torch::randn({3, 70, 33}) * 3).to(dtype);
    x0.index_put_({0, 0, 0}, std::numeric_limits<float>::quiet_NaN());
    x0.index_put_({0, 0, 1}, std::numeric_limits<float>::infinity());
    x0 = x0.to(device());
    at::Tensor upstream = torch::randn({3, 70, 33});
    upstream.index_put_({1, 0, 0}, 1.0F + 1.0F / 256);  // a tie when rounded to bf16
    upstream = upstream.to(device());
    at::Tensor out[2], grad_r[2], grad_x[2], next_draw[2];
    for (int fused = 0; fused < 2; ++fused) {
      at::Tensor r = r0.clone().requires_grad_(true), x = x0.clone().requires_grad_(true);
      torch::manual_seed(5);
      out[fused] = fused == 1 ? residual_dropout(r, x, 0.1, true) : r + nn::dropout(x, 0.1, true);
      next_draw[fused] = torch::rand({4});  // the generator left where the dropout leaves it
      if (fused == 1 && device().is_cpu()) {
        EXPECT_NE(out[1].grad_fn()->name().find("ResidualDropout"), std::string::npos) << out[1].grad_fn()->name();
      }
      out[fused].backward(upstream);
      grad_r[fused] = r.grad();
      grad_x[fused] = x.grad();
    }
    ASSERT_EQ(out[1].scalar_type(), at::kFloat);
    ASSERT_EQ(grad_x[1].scalar_type(), dtype);
    EXPECT_TRUE(torch::equal(out[0].isnan(), out[1].isnan()));
    EXPECT_TRUE(torch::equal(out[0].nan_to_num(0, 1, -1), out[1].nan_to_num(0, 1, -1)));
    EXPECT_TRUE(torch::equal(grad_r[0], grad_r[1]));
    EXPECT_TRUE(torch::equal(grad_x[0], grad_x[1]));
    EXPECT_TRUE(torch::equal(next_draw[0], next_draw[1]));
    const double kept = (grad_x[1] != 0).to(at::kFloat).mean().item<double>();
    EXPECT_NEAR(kept, 0.9, 0.03);
  }
  // not training, p = 0: the add alone
  const at::Tensor r = torch::randn({4, 5}).to(device()), x = torch::randn({4, 5}).to(device());
  EXPECT_TRUE(torch::equal(residual_dropout(r, x, 0.1, false), r + x));
  EXPECT_TRUE(torch::equal(residual_dropout(r, x, 0.0, true), r + x));
  // a residual that broadcasts: the unfused way, the same mask
  torch::manual_seed(6);
  const at::Tensor broadcast = residual_dropout(r[0], x, 0.3, true);
  torch::manual_seed(6);
  EXPECT_TRUE(torch::equal(broadcast, r[0] + nn::dropout(x, 0.3, true)));
}

INSTANTIATE_TEST_SUITE_P(Devices, Dropout, ::testing::ValuesIn(testing::test_devices()), testing::device_name);

}  // namespace
}  // namespace fairseq_cpp::nn
