// The int8 linear layer: its per-channel weight quantization, its result against a float64 linear
// within the bound that quantization allows, and nn::scoped_linear's use of registered weights.
// tests/nn/quantized_linear_reference_test.cpp checks it against a Python computation.
#include <gtest/gtest.h>

#include <torch/nn/functional/linear.h>
#include "tests/support/torch.h"

#include "fairseq_cpp/nn/packed_linear.h"
#include "fairseq_cpp/nn/quantized_linear.h"

namespace fairseq_cpp::nn {
namespace {

// Per-row symmetric int8 scales of x (M, K): max |x_r| / 127, float64.
at::Tensor row_scales(const at::Tensor& x) { return x.abs().amax(1).to(torch::kFloat64) / 127.0; }

TEST(Int8Linear, RefusesClearlyWithoutAvx512Vnni) {
  if (int8_linear_supported()) {
    EXPECT_EQ(int8_linear_unsupported_reason(), "");
    return;
  }
  EXPECT_NE(int8_linear_unsupported_reason().find("lacks"), std::string::npos) << int8_linear_unsupported_reason();
  at::Tensor w = torch::randn({4, 8});
  EXPECT_THROW(use_int8_weight(w), c10::Error);
  EXPECT_THROW(int8_linear(torch::randn({2, 8}), Int8Weight::quantize(w)), c10::Error);
}

TEST(Int8Linear, QuantizesEachOutputChannelSymmetrically) {
  torch::manual_seed(5);
  // Rows of very different magnitudes, and an all-zero row.
  at::Tensor w = torch::randn({5, 37}) * torch::tensor({1e-3, 1.0, 50.0, 0.0, 3.0}).to(torch::kFloat).unsqueeze(1);
  Int8Weight q = Int8Weight::quantize(w);
  ASSERT_EQ(q.values().sizes(), w.sizes());
  ASSERT_EQ(q.values().scalar_type(), torch::kChar);
  at::Tensor amax = w.abs().amax(1);
  EXPECT_TRUE(torch::allclose(q.scales(), amax / 127.0, 1e-6, 0));
  at::Tensor values = q.values().to(torch::kFloat64);
  for (int64_t n = 0; n < 5; ++n) {
    if (n == 3) {
      EXPECT_EQ(values[n].abs().max().item<double>(), 0.0);
      EXPECT_EQ(q.scales()[n].item<float>(), 0.0f);
      continue;
    }
    // The largest weight maps to +-127, every value to its nearest step.
    EXPECT_EQ(values[n].abs().max().item<double>(), 127.0) << n;
    const double step = amax[n].item<double>() / 127.0;
    const double worst = (values[n] * step - w[n].to(torch::kFloat64)).abs().max().item<double>();
    EXPECT_LE(worst, 0.5 * step * (1 + 1e-5)) << n;
  }
}

TEST(Int8Linear, WithinTheQuantizationBoundOfAFloat64Linear) {
  if (!int8_linear_supported()) GTEST_SKIP() << int8_linear_unsupported_reason();
  torch::manual_seed(7);
  // Rows: 1..8 (each kernel height) and past it; columns: under, at and over one 32-wide panel;
  // inner sizes: under one group of 4, ragged, the model's widths.
  for (int64_t m : {1, 5, 8, 9, 23}) {
    for (int64_t n : {1, 17, 32, 33, 100}) {
      for (int64_t k : {3, 18, 256, 1024}) {
        at::Tensor x = torch::randn({m, k});
        at::Tensor w = torch::randn({n, k}) * 0.1;
        at::Tensor b = torch::randn({n});
        Int8Weight q = Int8Weight::quantize(w);
        at::Tensor y = int8_linear(x, q, b).to(torch::kFloat64);
        ASSERT_EQ(y.sizes(), (std::vector<int64_t>{m, n}));
        at::Tensor x64 = x.to(torch::kFloat64), w64 = w.to(torch::kFloat64);
        at::Tensor exact = torch::matmul(x64, w64.t()) + b.to(torch::kFloat64);
        // |x.w - x'.w'| <= sum_k |x_k| sw/2 + |w_k| sx/2 + sx sw/4 with x', w' the rounded values.
        at::Tensor sx = row_scales(x).unsqueeze(1), sw = (w.abs().amax(1).to(torch::kFloat64) / 127.0).unsqueeze(0);
        at::Tensor bound = x64.abs().sum(1, true) * sw / 2 + sx * w64.abs().sum(1).unsqueeze(0) / 2 + sx * sw * k / 4;
        at::Tensor excess = (y - exact).abs() - bound - 1e-5 * exact.abs() - 1e-6;
        EXPECT_LE(excess.max().item<double>(), 0.0) << m << "x" << k << " by " << n << "x" << k;
        // And the result is a real product, far better than the bound: relative error about 1%.
        if (m * n > 100) {
          const double rel = ((y - exact).norm() / (exact - b.to(torch::kFloat64)).norm()).item<double>();
          EXPECT_LT(rel, 0.03) << m << "x" << k << " by " << n << "x" << k;
        }
        // Without a bias: the same minus the bias.
        at::Tensor no_bias = int8_linear(x, q).to(torch::kFloat64);
        EXPECT_TRUE(torch::allclose(no_bias + b.to(torch::kFloat64), y, 1e-5, 1e-5));
      }
    }
  }
  // Leading dimensions are kept; a non-contiguous input is read correctly; a zero row gives the bias.
  at::Tensor x = torch::randn({4, 6, 40}).transpose(0, 1);
  x[2][1].zero_();
  at::Tensor w = torch::randn({50, 40}), b = torch::randn({50});
  Int8Weight q = Int8Weight::quantize(w);
  at::Tensor y = int8_linear(x, q, b);
  ASSERT_EQ(y.sizes(), (std::vector<int64_t>{6, 4, 50}));
  EXPECT_TRUE(torch::equal(y, int8_linear(x.contiguous(), q, b)));
  EXPECT_TRUE(torch::equal(y[2][1], b));
}

TEST(Int8Linear, ScopedLinearRunsRegisteredWeightsWithoutGradients) {
  if (!int8_linear_supported()) GTEST_SKIP() << int8_linear_unsupported_reason();
  torch::manual_seed(11);
  const size_t before = int8_weight_count();
  at::Tensor x = torch::randn({7, 24});
  at::Tensor b = torch::randn({40});
  {
    at::Tensor w = torch::randn({40, 24});
    at::Tensor other = torch::randn({40, 24});
    const at::Tensor float_result = torch::nn::functional::linear(x, w, b);
    EXPECT_EQ(int8_weight_for(w), nullptr);
    use_int8_weight(w);
    EXPECT_EQ(int8_weight_count(), before + 1);
    EXPECT_EQ(int8_weight_for(other), nullptr) << "only the registered tensor";
    const at::Tensor expected = int8_linear(x, Int8Weight::quantize(w), b);
    EXPECT_FALSE(torch::equal(expected, float_result));
    EXPECT_TRUE(torch::equal(scoped_linear(x, w, b), expected)) << "outside a scope";
    {
      PackedLinearScope scope;
      EXPECT_TRUE(torch::equal(scoped_linear(x, w, b), expected)) << "inside a scope";
      at::Tensor trained = x.clone().requires_grad_();
      at::Tensor y = scoped_linear(trained, w, b);
      EXPECT_TRUE(y.requires_grad()) << "with a gradient: torch's float linear";
      EXPECT_TRUE(torch::allclose(y.detach(), float_result, 1e-5, 1e-5));
    }
    // An in-place change quantizes again.
    {
      torch::NoGradGuard no_grad;
      w.mul_(2);
    }
    EXPECT_TRUE(torch::equal(scoped_linear(x, w, b), int8_linear(x, Int8Weight::quantize(w), b)));
    EXPECT_EQ(int8_weight_count(), before + 1);
  }
  EXPECT_EQ(int8_weight_count(), before) << "dropped with its tensor";
}

}  // namespace
}  // namespace fairseq_cpp::nn
