// The packed-weight linear layer against a float64 reference, its scope, and its cache of packed
// weights (repacked after an in-place update, dropped with the weight).
#include <gtest/gtest.h>

#include <torch/nn/functional/linear.h>
#include "tests/support/torch.h"

#include "fairseq_cpp/nn/packed_linear.h"

namespace fairseq_cpp::nn {
namespace {

at::Tensor reference(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  at::Tensor y = torch::matmul(x.to(torch::kFloat64), w.to(torch::kFloat64).t());
  return b.defined() ? y + b.to(torch::kFloat64) : y;
}

TEST(PackedLinear, EqualsAFloat64ReferenceForRaggedShapes) {
  if (!packed_linear_supported()) {
    // Without AVX-512F the packed path refuses and nn::linear is torch's linear.
    at::Tensor x = torch::randn({3, 5}), w = torch::randn({4, 5});
    EXPECT_THROW(packed_linear(x, w), c10::Error);
    PackedLinearScope scope;
    EXPECT_TRUE(torch::equal(scoped_linear(x, w), torch::nn::functional::linear(x, w)));
    return;
  }
  torch::manual_seed(7);
  // Rows: 1..8 (each kernel height) and past it; columns: under, at and over one 32-wide panel;
  // inner sizes: odd, one register, the model's.
  for (int64_t m : {1, 5, 8, 9, 23}) {
    for (int64_t n : {1, 17, 32, 33, 100}) {
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

TEST(PackedLinear, OnlyInsideAScopeAndWithoutGradients) {
  const size_t packs = packed_linear_supported() ? 1 : 0;  // none without AVX-512F
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
  const size_t packs = packed_linear_supported() ? 1 : 0;  // none without AVX-512F
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
