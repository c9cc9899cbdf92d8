// The vectorized log_softmax against torch's, on rows of every length class (under, at and over
// one 16-wide register), large magnitudes and -inf entries (masked words), on each device (off
// the CPU it is torch's own, which beam search then runs on the device).
#include <gtest/gtest.h>

#include <limits>

#include "tests/support/torch.h"

#include "fairseq_cpp/nn/log_softmax.h"
#include "tests/support/devices.h"

namespace fairseq_cpp::nn {
namespace {

class LogSoftmax : public ::testing::TestWithParam<std::string> {
 protected:
  torch::Device device() const { return torch::Device(GetParam()); }
  // CPU float32 meets the first; CUDA float32 (its own exp, log and summation order) the second.
  double tolerance(double cpu) const { return device().is_cuda() ? 10 * cpu : cpu; }
};

TEST_P(LogSoftmax, EqualsTorchToFloatRounding) {
  torch::manual_seed(9);
  for (int64_t n : {1, 5, 16, 17, 100, 8000}) {
    at::Tensor x = torch::randn({7, n}) * 8;
    x[1] += 1000;  // only differences matter
    x[2] -= 1000;
    if (n > 1) x[3][0] = -std::numeric_limits<float>::infinity();
    at::Tensor expected = torch::log_softmax(x.to(torch::kFloat64), -1);
    at::Tensor got = log_softmax_last_dim(x.to(device()));
    EXPECT_EQ(got.device(), device());
    got = got.to(torch::kCPU);
    ASSERT_EQ(got.sizes(), x.sizes());
    at::Tensor finite = expected.isfinite();
    EXPECT_TRUE(torch::equal(got.isfinite(), finite)) << n;
    at::Tensor diff = (got.to(torch::kFloat64) - expected).masked_fill(finite.logical_not(), 0).abs();
    // float32 rounding of values up to |x - max| ~ 60: a few 1e-6
    EXPECT_LT(diff.max().item<double>(), tolerance(2e-5)) << n;
    // Probabilities sum to one.
    EXPECT_NEAR(got.exp().sum(-1).min().item<double>(), 1.0, tolerance(1e-5)) << n;
  }
  // Leading dimensions and a non-contiguous input.
  at::Tensor x = torch::randn({3, 40, 2}).transpose(1, 2);
  EXPECT_TRUE(torch::allclose(log_softmax_last_dim(x.to(device())).to(torch::kCPU), torch::log_softmax(x, -1),
                              tolerance(1e-5), tolerance(1e-5)));
}

INSTANTIATE_TEST_SUITE_P(Devices, LogSoftmax, ::testing::ValuesIn(testing::test_devices()), testing::device_name);

}  // namespace
}  // namespace fairseq_cpp::nn
