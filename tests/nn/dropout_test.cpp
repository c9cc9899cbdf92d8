// nn::dropout: the drop rate, the exact scale, the gradient, reproducibility from the seed and
// independence from the thread count, checked by counting.
#include "fairseq_cpp/nn/dropout.h"

#include <gtest/gtest.h>

#include <cmath>

#include <ATen/Parallel.h>
#include <torch/torch.h>

namespace fairseq_cpp::nn {
namespace {

TEST(Dropout, DropsAboutPAndScalesTheRestByOneOverOneMinusP) {
  torch::manual_seed(1);
  const int64_t n = 1 << 20;
  for (double p : {0.1, 0.3}) {
    at::Tensor x = torch::rand({n}) + 0.5;  // no zeros of its own
    at::Tensor y = nn::dropout(x, p, true);
    at::Tensor kept = y.ne(0);
    // n Bernoulli(1 - p) draws: the kept fraction is within 6 standard deviations of 1 - p.
    const double fraction = kept.to(torch::kDouble).mean().item<double>();
    EXPECT_NEAR(fraction, 1 - p, 6 * std::sqrt(p * (1 - p) / n)) << "p " << p;
    at::Tensor expected = x.masked_select(kept) * static_cast<float>(1 / (1 - p));
    EXPECT_TRUE(torch::equal(y.masked_select(kept), expected));
    // Neighbours are independent: both dropped with probability p^2.
    at::Tensor dropped = kept.logical_not().to(torch::kDouble);
    const double both = (dropped.narrow(0, 0, n - 1) * dropped.narrow(0, 1, n - 1)).mean().item<double>();
    EXPECT_NEAR(both, p * p, 6 * std::sqrt(p * p * (1 - p * p) / n)) << "p " << p;
  }
}

TEST(Dropout, GradientIsTheSameMaskAndScale) {
  torch::manual_seed(2);
  at::Tensor x = torch::rand({64, 33}).add_(1).requires_grad_(true);
  at::Tensor y = nn::dropout(x, 0.25, true);
  (y * 3).sum().backward();
  // dy/dx = keep / (1 - p), so grad = 3 * y / x.
  EXPECT_TRUE(torch::allclose(x.grad(), 3 * y.detach() / x.detach(), 1e-6, 1e-6));
  EXPECT_TRUE(torch::equal(x.grad().eq(0), y.detach().eq(0)));
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

TEST(Dropout, IdentityWhenNotTrainingOrPIsZero) {
  at::Tensor x = torch::rand({10, 10});
  EXPECT_TRUE(nn::dropout(x, 0.5, false).is_same(x));
  EXPECT_TRUE(nn::dropout(x, 0.0, true).is_same(x));
  // Non-contiguous input: same values as its contiguous copy under the same seed.
  at::Tensor t = torch::rand({40, 30}).t();
  torch::manual_seed(3);
  at::Tensor from_view = nn::dropout(t, 0.2, true);
  torch::manual_seed(3);
  EXPECT_TRUE(torch::equal(from_view, nn::dropout(t.contiguous(), 0.2, true)));
}

}  // namespace
}  // namespace fairseq_cpp::nn
