// The int8 linear layer: its per-channel weight quantization, its result against a float64 linear
// within the bound that quantization allows, and nn::scoped_linear's use of registered weights.
// tests/nn/quantized_linear_reference_test.cpp checks it against a Python computation.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include <torch/nn/functional/linear.h>
#include "tests/support/torch.h"

#include "fairseq_cpp/core/runtime.h"
#include "fairseq_cpp/nn/packed_linear.h"
#include "fairseq_cpp/nn/quantized_linear.h"
#include "tests/support/cpu_kernels.h"

namespace fairseq_cpp::nn {
namespace {

// Per-row symmetric int8 scales of x (M, K): max |x_r| / 127, float64.
at::Tensor row_scales(const at::Tensor& x) { return x.abs().amax(1).to(torch::kFloat64) / 127.0; }

TEST(Int8Linear, RefusesClearlyWithoutAvx512VnniOrAvx2) {
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
  // The VNNI kernel's compensation for the input's +128 shift: 128 * sum_k q_nk, zero past N.
  at::Tensor expected = torch::zeros({32}, torch::kInt);
  expected.narrow(0, 0, 5).copy_(q.values().to(torch::kInt).sum(1) * 128);
  EXPECT_TRUE(torch::equal(q.compensation(), expected));
}

// Each value, scale (to the bit, a NaN's payload included) and compensation sum of Int8Weight::
// quantize(w) as the float32 formula gives them, computed here one weight at a time.
void expect_rounded_products(const at::Tensor& w) {
  Int8Weight q = Int8Weight::quantize(w);
  const at::Tensor values = q.values(), scales = q.scales(), compensation = q.compensation();
  const int64_t cols = w.size(1);
  for (int64_t n = 0; n < w.size(0); ++n) {
    const float* row = w[n].data_ptr<float>();
    float amax = 0.0f;
    for (int64_t c = 0; c < cols; ++c) {
      const float a = std::fabs(row[c]);
      if (std::isnan(a)) {
        amax = a;  // the last NaN, its sign cleared
      } else if (!std::isnan(amax)) {
        amax = std::max(amax, a);
      }
    }
    const float inv = amax > 0 ? 127.0f / amax : 0.0f;
    int64_t sum = 0;
    for (int64_t c = 0; c < cols; ++c) {
      const float r = std::nearbyint(row[c] * inv);
      const int expected = std::isnan(r) ? 0 : static_cast<int>(std::min(127.0f, std::max(-127.0f, r)));
      EXPECT_EQ(values[n][c].item<int8_t>(), expected) << "row " << n << ", column " << c;
      sum += expected;
    }
    const float scale = scales[n].item<float>(), expected_scale = amax / 127.0f;
    uint32_t bits = 0, expected_bits = 0;
    std::memcpy(&bits, &scale, sizeof bits);
    std::memcpy(&expected_bits, &expected_scale, sizeof bits);
    EXPECT_EQ(bits, expected_bits) << "row " << n << ": scale " << scale << ", expected " << expected_scale;
    EXPECT_EQ(compensation[n].item<int32_t>(), sum * 128) << n;
  }
}

float nan_with_bits(uint32_t bits) {
  float f = 0;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Specials in the vectorized part (columns 0-31) and in the tail (32-36): ties that round half to
// even, NaNs (the row quantizes to 0; its scale keeps the NaN's payload), infinities (scale
// infinite, every value 0), a denormal maximum whose 127 / max overflows (+-127, and 0 for a
// zero), an all-zero row; then K below 8 and a multiple of 8, over more than one panel (N > 32).
TEST(Int8Linear, QuantizedValuesAreTheRoundedProductsToTheBit) {
  SCOPED_TRACE(core::cpu_has_avx2_fma() ? "the AVX2 row quantizer" : "the scalar row quantizer");
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const float tiny = std::numeric_limits<float>::denorm_min();
  torch::manual_seed(11);
  at::Tensor w = torch::randn({9, 37});
  w[1].zero_();
  const std::vector<std::pair<int64_t, float>> ties{{0, 0.5f},   {1, 1.5f},   {2, 2.5f},  {3, -0.5f},  {4, -2.5f},
                                                    {5, 126.5f}, {6, 127.0f}, {33, 3.5f}, {34, -4.5f}, {36, -126.5f}};
  for (const auto& [c, v] : ties) w[1][c] = v;  // max 127: the products are the values themselves
  w[2][3] = nan;
  w[2][20] = nan_with_bits(0xffc00456u);  // a second NaN: the last one's bits make the scale
  w[3][35] = nan_with_bits(0x7fc00123u);
  w[4][10] = inf;
  w[5].zero_();
  w[5][7] = tiny;
  w[5][34] = -tiny;
  w[6].zero_();
  w[7] = w[7] * 1e-3f;
  w[8][36] = -inf;
  expect_rounded_products(w);
  const at::Tensor values = Int8Weight::quantize(w).values();
  EXPECT_EQ(values[1][0].item<int8_t>(), 0);  // ties: half to even
  EXPECT_EQ(values[1][2].item<int8_t>(), 2);
  EXPECT_EQ(values[1][5].item<int8_t>(), 126);
  EXPECT_EQ(values[1][34].item<int8_t>(), -4);
  EXPECT_EQ(values[5][7].item<int8_t>(), 127);
  EXPECT_EQ(values[5][34].item<int8_t>(), -127);
  for (int64_t cols : {5, 16}) {
    at::Tensor more = torch::randn({40, cols});
    more[33][cols - 1] = nan_with_bits(0xffc00789u);
    more[2][0] = -inf;
    SCOPED_TRACE(cols);
    expect_rounded_products(more);
  }
}

// y64 (M, N) = x w^T + b within the bound that the rounding of x and w to int8 allows.
void expect_within_quantization_bound(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
                                      const at::Tensor& y64, const std::string& what) {
  at::Tensor x64 = x.to(torch::kFloat64), w64 = w.to(torch::kFloat64);
  at::Tensor exact = torch::matmul(x64, w64.t()) + b.to(torch::kFloat64);
  // |x.w - x'.w'| <= sum_k |x_k| sw/2 + |w_k| sx/2 + sx sw/4 with x', w' the rounded values.
  at::Tensor sx = row_scales(x).unsqueeze(1), sw = (w.abs().amax(1).to(torch::kFloat64) / 127.0).unsqueeze(0);
  at::Tensor bound = x64.abs().sum(1, true) * sw / 2 + sx * w64.abs().sum(1).unsqueeze(0) / 2 + sx * sw * x.size(1) / 4;
  at::Tensor excess = (y64 - exact).abs() - bound - 1e-5 * exact.abs() - 1e-6;
  EXPECT_LE(excess.max().item<double>(), 0.0) << what;
}

TEST(Int8Linear, WithinTheQuantizationBoundOfAFloat64Linear) {
  if (!int8_linear_supported()) GTEST_SKIP() << int8_linear_unsupported_reason();
  testing::for_each_cpu_kernel_family([] {
    SCOPED_TRACE(int8_linear_kernel());
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
          const std::string shape = std::to_string(m) + "x" + std::to_string(k) + " by " + std::to_string(n);
          expect_within_quantization_bound(x, w, b, y, shape);
          // And the result is a real product, far better than the bound: relative error about 1%.
          if (m * n > 100) {
            at::Tensor exact = torch::matmul(x.to(torch::kFloat64), w.to(torch::kFloat64).t());
            const double rel = ((y - b.to(torch::kFloat64) - exact).norm() / exact.norm()).item<double>();
            EXPECT_LT(rel, 0.03) << shape;
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
  });
}

// Every product at +-127 x 127 and all of one sign: the sums a 16-bit intermediate would saturate
// (two u8 x s8 products reach 2 x 255 x 127 with the input shifted into u8) are exact, K x 127^2.
TEST(Int8Linear, ExtremeProductsSumExactly) {
  if (!int8_linear_supported()) GTEST_SKIP() << int8_linear_unsupported_reason();
  testing::for_each_cpu_kernel_family([] {
    SCOPED_TRACE(int8_linear_kernel());
    for (int64_t k : {4, 37, 1024}) {
      at::Tensor signs = torch::where(torch::arange(k).remainder(3) == 0, -1.0, 1.0).to(torch::kFloat);
      // Rows: x = signs (every product +127^2), -signs (every one -127^2), and a row of halves.
      at::Tensor x = torch::stack({signs, -signs, signs * 0.5});
      at::Tensor w = torch::stack({signs, signs * 3.0, -signs});  // scales 1/127, 3/127, 1/127
      at::Tensor y = int8_linear(x, Int8Weight::quantize(w));
      const double kk = static_cast<double>(k);
      at::Tensor expected =
          torch::tensor({kk, 3 * kk, -kk, -kk, -3 * kk, kk, kk / 2, 3 * kk / 2, -kk / 2}, torch::kFloat64).view({3, 3});
      EXPECT_TRUE(torch::allclose(y.to(torch::kFloat64), expected, 1e-6, 0)) << "K " << k << "\n" << y;
    }
  });
}

// On a CPU with AVX-512 VNNI, its kernel and the AVX2 one give the same bits.
TEST(Int8Linear, Avx2AndVnniKernelsGiveTheSameBits) {
  if (!int8_linear_supported() || std::string(int8_linear_kernel()) != "AVX-512 VNNI" || !core::cpu_has_avx2_fma())
    GTEST_SKIP() << "needs a CPU with both AVX-512 VNNI and AVX2; this one runs the "
                 << (int8_linear_supported() ? int8_linear_kernel() : "no int8") << " kernel";
  torch::manual_seed(17);
  for (int64_t m : {1, 2, 3, 9, 640}) {
    at::Tensor x = torch::randn({m, 512});
    at::Tensor w = torch::randn({1000, 512}) * 0.05, b = torch::randn({1000});
    Int8Weight q = Int8Weight::quantize(w);
    const at::Tensor vnni = int8_linear(x, q, b);
    core::use_avx2_kernels_only(true);
    const std::string kernel = int8_linear_kernel();
    const at::Tensor avx2 = int8_linear(x, q, b);
    core::use_avx2_kernels_only(false);
    EXPECT_EQ(kernel, "AVX2");
    EXPECT_TRUE(torch::equal(vnni, avx2)) << m << " rows";
  }
}

TEST(Int8Linear, QuantizedInPlaceTheWeightIsFreedAndStillMultiplies) {
  if (!int8_linear_supported()) GTEST_SKIP() << int8_linear_unsupported_reason();
  torch::manual_seed(19);
  const size_t before = int8_weight_count();
  at::Tensor x = torch::randn({5, 3, 48});
  at::Tensor b = torch::randn({70});
  {
    at::Tensor w = torch::randn({70, 48}).requires_grad_();
    const at::Tensor expected = int8_linear(x, Int8Weight::quantize(w.detach()), b);
    EXPECT_FALSE(quantized_in_place(w));
    quantize_in_place(w);
    EXPECT_TRUE(quantized_in_place(w));
    EXPECT_EQ(w.numel(), 0) << "the float32 values are freed";
    EXPECT_EQ(int8_weight_count(), before + 1);
    EXPECT_TRUE(torch::equal(scoped_linear(x, w, b), expected)) << "outside a scope, gradients enabled";
    {
      PackedLinearScope scope;
      EXPECT_TRUE(torch::equal(scoped_linear(x, w, b), expected)) << "inside a scope";
    }
    EXPECT_THROW(scoped_linear(torch::randn({2, 47}), w, b), c10::Error) << "a wrong input width";
    at::Tensor other = torch::randn({70, 48});
    EXPECT_FALSE(quantized_in_place(other));
  }
  EXPECT_EQ(int8_weight_count(), before) << "dropped with its tensor";
}

// Rows as an embedding shared with the output projection looks them up after quantize_in_place:
// the unpacked values times their row's scale, within half a step of the float32 rows, for N and K
// that fill neither a panel nor a group, any index shape; an index outside [0, N) is refused.
TEST(Int8Linear, RowsOfAWeightQuantizedInPlaceAreItsDequantizedRows) {
  if (!int8_linear_supported()) GTEST_SKIP() << int8_linear_unsupported_reason();
  torch::manual_seed(23);
  at::Tensor w = torch::randn({70, 45});
  w[3].zero_();  // scale 0
  const at::Tensor original = w.clone();
  const Int8Weight q = Int8Weight::quantize(w);
  const at::Tensor indices = torch::tensor({{0, 3, 31, 32}, {69, 64, 0, 45}});
  const at::Tensor expected = q.values().to(at::kFloat).index({indices}) * q.scales().index({indices}).unsqueeze(-1);
  const at::Tensor rows = q.rows(indices);
  ASSERT_EQ(rows.sizes(), (std::vector<int64_t>{2, 4, 45}));
  EXPECT_TRUE(torch::equal(rows, expected));
  const at::Tensor half_step = (q.scales() / 2 * (1 + 1e-6)).index({indices}).unsqueeze(-1);
  EXPECT_TRUE(((rows - original.index({indices})).abs() <= half_step).all().item<bool>());
  EXPECT_TRUE(torch::equal(rows[0][1], torch::zeros({45})));
  EXPECT_THROW(q.rows(torch::tensor({70})), c10::Error);
  EXPECT_THROW(q.rows(torch::tensor({-1})), c10::Error);
  EXPECT_THROW(int8_rows(w, indices), c10::Error) << "not quantized in place";
  quantize_in_place(w);
  EXPECT_TRUE(torch::equal(int8_rows(w, indices), expected)) << "the same rows from the weight quantized in place";
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
