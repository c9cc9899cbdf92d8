// bf16 products on AVX512_BF16 (nn/bf16_gemm.h): float32 sums of the exact products against float64
// sums of the same bf16 operands, over shapes that cover the tile's and the panel's edges and the
// operands' layouts; the bf16 output against the float32 one rounded once; the bias; specials; a
// float32 A rounded as LibTorch rounds; weights packed in place as bf16 (--bf16 generation).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "tests/support/torch.h"

#include "fairseq_cpp/nn/bf16_gemm.h"
#include "fairseq_cpp/nn/packed_linear.h"

namespace fairseq_cpp::nn {
namespace {

#define FSQ_REQUIRE_BF16_GEMM() \
  if (!bf16_gemm_supported()) GTEST_SKIP() << "this CPU has no AVX512_BF16 (the kernel is not used here)"

// bf16 values away from the subnormal range (the kernel counts bf16 subnormals as zero).
at::Tensor operand(at::IntArrayRef sizes) { return at::randn(sizes).to(at::kBFloat16); }

// ours (float32) against float64 sums of the same products: a float32 sum of K terms in any order
// is within K * 2^-24 * sum |a_k b_k| of the exact one.
void expect_float32_sums(const at::Tensor& a, const at::Tensor& b, const char* what) {
  const at::Tensor ours = bf16_matmul(a, b, at::kFloat).to(at::kDouble);
  const at::Tensor a64 = a.to(at::kDouble), b64 = b.to(at::kDouble);
  const at::Tensor exact = a64.mm(b64);
  const at::Tensor bound = a64.abs().mm(b64.abs()) * (static_cast<double>(a.size(1)) * std::ldexp(1.0, -24)) + 1e-30;
  ASSERT_EQ(ours.sizes(), exact.sizes()) << what;
  EXPECT_LE(((ours - exact).abs() - bound).max().item<double>(), 0.0) << what;
  // and they are float32 sums, not bf16 ones: far closer than a bf16 step where K is large
  if (a.size(1) >= 64) {
    EXPECT_LT((ours - exact).abs().max().item<double>(), std::ldexp(1.0, -12) * exact.abs().max().item<double>())
        << what;
  }
}

TEST(Bf16Gemm, Float32SumsOfTheExactProductsOverTheTilesAndPanelsEdges) {
  FSQ_REQUIRE_BF16_GEMM();
  at::manual_seed(3);
  for (int64_t m : {1, 5, 12, 13, 37}) {
    for (int64_t k : {1, 2, 3, 7, 64, 255, 1024}) {
      for (int64_t n : {1, 15, 16, 17, 32, 33, 100}) {
        const std::string what = "M " + std::to_string(m) + " K " + std::to_string(k) + " N " + std::to_string(n);
        const at::Tensor a = operand({m, k}), b = operand({k, n});
        expect_float32_sums(a, b, (what + ", contiguous").c_str());
        expect_float32_sums(operand({k, m}).t(), operand({n, k}).t(), (what + ", both transposed").c_str());
      }
    }
  }
}

TEST(Bf16Gemm, ManyRowsShareTheThreadsByTilesAndWideBInBlocksOfPanels) {
  FSQ_REQUIRE_BF16_GEMM();
  at::manual_seed(7);
  // 130 rows: 11 tiles, more than 4 per thread on 2 threads (the tiles are shared); N 1,100 at K 256:
  // B of 35 panels of 16 KiB, past half a MiB, taken in blocks of panels
  const int threads = at::get_num_threads();
  at::set_num_threads(2);
  expect_float32_sums(operand({130, 256}), operand({256, 1100}), "blocks of panels");
  expect_float32_sums(operand({130, 1023}), operand({1023, 70}), "tiles, odd K");
  expect_float32_sums(operand({1023, 130}).t(), operand({1023, 45}), "tiles, A transposed");
  const at::Tensor bias = at::randn({1100});
  const at::Tensor a = operand({130, 256}), b = operand({256, 1100});
  const at::Tensor with_bias = bf16_matmul(a, b, at::kFloat, bias);
  EXPECT_TRUE(at::equal(with_bias, bf16_matmul(a, b, at::kFloat) + bias));
  EXPECT_TRUE(at::equal(bf16_matmul(a, b, at::kBFloat16, bias), with_bias.to(at::kBFloat16)));
  // and the same values when the threads share the (tile, panel)s, as for few rows (11 tiles < 4 x 4)
  at::set_num_threads(4);
  EXPECT_TRUE(at::equal(bf16_matmul(a, b, at::kFloat, bias), with_bias));
  at::set_num_threads(threads);
}

TEST(Bf16Gemm, ReadsRowsInPlaceOrPackedAlike) {
  FSQ_REQUIRE_BF16_GEMM();
  at::manual_seed(4);
  const at::Tensor wide = operand({50, 300}), b = operand({256, 70});
  const at::Tensor in_place = wide.narrow(1, 10, 256);  // rows 300 apart: read where they are
  const at::Tensor odd = wide.narrow(1, 11, 256);       // the same, from an odd element (unaligned pairs)
  const at::Tensor copy = in_place.contiguous();
  const at::Tensor reference = bf16_matmul(copy, b, at::kFloat);
  EXPECT_TRUE(at::equal(bf16_matmul(in_place, b, at::kFloat), reference));
  EXPECT_TRUE(at::equal(bf16_matmul(odd, b, at::kFloat), bf16_matmul(odd.contiguous(), b, at::kFloat)));
  expect_float32_sums(odd, b, "an odd start");
  // rows packed one by one (odd K); rows an odd number of elements apart (read in place)
  expect_float32_sums(wide.narrow(1, 0, 255), operand({255, 70}), "odd K");
  const at::Tensor odd_rows = operand({50, 301}).narrow(1, 0, 256);
  EXPECT_TRUE(at::equal(bf16_matmul(odd_rows, b, at::kFloat), bf16_matmul(odd_rows.contiguous(), b, at::kFloat)));
  expect_float32_sums(wide.t().narrow(0, 0, 40), operand({50, 33}), "A transposed");
}

TEST(Bf16Gemm, TheBf16OutputIsTheFloat32OneRoundedOnceToNearestEven) {
  FSQ_REQUIRE_BF16_GEMM();
  at::manual_seed(5);
  at::Tensor a = operand({29, 96}), b = operand({96, 45});
  a.index_put_({3, 4}, std::numeric_limits<float>::quiet_NaN());
  a.index_put_({7, 0}, std::numeric_limits<float>::infinity());
  b.index_put_({5, 40}, -std::numeric_limits<float>::infinity());
  const at::Tensor bias = at::randn({45});
  for (const at::Tensor& bias_in : {bias, bias.to(at::kBFloat16)}) {
    const at::Tensor f32 = bf16_matmul(a, b, at::kFloat, bias_in);
    const at::Tensor b16 = bf16_matmul(a, b, at::kBFloat16, bias_in);
    ASSERT_EQ(b16.scalar_type(), at::kBFloat16);
    // bit for bit where not NaN (LibTorch's own rounding, to nearest even), NaN where NaN (LibTorch
    // writes 0x7FC0 or 0xFFFF, by path; ours 0x7FC0)
    const at::Tensor nan = f32.isnan();
    EXPECT_TRUE(at::equal(b16.isnan(), nan));
    EXPECT_TRUE(at::equal(b16.view(at::kShort).masked_select(~nan),
                          f32.to(at::kBFloat16).view(at::kShort).masked_select(~nan)));
    EXPECT_TRUE((b16.view(at::kShort).masked_select(nan) == 0x7FC0).all().item<bool>());
    // the bias is added in float32, before the rounding
    EXPECT_TRUE(at::allclose(f32, bf16_matmul(a, b, at::kFloat) + bias_in.to(at::kFloat), 0, 0, /*equal_nan=*/true))
        << "bias";
    EXPECT_TRUE(f32[3].isnan().all().item<bool>());
    EXPECT_TRUE(f32.isnan().sum().item<int64_t>() >= 45);
  }
  // ties: sums that are exact in float32 and halfway between two bf16 values round to the even one
  const at::Tensor one = at::ones({1, 2}, at::kBFloat16);
  const at::Tensor tie = at::tensor({1.0F, 1.0F / 256}).to(at::kBFloat16).view({2, 1});  // 1 + 2^-8
  EXPECT_EQ(bf16_matmul(one, tie, at::kBFloat16).item<float>(), 1.0F);
  const at::Tensor tie_up = at::tensor({1.0F + 1.0F / 128, 1.0F / 256}).to(at::kBFloat16).view({2, 1});
  EXPECT_EQ(bf16_matmul(one, tie_up, at::kBFloat16).item<float>(), 1.0F + 2.0F / 128);
  // bf16's largest value (0x7F7F) plus half its step: finite in float32, a tie that rounds up to
  // infinity in bf16 (0x7F7F is odd)
  const at::Tensor big =
      at::tensor({std::ldexp(255.0F / 128, 127), std::ldexp(1.0F, 119)}).to(at::kBFloat16).view({2, 1});
  EXPECT_EQ(bf16_matmul(one, big, at::kFloat).item<float>(), std::ldexp(511.0F / 256, 127));
  EXPECT_TRUE(std::isinf(bf16_matmul(one, big, at::kBFloat16).item<float>()));
}

TEST(Bf16Gemm, EmptySumsAndEmptyShapes) {
  FSQ_REQUIRE_BF16_GEMM();
  const at::Tensor bias = at::randn({6});
  EXPECT_TRUE(at::equal(bf16_matmul(operand({4, 0}), operand({0, 6}), at::kFloat), at::zeros({4, 6})));
  EXPECT_TRUE(at::equal(bf16_matmul(operand({4, 0}), operand({0, 6}), at::kFloat, bias), bias.expand({4, 6})));
  EXPECT_EQ(bf16_matmul(operand({0, 5}), operand({5, 6}), at::kBFloat16).sizes(), (std::vector<int64_t>{0, 6}));
  EXPECT_THROW(bf16_matmul(operand({4, 5}), operand({6, 6}), at::kFloat), c10::Error);
  EXPECT_THROW(bf16_matmul(at::randn({4, 5}, at::kDouble), operand({5, 6}), at::kFloat), c10::Error);
  EXPECT_THROW(bf16_matmul(operand({4, 5}), operand({5, 6}), at::kHalf), c10::Error);
}

TEST(Bf16Gemm, AFloat32AIsRoundedToBf16AsLibTorchRoundsIt) {
  FSQ_REQUIRE_BF16_GEMM();
  at::manual_seed(8);
  const at::Tensor b = operand({255, 40}), b_even = operand({256, 40});
  // ties between two bf16 values (1 + 2^-8 and 1 + 3 * 2^-8 round to the even one), the largest
  // float32 (rounds to infinity), NaN, infinity, and plain values; K odd and even, rows strided
  at::Tensor a = at::randn({37, 300});
  a.index_put_({0, 0}, 1.0F + 1.0F / 256);
  a.index_put_({0, 1}, 1.0F + 3.0F / 256);
  a.index_put_({1, 2}, std::numeric_limits<float>::max());
  a.index_put_({2, 3}, std::numeric_limits<float>::quiet_NaN());
  a.index_put_({4, 5}, -std::numeric_limits<float>::infinity());
  for (int64_t k : {5, 255, 256}) {
    const at::Tensor rows = a.narrow(1, 1, k);  // rows 300 apart, from an odd element
    const at::Tensor bk = k == 5 ? b.narrow(0, 0, 5) : k == 255 ? b : b_even;
    for (c10::ScalarType out : {at::kFloat, at::kBFloat16}) {
      const at::Tensor ours = bf16_matmul(rows, bk, out), rounded = bf16_matmul(rows.to(at::kBFloat16), bk, out);
      EXPECT_TRUE(at::equal(ours.isnan(), rounded.isnan())) << "K " << k;
      const at::Tensor kept = ~rounded.isnan();
      EXPECT_TRUE(at::equal(ours.masked_select(kept), rounded.masked_select(kept))) << "K " << k;
    }
    expect_float32_sums(rows.narrow(0, 5, 32).to(at::kBFloat16), bk, "the rounded A's sums (bf16 A)");
  }
  // transposed (its columns contiguous): copied, then rounded alike
  const at::Tensor t = at::randn({256, 20}).t();
  EXPECT_TRUE(at::equal(bf16_matmul(t, b_even, at::kFloat), bf16_matmul(t.to(at::kBFloat16), b_even, at::kFloat)));
}

TEST(Bf16Gemm, AWeightPackedInPlaceAsBf16MultipliesFloat32Inputs) {
  FSQ_REQUIRE_BF16_GEMM();
  at::manual_seed(6);
  const at::Tensor x = at::randn({3, 7, 48}), bias = at::randn({40});
  at::Tensor weight = at::randn({40, 48}).requires_grad_();
  const at::Tensor rounded = weight.detach().to(at::kBFloat16);
  const size_t before = packed_weight_count();
  pack_in_place(weight, at::kBFloat16);
  EXPECT_TRUE(packed_in_place(weight));
  EXPECT_EQ(weight.numel(), 0) << "its float32 values are freed";
  EXPECT_EQ(packed_weight_count(), before + 1);
  // outside a scope, gradients enabled: the kernel, float32 out, as if x and the weight were bf16
  const at::Tensor y = scoped_linear(x, weight, bias);
  ASSERT_EQ(y.sizes(), (std::vector<int64_t>{3, 7, 40}));
  ASSERT_EQ(y.scalar_type(), at::kFloat);
  EXPECT_FALSE(y.requires_grad());
  EXPECT_TRUE(
      at::equal(y.view({21, 40}), bf16_matmul(x.view({21, 48}).to(at::kBFloat16), rounded.t(), at::kFloat, bias)));
  // within a float32 sum's error of the float64 product of the rounded operands
  const at::Tensor exact =
      at::linear(x.to(at::kBFloat16).to(at::kDouble), rounded.to(at::kDouble), bias.to(at::kDouble));
  EXPECT_LT((y.to(at::kDouble) - exact).abs().max().item<double>(), 1e-5);
  // a bf16 input gives a bf16 output, rounded once
  const at::Tensor y16 = scoped_linear(x.to(at::kBFloat16), weight, bias);
  ASSERT_EQ(y16.scalar_type(), at::kBFloat16);
  EXPECT_TRUE(at::equal(y16, y.to(at::kBFloat16)));
  // its rows (an embedding shared with the output projection), odd K included: the rounded weight's
  const at::Tensor tokens = at::tensor({39, 0, 31, 32, 7, 39}).view({2, 3});
  const at::Tensor rows = packed_rows(weight, tokens);
  ASSERT_EQ(rows.scalar_type(), at::kFloat);
  EXPECT_TRUE(at::equal(rows, rounded.to(at::kFloat).index_select(0, tokens.view(-1)).view({2, 3, 48})));
  at::Tensor odd = at::randn({70, 33});
  const at::Tensor odd_rounded = odd.to(at::kBFloat16).to(at::kFloat);
  pack_in_place(odd, at::kBFloat16);
  EXPECT_TRUE(
      at::equal(packed_rows(odd, at::tensor({69, 0, 33})), odd_rounded.index_select(0, at::tensor({69, 0, 33}))));
  EXPECT_THROW(scoped_linear(at::randn({2, 47}), weight), c10::Error);
  EXPECT_THROW(pack_in_place(weight, at::kBFloat16), c10::Error);  // packed already
  EXPECT_THROW(pack_in_place(at::randn({4, 4}), at::kHalf), c10::Error);
  weight = at::Tensor();
  odd = at::Tensor();
  EXPECT_EQ(packed_weight_count(), before);
}

TEST(Bf16Gemm, AWeightPackedAsFloat32FirstIsPackedAgainAsBf16) {
  FSQ_REQUIRE_BF16_GEMM();
  at::manual_seed(9);
  const at::Tensor x = at::randn({10, 64});
  at::Tensor weight = at::randn({36, 64});
  const at::Tensor rounded = weight.to(at::kBFloat16);
  {
    PackedLinearScope scope;  // the float32 kernel's panels, in the cache
    EXPECT_TRUE(at::equal(scoped_linear(x, weight), packed_linear(x, weight)));
  }
  pack_in_place(weight, at::kBFloat16);
  EXPECT_TRUE(at::equal(scoped_linear(x, weight), bf16_matmul(x.to(at::kBFloat16), rounded.t(), at::kFloat)));
}

}  // namespace
}  // namespace fairseq_cpp::nn
