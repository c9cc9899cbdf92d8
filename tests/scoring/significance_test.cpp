// The statistical tests (scoring/significance) against brute force: every resample and trial
// scored again from its own hypotheses with a fresh scorer, and the p-values and intervals
// computed from those by sacreBLEU's formulas. numpy's generator against numpy's numbers (here its
// first draws; tests/scoring/sacrebleu_test.cpp compares long streams with numpy itself).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "fairseq_cpp/scoring/numpy_random.h"
#include "fairseq_cpp/scoring/report.h"
#include "fairseq_cpp/scoring/significance.h"

namespace fairseq_cpp::scoring {
namespace {

const std::vector<std::string> kRefs{"the cat sat on the mat .", "a dog barks at the moon", "it rains in spring",
                                     "we walk to the old bridge", "she reads a long book", "the sun is warm today",
                                     "birds sing in the tall trees", "he plays the piano well"};
const std::vector<std::string> kBaseline{"the cat sat on a mat .", "a dog barks at moon", "it rains in the spring",
                                         "we walk to old bridge", "she reads the long book", "the sun is warm",
                                         "birds sing in tall trees", "he plays piano well"};
const std::vector<std::string> kSystem{"the cat is on the mat .", "dog barks at the moon", "it rains in spring",
                                       "we go to the old bridge", "she reads a book", "the sun is warm today",
                                       "birds sing in the tall trees", "he plays the piano"};

double corpus_score(const std::string& metric, const std::vector<std::string>& hyps,
                    const std::vector<std::string>& refs) {
  auto scorer = make_scorer(metric, {});
  for (size_t i = 0; i < hyps.size(); ++i) scorer->add(hyps[i], std::vector<std::string>{refs[i]});
  return scorer->score().score;
}

std::vector<SegmentStatistics> statistics_of(const std::string& metric, std::vector<std::unique_ptr<Scorer>>& scorers,
                                             const std::vector<std::vector<std::string>>& systems) {
  std::vector<Scorer*> raw;
  for (size_t s = 0; s < systems.size(); ++s) {
    scorers.push_back(make_scorer(metric, {}));
    raw.push_back(scorers.back().get());
  }
  return score_systems(raw, systems, {kRefs}, 2);
}

TEST(NumpyGenerator, DrawsNumpysNumbers) {
  // numpy 2.4.6: np.random.PCG64(12345).random_raw(3) and default_rng(12345).choice(3000, size=5).
  NumpyGenerator raw(12345);
  EXPECT_EQ(raw.next_uint64(), 0x3a32b18db2ffc19dULL);
  EXPECT_EQ(raw.next_uint64(), 0x51171315c9e4c4deULL);
  EXPECT_EQ(raw.next_uint64(), 0xcc2024823444efd9ULL);
  EXPECT_EQ(NumpyGenerator(12345).integers(3000, 5), (std::vector<uint32_t>{2097, 682, 2365, 950, 612}));
  // The 32-bit draws are each 64-bit draw's low half, then its high half.
  NumpyGenerator a(7), b(7);
  const uint64_t x = a.next_uint64();
  EXPECT_EQ(b.next_uint32(), static_cast<uint32_t>(x));
  EXPECT_EQ(b.next_uint32(), static_cast<uint32_t>(x >> 32));
  // Booleans are a 32-bit draw's bits, lowest first.
  NumpyGenerator c(7);
  const auto bits = c.booleans(33);
  for (int k = 0; k < 32; ++k) EXPECT_EQ(bits[k], (x >> k) & 1U) << k;
  EXPECT_EQ(bits[32], (x >> 32) & 1U);
}

TEST(Significance, EstimateTakesTheCentral95Percent) {
  std::vector<double> scores(80);
  std::iota(scores.begin(), scores.end(), 1.0);
  std::reverse(scores.begin(), scores.end());
  // n = 80: the 2nd and the 77th of the sorted scores (0-based), 3 and 78.
  const Estimate e = estimate_ci(scores);
  EXPECT_DOUBLE_EQ(e.mean, 40.5);
  EXPECT_DOUBLE_EQ(e.ci, 37.5);
}

TEST(Significance, BootstrapScoresAreTheResamplesScores) {
  for (const std::string metric : {"bleu", "chrf", "ter"}) {
    std::vector<std::unique_ptr<Scorer>> scorers;
    const auto stats = statistics_of(metric, scorers, {kSystem});
    const size_t samples = 50, n = kRefs.size();
    const auto scores = bootstrap_scores(*scorers[0], stats[0], samples, 2026, 2);
    const auto idx = NumpyGenerator(2026).integers(static_cast<uint32_t>(n), samples * n);
    ASSERT_EQ(scores.size(), samples);
    for (size_t r = 0; r < samples; ++r) {
      std::vector<std::string> hyps, refs;
      for (size_t j = 0; j < n; ++j) {
        hyps.push_back(kSystem[idx[r * n + j]]);
        refs.push_back(kRefs[idx[r * n + j]]);
      }
      EXPECT_NEAR(scores[r], corpus_score(metric, hyps, refs), 1e-9) << metric << " resample " << r;
    }
  }
}

TEST(Significance, PairedBootstrapIsSacrebleusFormulaOnTheResamples) {
  const std::vector<std::vector<std::string>> systems{kBaseline, kSystem, kBaseline};
  std::vector<std::unique_ptr<Scorer>> scorers;
  const auto stats = statistics_of("bleu", scorers, systems);
  const size_t samples = 200, n = kRefs.size();
  const PairedTest test{PairedTest::bootstrap, samples, 99, 2};
  const auto results = paired_test({scorers[0].get()}, {{stats[0]}, {stats[1]}, {stats[2]}}, test);
  const auto idx = NumpyGenerator(99).integers(static_cast<uint32_t>(n), samples * n);
  auto resampled = [&](const std::vector<std::string>& system) {
    std::vector<double> out;
    for (size_t r = 0; r < samples; ++r) {
      std::vector<std::string> hyps, refs;
      for (size_t j = 0; j < n; ++j) {
        hyps.push_back(system[idx[r * n + j]]);
        refs.push_back(kRefs[idx[r * n + j]]);
      }
      out.push_back(corpus_score("bleu", hyps, refs));
    }
    return out;
  };
  const auto base = resampled(kBaseline), other = resampled(kSystem);
  std::vector<double> diffs(samples);
  for (size_t r = 0; r < samples; ++r) diffs[r] = std::abs(other[r] - base[r]);
  const double mean = std::accumulate(diffs.begin(), diffs.end(), 0.0) / samples;
  const double actual = std::abs(corpus_score("bleu", kSystem, kRefs) - corpus_score("bleu", kBaseline, kRefs));
  const auto above = std::count_if(diffs.begin(), diffs.end(), [&](double d) { return d - mean > actual; });
  EXPECT_DOUBLE_EQ(*results[1][0].p_value, (above + 1.0) / (samples + 1.0));
  EXPECT_NEAR(results[1][0].score, corpus_score("bleu", kSystem, kRefs), 1e-12);
  EXPECT_NEAR(results[1][0].estimate->mean, estimate_ci(other).mean, 1e-9);
  EXPECT_NEAR(results[1][0].estimate->ci, estimate_ci(other).ci, 1e-9);
  EXPECT_NEAR(results[0][0].estimate->mean, estimate_ci(base).mean, 1e-9);
  EXPECT_FALSE(results[0][0].p_value.has_value());
  // A system equal to the baseline: every difference is 0, none above 0, so p = 1 / (samples + 1)
  // (the package's formula, applied as it is).
  EXPECT_DOUBLE_EQ(*results[2][0].p_value, 1.0 / (samples + 1.0));
}

TEST(Significance, ApproximateRandomizationSwapsTheSegmentsOfEachTrial) {
  for (const std::string metric : {"bleu", "chrf", "ter"}) {
    std::vector<std::unique_ptr<Scorer>> scorers;
    const auto stats = statistics_of(metric, scorers, {kBaseline, kSystem});
    const size_t trials = 100, n = kRefs.size();
    const auto results = paired_test({scorers[0].get()}, {{stats[0]}, {stats[1]}},
                                     {PairedTest::randomization, trials, 5, 2});
    const auto swap = NumpyGenerator(5).booleans(trials * n);
    const double actual =
        std::abs(corpus_score(metric, kBaseline, kRefs) - corpus_score(metric, kSystem, kRefs));
    int above = 0;
    for (size_t t = 0; t < trials; ++t) {
      std::vector<std::string> a, b;
      for (size_t i = 0; i < n; ++i) {
        a.push_back(swap[t * n + i] != 0 ? kBaseline[i] : kSystem[i]);
        b.push_back(swap[t * n + i] != 0 ? kSystem[i] : kBaseline[i]);
      }
      above += std::abs(corpus_score(metric, a, kRefs) - corpus_score(metric, b, kRefs)) > actual;
    }
    EXPECT_DOUBLE_EQ(*results[1][0].p_value, (above + 1.0) / (trials + 1.0)) << metric;
    EXPECT_FALSE(results[1][0].estimate.has_value());
  }
}

TEST(Report, FancyGridAsTabulateDrawsIt) {
  // Widths: max(header + 2, cells): 8 and 7; the first column flush right, the others centred
  // with an odd space on the right; a two-line cell makes a two-line row.
  const std::string table = fancy_grid({"System", "BLEU"}, {{"a", "10.0"}, {"long.txt", "9.5\n(p = 1)"}});
  EXPECT_EQ(table,
            "╒══════════╤═════════╕\n"
            "│   System │  BLEU   │\n"
            "╞══════════╪═════════╡\n"
            "│        a │  10.0   │\n"
            "├──────────┼─────────┤\n"
            "│ long.txt │   9.5   │\n"
            "│          │ (p = 1) │\n"
            "╘══════════╧═════════╛\n");
}

}  // namespace
}  // namespace fairseq_cpp::scoring
