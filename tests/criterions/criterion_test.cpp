// fairseq's criterions against a hand computation on a 3-word vocabulary, on each device: inputs
// built on the CPU and moved, losses and gradients brought back.
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>
#include <utility>

#include "tests/support/torch.h"

#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/criterions/cross_entropy.h"
#include "tests/support/devices.h"

namespace fairseq_cpp::criterions {
namespace {

const double ln2 = std::log(2.0), ln3 = std::log(3.0), ln6 = std::log(6.0);

// Two sentences of two positions; padding_idx 0. Rows (logits -> probabilities):
//   A = [0, 0, 0]         -> [1/3, 1/3, 1/3]
//   B = [0, ln 2, ln 3]   -> [1/6, 2/6, 3/6]
// sentence 0 = [A -> target 1, B -> target 2], sentence 1 = [B -> target 2, anything -> pad].
struct Example {
  at::Tensor logits, target;  // on the device; logits is a leaf that requires its gradient
  explicit Example(torch::Device device) {
    auto a = std::vector<float>{0, 0, 0};
    auto b = std::vector<float>{0, static_cast<float>(ln2), static_cast<float>(ln3)};
    auto junk = std::vector<float>{50, -50, 7};
    std::vector<float> all;
    for (auto* row : {&a, &b, &b, &junk}) all.insert(all.end(), row->begin(), row->end());
    logits = torch::tensor(all).view({2, 2, 3}).to(device).requires_grad_(true);
    target = torch::tensor({1, 2, 2, 0}, torch::kLong).view({2, 2}).to(device);
  }
};

CriterionOptions options(const std::string& name, double eps, bool sentence_avg = false) {
  CriterionOptions o;
  o.name = name;
  o.label_smoothing = eps;
  o.sentence_avg = sentence_avg;
  o.padding_idx = 0;
  o.report_accuracy = true;
  return o;
}

class Criterions : public ::testing::TestWithParam<std::string> {
 protected:
  torch::Device device() const { return torch::Device(GetParam()); }
  // CPU float32 meets the first; CUDA float32 (its own exp, log and summation orders) the second.
  double tolerance(double cpu) const { return device().is_cuda() ? 10 * cpu : cpu; }
};

TEST_P(Criterions, CrossEntropyIsTheSummedNllOverNonPadding) {
  Example ex(device());
  LossOutput out = Criterion(options("cross_entropy", 0.0))(ex.logits, ex.target);
  const double nll = ln3 + ln2 + ln2;  // -ln(1/3) - ln(1/2) - ln(1/2)
  EXPECT_EQ(out.loss.device(), device());
  EXPECT_NEAR(out.loss.item<double>(), nll, tolerance(1e-6));
  EXPECT_NEAR(out.stats.loss_sum, nll, tolerance(1e-6));
  EXPECT_NEAR(out.stats.nll_loss_sum, nll, tolerance(1e-6));
  EXPECT_EQ(out.stats.ntokens, 3);
  EXPECT_EQ(out.stats.nsentences, 2);
  EXPECT_EQ(out.stats.sample_size, 3);
  EXPECT_EQ(out.stats.n_correct, 2);                              // B's argmax is 2 (twice); A's argmax is 0, target 1
  EXPECT_NEAR(out.stats.loss(), nll / 3 / ln2, tolerance(1e-6));  // fairseq logs base 2
  EXPECT_NEAR(out.stats.perplexity(), std::pow(2.0, nll / 3 / ln2), tolerance(1e-5));

  // d loss / d logits = softmax - onehot on real tokens, zero on the padding position.
  out.loss.backward();
  at::Tensor grad = ex.logits.grad().to(torch::kCPU);
  EXPECT_NEAR(grad[0][0][1].item<double>(), 1.0 / 3 - 1, tolerance(1e-6));
  EXPECT_NEAR(grad[0][1][2].item<double>(), 0.5 - 1, tolerance(1e-6));
  EXPECT_NEAR(grad[1][0][0].item<double>(), 1.0 / 6, tolerance(1e-6));
  EXPECT_EQ(grad[1][1].abs().sum().item<double>(), 0.0);
}

TEST_P(Criterions, LabelSmoothingSpreadsEpsOverTheVocabularyAsFairseqV09) {
  Example ex(device());
  const double eps = 0.1;
  LossOutput out = Criterion(options("label_smoothed_cross_entropy", eps))(ex.logits, ex.target);
  const double nll = ln3 + 2 * ln2;
  // sum over the vocabulary of -log p: A: 3 ln 3; B: ln 6 + ln 3 + ln 2 = ln 36 (twice).
  const double smooth = 3 * ln3 + 2 * (ln6 + ln3 + ln2);
  const double expected = (1 - eps) * nll + eps / 3 * smooth;  // eps_i = eps / V (v0.9)
  EXPECT_NEAR(out.stats.loss_sum, expected, tolerance(1e-6));
  EXPECT_NEAR(out.loss.item<double>(), expected, tolerance(1e-6));
  EXPECT_NEAR(out.stats.nll_loss_sum, nll, tolerance(1e-6));
  EXPECT_NEAR(out.stats.loss(), expected / 3 / ln2, tolerance(1e-6));
  EXPECT_NEAR(out.stats.nll_loss(), nll / 3 / ln2, tolerance(1e-6));
  // Newer fairseq's eps / (V - 1) would give a different number: the test tells them apart.
  const double newer = (1 - eps - eps / 2) * nll + eps / 2 * smooth;
  EXPECT_GT(std::abs(out.stats.loss_sum - newer), 1e-3);
}

// The criterion's fused backward against autograd through the plain composition
// (log_softmax, then label_smoothed_nll_loss), on random logits with padding rows, for the
// loss, the nll and a mix of both.
TEST_P(Criterions, FusedGradientEqualsAutogradOfTheComposition) {
  torch::manual_seed(3);
  for (double eps : {0.0, 0.1}) {
    for (auto [a, b] : {std::pair{1.0, 0.0}, std::pair{0.0, 1.0}, std::pair{0.7, -0.3}}) {
      at::Tensor base = torch::randn({3, 5, 11}) * 3;
      at::Tensor target = torch::randint(0, 11, {3, 5}, torch::kLong);
      target[1][4] = 0;  // padding rows (padding_idx 0)
      target[2][3] = 0;
      target[2][4] = 0;
      base = base.to(device());  // drawn on the CPU: the same numbers on every device
      target = target.to(device());
      at::Tensor fused_in = base.clone().requires_grad_(true);
      LossOutput out = Criterion(options("label_smoothed_cross_entropy", eps))(fused_in, target);
      (a * out.loss + b * out.nll_loss).backward();

      at::Tensor plain_in = base.clone().requires_grad_(true);
      auto [loss, nll] = label_smoothed_nll_loss(torch::log_softmax(plain_in, -1).view({-1, 11}), target.view(-1),
                                                 eps, 0);
      (a * loss + b * nll).backward();
      EXPECT_NEAR(out.loss.item<double>(), loss.item<double>(), tolerance(1e-4));
      EXPECT_NEAR(out.nll_loss.item<double>(), nll.item<double>(), tolerance(1e-4));
      at::Tensor fused_grad = fused_in.grad().to(torch::kCPU), plain_grad = plain_in.grad().to(torch::kCPU);
      EXPECT_TRUE(torch::allclose(fused_grad, plain_grad, tolerance(1e-5), tolerance(1e-6)))
          << "eps " << eps << " a " << a << " b " << b << ": max difference "
          << (fused_grad - plain_grad).abs().max().item<double>();
      EXPECT_EQ(fused_grad[2][4].abs().sum().item<double>(), 0.0);  // padding rows get no gradient
    }
  }
}

// From features and the output weight, projected 3 rows at a time (7 non-padding rows: chunks of
// 3, 3 and 1): the losses, accuracy and gradients with respect to both the features and the
// weight equal autograd through linear, log_softmax and label_smoothed_nll_loss.
TEST_P(Criterions, ChunkedProjectionEqualsAutogradOfLinearAndLoss) {
  torch::manual_seed(4);
  for (double eps : {0.0, 0.1}) {
    for (auto [a, b] : {std::pair{1.0, 0.0}, std::pair{0.0, 1.0}, std::pair{0.7, -0.3}}) {
      at::Tensor base_h = torch::randn({2, 5, 6});
      at::Tensor base_w = torch::randn({11, 6});
      at::Tensor target = torch::randint(1, 11, {2, 5}, torch::kLong);
      target[0][4] = 0;  // padding rows (padding_idx 0)
      target[1][3] = 0;
      target[1][4] = 0;
      base_h = base_h.to(device());  // drawn on the CPU: the same numbers on every device
      base_w = base_w.to(device());
      target = target.to(device());
      CriterionOptions o = options("label_smoothed_cross_entropy", eps);
      o.chunk_elements = 3 * 11;
      o.report_accuracy = true;
      at::Tensor h = base_h.clone().requires_grad_(true);
      at::Tensor w = base_w.clone().requires_grad_(true);
      LossOutput out = Criterion(o)(h, w, target);
      (a * out.loss + b * out.nll_loss).backward();

      at::Tensor plain_h = base_h.clone().requires_grad_(true);
      at::Tensor plain_w = base_w.clone().requires_grad_(true);
      at::Tensor logits = torch::matmul(plain_h, plain_w.t());
      auto [loss, nll] = label_smoothed_nll_loss(torch::log_softmax(logits, -1).view({-1, 11}), target.view(-1),
                                                 eps, 0);
      (a * loss + b * nll).backward();
      EXPECT_NEAR(out.loss.item<double>(), loss.item<double>(), tolerance(1e-4));
      EXPECT_NEAR(out.nll_loss.item<double>(), nll.item<double>(), tolerance(1e-4));
      EXPECT_EQ(out.stats.ntokens, 7);
      EXPECT_EQ(out.stats.n_correct,
                logits.argmax(-1).eq(target).logical_and(target.ne(0)).sum().item<int64_t>());
      for (auto [fused, plain, name] : {std::tuple{h, plain_h, "features"}, std::tuple{w, plain_w, "weight"}}) {
        at::Tensor fused_grad = fused.grad().to(torch::kCPU), plain_grad = plain.grad().to(torch::kCPU);
        EXPECT_TRUE(torch::allclose(fused_grad, plain_grad, tolerance(1e-5), tolerance(1e-5)))
            << name << ", eps " << eps << " a " << a << " b " << b << ": max difference "
            << (fused_grad - plain_grad).abs().max().item<double>();
      }
      EXPECT_EQ(h.grad()[1][4].abs().sum().item<double>(), 0.0);  // padding rows get no gradient
    }
  }
}

// With matmul_dtype bf16 (the trainer's on CUDA in bf16) the chunked projection is fairseq's
// half-precision output layer: logits = float(bf16(h) bf16(W)^T), the gradients the products of
// bf16 operands. The loss against autograd of that composition, on each device; the gradients
// against the products of the same bf16-rounded operands in float64 (each LibTorch's own bf16 GEMM
// rounds its one output, over all rows, to bf16, and 1.13's CPU one accumulates in bf16 too).
TEST_P(Criterions, ChunkedProjectionInBf16EqualsAutogradOfTheHalfPrecisionOutputLayer) {
  torch::manual_seed(6);
  at::Tensor base_h = torch::randn({3, 5, 16}).to(device());
  at::Tensor base_w = torch::randn({13, 16}).to(device());
  at::Tensor target = torch::randint(1, 13, {3, 5}, torch::kLong);
  target[2][4] = 0;  // a padding row (padding_idx 0)
  target = target.to(device());
  CriterionOptions o = options("label_smoothed_cross_entropy", 0.1);
  o.chunk_elements = 4 * 13;  // 4 rows a chunk: 4 chunks
  auto run = [&](c10::ScalarType dtype) {
    at::Tensor h = base_h.clone().requires_grad_(true), w = base_w.clone().requires_grad_(true);
    LossOutput out = Criterion(o)(h, w, target, dtype);
    (out.loss + 0.5 * out.nll_loss).backward();
    return std::tuple{out, h.grad().to(torch::kCPU), w.grad().to(torch::kCPU)};
  };
  auto [out, grad_h, grad_w] = run(at::kBFloat16);
  auto [out32, grad_h32, grad_w32] = run(at::kFloat);

  at::Tensor logits = torch::matmul(base_h.to(at::kBFloat16), base_w.to(at::kBFloat16).t()).to(at::kFloat);
  auto [loss, nll] = label_smoothed_nll_loss(torch::log_softmax(logits, -1).view({-1, 13}), target.view(-1), 0.1, 0);
  EXPECT_NEAR(out.loss.item<double>(), loss.item<double>(), 1e-4 * loss.item<double>());
  EXPECT_NEAR(out.nll_loss.item<double>(), nll.item<double>(), 1e-4 * nll.item<double>());
  // bf16 keeps 8 bits of mantissa: the products' roundings are what separate bf16 from float32.
  EXPECT_GT(std::abs(out.loss.item<double>() - out32.loss.item<double>()), 1e-6 * loss.item<double>());

  at::Tensor exact_h = base_h.to(at::kBFloat16).to(at::kDouble).requires_grad_(true);
  at::Tensor exact_w = base_w.to(at::kBFloat16).to(at::kDouble).requires_grad_(true);
  at::Tensor exact_logits = torch::matmul(exact_h, exact_w.t());
  auto [exact_loss, exact_nll] =
      label_smoothed_nll_loss(torch::log_softmax(exact_logits, -1).view({-1, 13}), target.view(-1), 0.1, 0);
  (exact_loss + 0.5 * exact_nll).backward();
  for (auto [fused, fused32, exact, name] :
       {std::tuple{grad_h, grad_h32, exact_h.grad().to(torch::kCPU, torch::kFloat), "features"},
        std::tuple{grad_w, grad_w32, exact_w.grad().to(torch::kCPU, torch::kFloat), "weight"}}) {
    const double scale = exact.abs().max().item<double>();
    EXPECT_LT((fused - exact).abs().max().item<double>(), 1e-2 * scale) << name;
    EXPECT_GT((fused - fused32).abs().max().item<double>(), 1e-5 * scale) << name << ": bf16 changed nothing";
  }
  EXPECT_EQ(grad_h[2][4].abs().sum().item<double>(), 0.0);  // the padding row gets no gradient
}

// On the CPU the chunks go through the row kernel (loss_rows.h) unless row_kernel is off: both
// ways give the same loss, nll, accuracy and gradients, in float32 and with bf16 products.
TEST(CriterionRowKernel, GivesWhatTheOperatorsGive) {
  torch::manual_seed(8);
  at::Tensor base_h = torch::randn({4, 30, 64});
  at::Tensor base_w = torch::randn({1003, 64}) * 0.3;
  at::Tensor target = torch::randint(1, 1003, {4, 30}, torch::kLong);
  target.narrow(1, 25, 5).fill_(0);  // padding
  for (c10::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    auto run = [&](bool row_kernel) {
      CriterionOptions o = options("label_smoothed_cross_entropy", 0.1);
      o.chunk_elements = 16 * 1003;  // 100 non-padding rows: 6 full chunks and one of 4
      o.row_kernel = row_kernel;
      at::Tensor h = base_h.clone().requires_grad_(true), w = base_w.clone().requires_grad_(true);
      LossOutput out = Criterion(o)(h, w, target, dtype);
      (out.loss + 0.5 * out.nll_loss).backward();
      return std::tuple{out, h.grad(), w.grad()};
    };
    auto [kernel, kernel_h, kernel_w] = run(true);
    auto [ops, ops_h, ops_w] = run(false);
    const std::string what = dtype == at::kFloat ? "float32" : "bf16";
    EXPECT_NEAR(kernel.stats.loss_sum, ops.stats.loss_sum, 1e-5 * ops.stats.loss_sum) << what;
    EXPECT_NEAR(kernel.stats.nll_loss_sum, ops.stats.nll_loss_sum, 1e-5 * ops.stats.nll_loss_sum) << what;
    EXPECT_EQ(kernel.stats.n_correct, ops.stats.n_correct) << what;
    for (auto [a, b, name] : {std::tuple{kernel_h, ops_h, "features"}, std::tuple{kernel_w, ops_w, "weight"}}) {
      // float32: the exponentials' last bits; bf16: A's rounding to bf16 where it lands on a tie's other side.
      const double tolerance = dtype == at::kFloat ? 1e-5 : 1e-2;
      EXPECT_LT((a - b).abs().max().item<double>(), tolerance * b.abs().max().item<double>()) << what << " " << name;
    }
  }
}

// A chunk's size by device unless given: near the CPU's caches, or few launches on CUDA.
TEST(CriterionChunks, DefaultChunkFollowsTheDevice) {
  CriterionOptions o;
  EXPECT_EQ(o.chunk_elements, 0);
  const c10::Device cpu(c10::kCPU), cuda(c10::kCUDA, 0);
  EXPECT_EQ(chunk_elements_for(o, cpu), int64_t{1} << 22);
  EXPECT_EQ(chunk_elements_for(o, cuda), int64_t{1} << 26);
  o.chunk_elements = 33;
  EXPECT_EQ(chunk_elements_for(o, cpu), 33);
  EXPECT_EQ(chunk_elements_for(o, cuda), 33);
}

// Without gradients (validation) the chunked path gives the same sums as the logits path.
TEST_P(Criterions, ChunkedProjectionWithoutGradientsMatchesTheLogitsPath) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(5);
  at::Tensor h = torch::randn({3, 4, 6}).to(device());
  at::Tensor w = torch::randn({9, 6}).to(device());
  at::Tensor target = torch::randint(0, 9, {3, 4}, torch::kLong).to(device());
  CriterionOptions o = options("label_smoothed_cross_entropy", 0.1);
  o.chunk_elements = 5 * 9;
  LossOutput chunked = Criterion(o)(h, w, target);
  LossOutput whole = Criterion(o)(torch::matmul(h, w.t()), target);
  EXPECT_NEAR(chunked.stats.loss_sum, whole.stats.loss_sum, tolerance(1e-4));
  EXPECT_NEAR(chunked.stats.nll_loss_sum, whole.stats.nll_loss_sum, tolerance(1e-4));
  EXPECT_EQ(chunked.stats.ntokens, whole.stats.ntokens);
  EXPECT_FALSE(chunked.loss.requires_grad());
}

TEST_P(Criterions, SentenceAvgAndStatsAccumulate) {
  Example ex(device());
  LossOutput out = Criterion(options("label_smoothed_cross_entropy", 0.1, true))(ex.logits, ex.target);
  EXPECT_EQ(out.stats.sample_size, 2);
  LossStats total;
  total.add(out.stats);
  total.add(out.stats);
  EXPECT_EQ(total.ntokens, 6);
  EXPECT_EQ(total.sample_size, 4);
  EXPECT_NEAR(total.loss(), out.stats.loss(), 1e-12);
}

TEST_P(Criterions, IgnorePrefixSizeDropsLeadingPositions) {
  Example ex(device());
  auto o = options("cross_entropy", 0.0);
  o.ignore_prefix_size = 1;
  LossOutput out = Criterion(o)(ex.logits, ex.target);
  EXPECT_NEAR(out.stats.loss_sum, ln2, tolerance(1e-6));  // only sentence 0's second position remains
  EXPECT_EQ(out.stats.ntokens, 1);
}

// Option checks only: no tensors.
TEST(Criterion, RefusesUnknownNamesAndSmoothingWithoutTheSmoothedCriterion) {
  EXPECT_THROW(Criterion(options("mse", 0.0)), UserError);
  EXPECT_THROW(Criterion(options("cross_entropy", 0.1)), UserError);
}

INSTANTIATE_TEST_SUITE_P(Devices, Criterions, ::testing::ValuesIn(testing::test_devices()), testing::device_name);

}  // namespace
}  // namespace fairseq_cpp::criterions
