// The CPU's row kernel of the label-smoothed loss against the same sums and gradient computed by
// LibTorch's operators in float64, in both of its forms (AVX2 with FMA, and portable C++).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "tests/support/torch.h"

#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/core/runtime.h"
#include "fairseq_cpp/criterions/loss_rows.h"

namespace fairseq_cpp::criterions {
namespace {

// Logits whose rows test the kernel's corners: random, shifted far up and far down (exp's range
// and the sums' cancellation), a row of equal values (argmax's first largest), a row whose largest
// value is at the target and again earlier, and one with values below exp's underflow.
struct Rows {
  at::Tensor logits, target;  // (rows, vocab) float32, (rows) int64
  Rows(int64_t vocab, uint64_t seed) {
    torch::manual_seed(seed);
    logits = torch::randn({9, vocab}) * 3;
    target = torch::randint(0, vocab, {9}, torch::kLong);
    logits[1] += 90;
    logits[2] -= 90;
    logits[3].fill_(0.25);
    logits[4][target[4].item<int64_t>()] = 50;
    if (target[4].item<int64_t>() > 0) logits[4][0] = 50;  // the first largest is not the target
    logits[5][target[5].item<int64_t>()] = 50;             // the target alone is the largest
    logits[6] *= 40;                                       // most values far below the largest
    target[3] = vocab - 1;
  }
};

struct Expected {
  double nll = 0, smooth = 0;
  int64_t correct = 0;
  at::Tensor a;  // float64
};

Expected reference(const Rows& rows, double eps) {
  const at::Tensor z = rows.logits.to(at::kDouble);
  const at::Tensor lprobs = torch::log_softmax(z, 1);
  Expected e;
  e.nll = -lprobs.gather(1, rows.target.unsqueeze(1)).sum().item<double>();
  e.smooth = -lprobs.sum().item<double>();
  e.correct = z.argmax(1).eq(rows.target).sum().item<int64_t>();
  e.a = lprobs.exp() - eps / static_cast<double>(z.size(1));
  e.a.scatter_add_(1, rows.target.unsqueeze(1), torch::full({z.size(0), 1}, eps - 1.0, e.a.options()));
  return e;
}

// Runs the kernel into float32 and bf16 gradients (two calls, on copies of the logits).
struct KernelRun {
  RowLossSums sums;
  at::Tensor a, a_bf16;
};
KernelRun run_kernel(const Rows& rows, double eps) {
  KernelRun r;
  r.a = rows.logits.clone();  // A in the logits' place
  r.sums = label_smoothed_rows(r.a.data_ptr<float>(), rows.target.data_ptr<int64_t>(), r.a.size(0), r.a.size(1), eps,
                               true, RowGradient{r.a.data_ptr<float>(), nullptr});
  at::Tensor z = rows.logits.clone();
  r.a_bf16 = torch::empty(z.sizes(), z.options().dtype(at::kBFloat16));
  RowLossSums again = label_smoothed_rows(z.data_ptr<float>(), rows.target.data_ptr<int64_t>(), z.size(0), z.size(1),
                                          eps, true, RowGradient{nullptr, r.a_bf16.data_ptr<c10::BFloat16>()});
  auto same = [](double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); };
  EXPECT_TRUE(same(again.nll, r.sums.nll)) << again.nll << " vs " << r.sums.nll;
  EXPECT_TRUE(same(again.smooth, r.sums.smooth)) << again.smooth << " vs " << r.sums.smooth;
  return r;
}

void expect_matches(const Rows& rows, double eps, const std::string& form) {
  const Expected e = reference(rows, eps);
  const KernelRun r = run_kernel(rows, eps);
  const std::string where =
      form + ", vocabulary " + std::to_string(rows.logits.size(1)) + ", eps " + std::to_string(eps);
  EXPECT_NEAR(r.sums.nll, e.nll, 1e-5 * e.nll) << where;
  EXPECT_NEAR(r.sums.smooth, e.smooth, 1e-5 * e.smooth) << where;
  EXPECT_EQ(r.sums.correct, e.correct) << where;
  const double a_error = (r.a.to(at::kDouble) - e.a).abs().max().item<double>();
  EXPECT_LT(a_error, 1e-6) << where;
  // bf16's A is the float32 A rounded to nearest even, to the bit.
  EXPECT_TRUE(torch::equal(r.a_bf16, r.a.to(at::kBFloat16))) << where;
  // Without a gradient, the same sums and the logits untouched.
  at::Tensor z = rows.logits.clone();
  RowLossSums plain = label_smoothed_rows(z.data_ptr<float>(), rows.target.data_ptr<int64_t>(), z.size(0), z.size(1),
                                          eps, false, RowGradient{});
  EXPECT_EQ(plain.nll, r.sums.nll) << where;
  EXPECT_EQ(plain.smooth, r.sums.smooth) << where;
  EXPECT_EQ(plain.correct, 0) << where << ": not counted";
  EXPECT_TRUE(torch::equal(z, rows.logits)) << where;
}

class LossRows : public ::testing::TestWithParam<bool> {  // the portable form?
 protected:
  void SetUp() override {
    if (!GetParam() && !core::cpu_has_avx2_fma()) GTEST_SKIP() << "the AVX2 form needs a CPU with AVX2 and FMA";
    use_portable_loss_rows(GetParam());
  }
  void TearDown() override { use_portable_loss_rows(false); }
  std::string form() const { return GetParam() ? "portable" : "AVX2"; }
};

// Vocabularies around the vector width (8) and a translation model's.
TEST_P(LossRows, SumsArgmaxAndGradientEqualTheOperatorsInFloat64) {
  uint64_t seed = 0;
  for (int64_t vocab : {1, 7, 8, 9, 17, 1003, 8000}) {
    for (double eps : {0.0, 0.1}) expect_matches(Rows(vocab, ++seed), eps, form());
  }
}

// A NaN or an infinity makes its row's sums and gradient NaN, and only its row's.
TEST_P(LossRows, ANonFiniteLogitMakesItsRowNaN) {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    for (int64_t where : {0, 13, 20}) {  // the vector body and the tail of a row of 21
      Rows rows(21, 3);
      rows.logits[2][where] = bad;
      KernelRun r = run_kernel(rows, 0.1);
      EXPECT_TRUE(std::isnan(r.sums.nll)) << bad << " at " << where;
      EXPECT_TRUE(std::isnan(r.sums.smooth)) << bad << " at " << where;
      EXPECT_TRUE(r.a[2].isnan().all().item<bool>()) << bad << " at " << where;
      EXPECT_TRUE(r.a_bf16[2].isnan().all().item<bool>()) << bad << " at " << where;
      for (int64_t row : {0, 1, 3, 4, 5, 6, 7, 8})
        EXPECT_FALSE(r.a[row].isnan().any().item<bool>()) << bad << " at " << where << ": row " << row;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Forms, LossRows, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) { return info.param ? "Portable" : "Avx2"; });

// The sums are added in row order: the same bits on one thread as on several.
TEST(LossRowsThreads, SumsAreTheSameOnAnyNumberOfThreads) {
  Rows rows(8000, 11);
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const KernelRun one = run_kernel(rows, 0.1);
  at::set_num_threads(std::max(2, threads));
  const KernelRun several = run_kernel(rows, 0.1);
  at::set_num_threads(threads);
  EXPECT_EQ(one.sums.nll, several.sums.nll);
  EXPECT_EQ(one.sums.smooth, several.sums.smooth);
  EXPECT_TRUE(torch::equal(one.a, several.a));
}

TEST(LossRowsTargets, AnIdOutsideTheVocabularyIsRefused) {
  at::Tensor z = torch::zeros({2, 5});
  for (int64_t bad : {-1, 5}) {
    at::Tensor target = torch::tensor({int64_t{1}, bad}, torch::kLong);
    EXPECT_THROW(label_smoothed_rows(z.data_ptr<float>(), target.data_ptr<int64_t>(), 2, 5, 0.1, true, RowGradient{}),
                 DataError)
        << bad;
  }
}

}  // namespace
}  // namespace fairseq_cpp::criterions
