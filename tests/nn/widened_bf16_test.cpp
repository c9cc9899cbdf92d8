// bf16 products widened to float32 on CPUs without bf16 hardware (nn/widened_bf16.h): the linear
// layer's output against LibTorch's own bf16 product, its output and gradients against float64
// sums of the same bf16-rounded operands; attention against float64; and when the widening applies.
#include <gtest/gtest.h>

#include <cmath>

#include <torch/csrc/autograd/function.h>
#include "tests/support/torch.h"

#include "fairseq_cpp/core/autocast_state.h"
#include "fairseq_cpp/core/runtime.h"
#include "fairseq_cpp/nn/attention.h"
#include "fairseq_cpp/nn/packed_linear.h"
#include "fairseq_cpp/nn/widened_bf16.h"
#include "fairseq_cpp/optim/mixed_precision.h"

namespace fairseq_cpp::nn {
namespace {

using optim::AutocastScope;
using optim::Precision;

// bf16 keeps 8 significant bits: a rounding moves a value by at most 2^-8 of it.
constexpr double kHalfUlp = 1.0 / 256;

at::Tensor rounded(const at::Tensor& t) { return t.to(at::kBFloat16).to(at::kDouble); }

// Widening forced on for one scope, whatever this CPU has.
struct ForceWidening {
  ForceWidening() { set_bf16_widening(Bf16Widening::kAlways); }
  ~ForceWidening() { set_bf16_widening(Bf16Widening::kAuto); }
};

// |a - b| <= rel * |b| + abs, elementwise; the largest excess over the bound reported.
void expect_within(const at::Tensor& a, const at::Tensor& b, double rel, double abs, const char* what) {
  const at::Tensor x = a.to(at::kDouble), y = b.to(at::kDouble);
  const at::Tensor excess = (x - y).abs() - (y.abs() * rel + abs);
  EXPECT_LE(excess.max().item<double>(), 0.0) << what;
}

struct LinearCase {
  at::Tensor x, weight, bias, upstream;  // float32 leaves; upstream: the loss is sum(y * upstream)
  bool widened_node = false;             // the last run's output came from the widened node
  LinearCase() {
    torch::manual_seed(11);
    x = torch::randn({3, 7, 48}).requires_grad_(true);
    weight = (torch::randn({40, 48}) * 0.2).requires_grad_(true);
    bias = torch::randn({40}).requires_grad_(true);
    upstream = torch::randn({3, 7, 40});
  }
  // y and the three gradients under bf16 autocast, through scoped_linear (widened where that
  // applies) or LibTorch's own at::linear.
  std::vector<at::Tensor> run(bool scoped) {
    for (at::Tensor* t : {&x, &weight, &bias}) t->mutable_grad() = at::Tensor();
    at::Tensor y;
    {
      AutocastScope autocast(Precision::kBFloat16, c10::DeviceType::CPU);
      y = scoped ? scoped_linear(x, weight, bias) : at::linear(x, weight, bias);
    }
    widened_node = y.grad_fn()->name().find("WidenedLinear") != std::string::npos;
    (y.to(at::kFloat) * upstream).sum().backward();
    return {y.detach(), x.grad(), weight.grad(), bias.grad()};
  }
};

TEST(WidenedBf16, LinearEqualsLibTorchsBf16ProductAndFloat64Sums) {
  LinearCase c;
  const std::vector<at::Tensor> native = c.run(/*scoped=*/false);
  EXPECT_FALSE(c.widened_node);
  std::vector<at::Tensor> widened;
  {
    ForceWidening force;
    widened = c.run(/*scoped=*/true);
  }
  EXPECT_TRUE(c.widened_node);
  // The output: both round float32 sums to bf16, in other orders, so they are at most one bf16
  // step apart and mostly equal. (The gradients are not compared with LibTorch's: its bf16
  // backward on a CPU without bf16 products strayed from the float64 sums below by up to 13% of an
  // element here, where the widened ones stay within half a step.)
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(widened[i].scalar_type(), native[i].scalar_type()) << i;
    EXPECT_EQ(widened[i].sizes(), native[i].sizes()) << i;
  }
  expect_within(widened[0], native[0], 2 * kHalfUlp, 1e-6, "output: one bf16 step of LibTorch's");
  EXPECT_GE(widened[0].to(at::kDouble).eq(native[0].to(at::kDouble)).to(at::kDouble).mean().item<double>(), 0.95);
  EXPECT_TRUE(torch::equal(widened[2], rounded(widened[2]).to(at::kFloat))) << "the weight's gradient is bf16's";
  // Float64 sums of the same bf16 operands, rounded once: within half a bf16 step of them (and
  // float32's summation error).
  const at::Tensor x = rounded(c.x.detach()).view({21, 48}), w = rounded(c.weight.detach()),
                   b = rounded(c.bias.detach()), g = rounded(c.upstream).view({21, 40});
  expect_within(widened[0].view({21, 40}), x.mm(w.t()) + b, kHalfUlp, 1e-5, "output");
  expect_within(widened[1].view({21, 48}), g.mm(w), kHalfUlp, 1e-5, "x's gradient");
  expect_within(widened[2], g.t().mm(x), kHalfUlp, 1e-5, "weight's gradient");
  expect_within(widened[3], g.sum(0), kHalfUlp, 1e-5, "bias's gradient");
}

// Without a bias (the output projection's form), and with a weight that needs no gradient.
TEST(WidenedBf16, LinearWithoutBias) {
  torch::manual_seed(13);
  const at::Tensor x = torch::randn({9, 16}).requires_grad_(true), weight = torch::randn({5, 16});
  at::Tensor y;
  {
    ForceWidening force;
    AutocastScope autocast(Precision::kBFloat16, c10::DeviceType::CPU);
    y = scoped_linear(x, weight, at::Tensor());
  }
  EXPECT_EQ(y.scalar_type(), at::kBFloat16);
  y.to(at::kFloat).sum().backward();
  expect_within(y, rounded(x.detach()).mm(rounded(weight).t()), kHalfUlp, 1e-5, "output");
  expect_within(x.grad(), rounded(torch::ones({9, 5})).mm(rounded(weight)), kHalfUlp, 1e-5, "x's gradient");
  EXPECT_EQ(x.grad().scalar_type(), at::kFloat);
  // Only the weight needs a gradient, and x is a non-contiguous 3-D view.
  const at::Tensor x3 = torch::randn({4, 16, 3}).transpose(1, 2);
  const at::Tensor w = torch::randn({5, 16}).requires_grad_(true);
  {
    ForceWidening force;
    AutocastScope autocast(Precision::kBFloat16, c10::DeviceType::CPU);
    y = scoped_linear(x3, w, at::Tensor());
  }
  EXPECT_EQ(y.sizes(), (std::vector<int64_t>{4, 3, 5}));
  y.to(at::kFloat).sum().backward();
  const at::Tensor x2 = rounded(x3).reshape({12, 16});
  expect_within(y.reshape({12, 5}), x2.mm(rounded(w.detach()).t()), kHalfUlp, 1e-5, "3-D output");
  expect_within(w.grad(), torch::ones({12, 5}, at::kDouble).t().mm(x2), kHalfUlp, 1e-5, "weight's gradient");
}

TEST(WidenedBf16, AttentionEqualsFloat64OfItsBf16Inputs) {
  torch::manual_seed(12);
  const auto bf16 = torch::TensorOptions().dtype(at::kBFloat16);
  at::Tensor q = torch::randn({2, 3, 5, 8}, bf16).requires_grad_(true);
  at::Tensor k = torch::randn({2, 3, 6, 8}, bf16).requires_grad_(true);
  at::Tensor v = torch::randn({2, 3, 6, 8}, bf16).requires_grad_(true);
  at::Tensor mask = torch::rand({2, 1, 5, 6}) > 0.6;
  mask.select(3, 0).fill_(false);
  const at::Tensor upstream = torch::randn({2, 3, 5, 8});
  at::Tensor out;
  {
    ForceWidening force;
    AutocastScope autocast(Precision::kBFloat16, c10::DeviceType::CPU);
    out = attention(q, k, v, mask, 0.0, true);
  }
  EXPECT_EQ(out.scalar_type(), at::kBFloat16);
  EXPECT_NE(out.grad_fn()->name().find("ToCopyBackward"), std::string::npos) << "the widened result, rounded";
  (out.to(at::kFloat) * upstream).sum().backward();
  // The same bf16 values in float64, through the reference path.
  std::vector<at::Tensor> wide;
  for (const at::Tensor& t : {q, k, v}) wide.push_back(t.detach().to(at::kDouble).requires_grad_(true));
  const at::Tensor expected = attention_reference(wide[0], wide[1], wide[2], mask, 0.0, false);
  (expected * rounded(upstream)).sum().backward();
  expect_within(out, expected.detach(), kHalfUlp, 1e-4, "output");
  const char* names[] = {"q", "k", "v"};
  const at::Tensor* grads[] = {&q, &k, &v};
  for (size_t i = 0; i < 3; ++i) {
    SCOPED_TRACE(names[i]);
    EXPECT_EQ(grads[i]->grad().scalar_type(), at::kBFloat16);
    // Inner roundings to bf16 (the output's, before the gradient's products): a few steps of the largest.
    const double scale = wide[i].grad().abs().max().item<double>();
    expect_within(grads[i]->grad(), wide[i].grad(), 2 * kHalfUlp, 4 * kHalfUlp * scale, "gradient");
  }
}

TEST(WidenedBf16, AppliesToCpuBf16AutocastWithoutBf16Products) {
  const at::Tensor x = torch::randn({2, 4});
  EXPECT_FALSE(widens_bf16_products(x)) << "outside autocast";
  {
    AutocastScope autocast(Precision::kBFloat16, c10::DeviceType::CPU);
    EXPECT_EQ(widens_bf16_products(x), !core::cpu_has_bf16_products());
    ForceWidening force;
    EXPECT_TRUE(widens_bf16_products(x));
    EXPECT_FALSE(widens_bf16_products(at::Tensor()));
    CpuAutocastOff off;
    EXPECT_FALSE(widens_bf16_products(x)) << "autocast off in its scope";
  }
  {
    AutocastScope autocast(Precision::kBFloat16, c10::DeviceType::CPU);
    set_bf16_widening(Bf16Widening::kNever);
    EXPECT_FALSE(widens_bf16_products(x)) << "never";
    set_bf16_widening(Bf16Widening::kAuto);
  }
  {
    ForceWidening force;
    AutocastScope fp32(Precision::kFloat32, c10::DeviceType::CPU);
    EXPECT_FALSE(widens_bf16_products(x)) << "float32";
  }
  AutocastScope autocast(Precision::kBFloat16, c10::DeviceType::CPU);
  {
    CpuAutocastOff off;
    { CpuAutocastOff nested; }
    EXPECT_FALSE(compat::autocast_state(c10::DeviceType::CPU).enabled) << "still off after a nested one";
  }
  const compat::AutocastState state = compat::autocast_state(c10::DeviceType::CPU);
  EXPECT_TRUE(state.enabled) << "restored";
  EXPECT_EQ(state.dtype, at::kBFloat16);
  ForceWidening force;
  EXPECT_FALSE(widens_bf16_products(x.to(at::kDouble))) << "autocast leaves float64 alone";
}

}  // namespace
}  // namespace fairseq_cpp::nn
