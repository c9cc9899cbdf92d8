// The packed-weight linear layer against a float64 reference, its scope, and its cache of packed
// weights (repacked after an in-place update, dropped with the weight).
#include <gtest/gtest.h>

#include <torch/nn/functional/linear.h>
#include "tests/support/cpu_kernels.h"
#include "tests/support/torch.h"

#include "fairseq_cpp/core/runtime.h"
#include "fairseq_cpp/nn/packed_linear.h"

namespace fairseq_cpp::nn {
namespace {

at::Tensor reference(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  at::Tensor y = torch::matmul(x.to(torch::kFloat64), w.to(torch::kFloat64).t());
  return b.defined() ? y + b.to(torch::kFloat64) : y;
}

// packed_linear against the float64 reference on ragged shapes, with the kernel family in use.
void expect_equal_to_reference() {
  torch::manual_seed(7);
  // Rows: 1..8 (each kernel height: 1..3 with AVX2, 1..8 with AVX-512) and past it; columns: under,
  // at and over one 32-wide panel; inner sizes: odd, one register, the model's.
  for (int64_t m : {1, 2, 3, 4, 5, 8, 9, 23}) {
    for (int64_t n : {1, 7, 17, 32, 33, 100}) {
      for (int64_t k : {3, 16, 256}) {
        at::Tensor x = torch::randn({m, k});
        at::Tensor w = torch::randn({n, k});
        at::Tensor b = torch::randn({n});
        at::Tensor y = packed_linear(x, w, b);
        ASSERT_EQ(y.sizes(), (std::vector<int64_t>{m, n}));
        EXPECT_TRUE(torch::allclose(y.to(torch::kFloat64), reference(x, w, b), 1e-5, 1e-4))
            << m << "x" << k << " by " << n << "x" << k;
        EXPECT_TRUE(torch::allclose(packed_linear(x, w).to(torch::kFloat64), reference(x, w, {}), 1e-5, 1e-4));
      }
    }
  }
  // Leading dimensions are kept; a non-contiguous input is read correctly.
  at::Tensor x = torch::randn({4, 6, 40}).transpose(0, 1);
  at::Tensor w = torch::randn({50, 40});
  at::Tensor y = packed_linear(x, w);
  ASSERT_EQ(y.sizes(), (std::vector<int64_t>{6, 4, 50}));
  EXPECT_TRUE(torch::allclose(y.to(torch::kFloat64), reference(x, w, {}), 1e-5, 1e-4));
}

TEST(PackedLinear, EqualsAFloat64ReferenceForRaggedShapes) {
  if (!packed_linear_supported()) {
    // Without AVX-512F or AVX2 the packed path refuses and nn::linear is torch's linear.
    at::Tensor x = torch::randn({3, 5}), w = torch::randn({4, 5});
    EXPECT_THROW(packed_linear(x, w), c10::Error);
    PackedLinearScope scope;
    EXPECT_TRUE(torch::equal(scoped_linear(x, w), torch::nn::functional::linear(x, w)));
    return;
  }
  testing::for_each_cpu_kernel_family(expect_equal_to_reference);
}

TEST(PackedLinear, Avx2AndAvx512KernelsGiveTheSameBits) {
  if (!core::cpu_has_avx512f() || !core::cpu_has_avx2_fma())
    GTEST_SKIP() << "needs a CPU with both AVX-512F and AVX2 (this one lacks avx512f or avx2/fma)";
  // Both sum over K in order with one fused multiply-add per term, so they agree to the bit.
  torch::manual_seed(3);
  at::Tensor x = torch::randn({11, 256}), w = torch::randn({70, 256}), b = torch::randn({70});
  at::Tensor wide = packed_linear(x, w, b);
  core::use_avx2_kernels_only(true);
  at::Tensor narrow = packed_linear(x, w, b);
  core::use_avx2_kernels_only(false);
  EXPECT_TRUE(torch::equal(wide, narrow));
}

TEST(PackedLinear, PackedInPlaceTheWeightIsFreedAndStillMultiplies) {
  if (!packed_linear_supported()) GTEST_SKIP() << "this CPU has neither AVX-512F nor AVX2 with FMA";
  torch::manual_seed(5);
  at::Tensor x = torch::randn({4, 3, 24}), b = torch::randn({40});
  at::Tensor w = torch::randn({40, 24}).requires_grad_();
  at::Tensor expected;
  {
    torch::NoGradGuard no_grad;
    expected = packed_linear(x, w, b);
  }
  const at::Tensor ref = reference(x, w.detach(), b);
  const at::Tensor original = w.detach().clone();
  const size_t before = packed_weight_count();
  EXPECT_FALSE(packed_in_place(w));
  pack_in_place(w);
  EXPECT_TRUE(packed_in_place(w));
  EXPECT_EQ(w.numel(), 0) << "its float32 values are freed";
  // Outside a scope, with gradients enabled: the packed kernel, the same bits as before.
  at::Tensor y = scoped_linear(x, w, b);
  ASSERT_EQ(y.sizes(), (std::vector<int64_t>{4, 3, 40}));
  EXPECT_FALSE(y.requires_grad());
  EXPECT_TRUE(torch::equal(y, expected));
  EXPECT_TRUE(torch::allclose(y.to(torch::kFloat64), ref, 1e-5, 1e-4));
  // A wrong input width is refused with both widths named.
  try {
    scoped_linear(torch::randn({2, 23}), w);
    ADD_FAILURE() << "no error for a 23-wide input";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("is 23, the weight's 24"), std::string::npos) << e.what();
  }
  // Its rows, as an embedding shared with the output projection reads them.
  at::Tensor tokens = torch::tensor({{39, 0, 31}, {32, 7, 39}});
  EXPECT_TRUE(torch::equal(packed_rows(w, tokens), original.index_select(0, tokens.view(-1)).view({2, 3, 24})));
  EXPECT_THROW(packed_rows(torch::randn({4, 24}), tokens), c10::Error);
  // An ordinary empty weight is not taken for a packed one.
  EXPECT_FALSE(packed_in_place(torch::empty({0})));
  w = at::Tensor();  // the weight dies: its panels go with it
  EXPECT_EQ(packed_weight_count(), before - 1);
}

TEST(PackedLinear, OnlyInsideAScopeAndWithoutGradients) {
  const size_t packs = packed_linear_supported() ? 1 : 0;  // none without AVX-512F or AVX2
  at::Tensor w = torch::randn({40, 24});
  at::Tensor x = torch::randn({3, 24});
  const size_t before = packed_weight_count();
  scoped_linear(x, w);
  EXPECT_EQ(packed_weight_count(), before) << "outside a scope: torch's linear";
  {
    PackedLinearScope scope;
    at::Tensor trained = w.clone().requires_grad_();
    at::Tensor y = scoped_linear(x, trained);
    EXPECT_TRUE(y.requires_grad()) << "a weight that needs gradients goes through autograd";
    EXPECT_EQ(packed_weight_count(), before);
    EXPECT_TRUE(torch::allclose(scoped_linear(x, w).to(torch::kFloat64), reference(x, w, {}), 1e-5, 1e-4));
    EXPECT_EQ(packed_weight_count(), before + packs);
  }
}

TEST(PackedLinear, RepacksAfterAnInPlaceUpdateAndForgetsDeadWeights) {
  const size_t packs = packed_linear_supported() ? 1 : 0;  // none without AVX-512F or AVX2
  PackedLinearScope scope;
  at::Tensor x = torch::randn({2, 8});
  const size_t before = packed_weight_count();
  {
    at::Tensor w = torch::randn({5, 8});
    at::Tensor first = scoped_linear(x, w);
    w.mul_(2);  // as an optimizer step: same tensor, new values
    at::Tensor second = scoped_linear(x, w);
    EXPECT_TRUE(torch::allclose(second, first * 2, 1e-5, 1e-5));
    EXPECT_EQ(packed_weight_count(), before + packs);
  }
  // The weight above is gone: packing another drops its entry.
  at::Tensor other = torch::randn({5, 8});
  EXPECT_TRUE(torch::allclose(scoped_linear(x, other).to(torch::kFloat64), reference(x, other, {}), 1e-5, 1e-4));
  EXPECT_EQ(packed_weight_count(), before + packs);
}

}  // namespace
}  // namespace fairseq_cpp::nn
