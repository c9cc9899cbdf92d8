#pragma once
// sacreBLEU's statistical tests (its significance.py), computed from per-segment sufficient
// statistics: a bootstrap confidence interval of one system, and paired bootstrap resampling or
// paired approximate randomisation of several systems against a baseline. The resamples come
// from numpy's generator with the package's seed, so the p-values are the package's.
//
//   std::vector<SystemStatistics> systems = ...;          // [baseline, system 1, ...], one table per metric
//   auto rows = paired_test(metrics, systems, {PairedTest::bootstrap, 1000, 12345, 2});
//   rows[1][0].p_value                                     // system 1 against the baseline, first metric

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "fairseq_cpp/scoring/scorer.h"

namespace fairseq_cpp::scoring {

// One system's statistics under one metric: segment i's are values[i * width, (i + 1) * width).
struct SegmentStatistics {
  size_t width = 0;
  std::vector<double> values;
  size_t segments() const { return width == 0 ? 0 : values.size() / width; }
};
// Per metric, in the order of the metrics.
using SystemStatistics = std::vector<SegmentStatistics>;

// Each segment's statistics of each system under one metric: systems[s] (its hypotheses) under
// scorers[s] (one scorer per system, all of the same metric and options), on `workers` threads.
// Each scorer also records its system's, so its score() and signature() are the corpus's.
std::vector<SegmentStatistics> score_systems(const std::vector<Scorer*>& scorers,
                                             const std::vector<std::vector<std::string>>& systems,
                                             const std::vector<std::vector<std::string>>& references, int workers);

// sacreBLEU's estimate_ci: the mean of the resampled scores and half the width of their central
// 95% (from the n/40-th smallest to the n/40-th largest).
struct Estimate {
  double mean = 0;
  double ci = 0;
};
Estimate estimate_ci(std::vector<double> scores);

// The scores of `samples` bootstrap resamples (numpy's default_rng(seed).choice), as the
// package's --confidence computes them.
std::vector<double> bootstrap_scores(const Scorer& metric, const SegmentStatistics& statistics, size_t samples,
                                     uint64_t seed, int workers);

struct PairedTest {
  enum Kind { bootstrap, randomization } kind = bootstrap;
  size_t samples = 1000;  // resamples (bootstrap) or trials (randomization)
  uint64_t seed = 12345;  // SACREBLEU_SEED
  int workers = 1;        // threads
};

// One system's result under one metric.
struct TestResult {
  double score = 0;
  std::optional<double> p_value;  // against the baseline (not for the baseline itself)
  std::optional<Estimate> estimate;  // bootstrap: the resamples' mean and 95% CI
};

// result[system][metric] for `systems` (the baseline first) against systems[0]. `metrics` are
// the scorers whose statistics `systems` hold.
std::vector<std::vector<TestResult>> paired_test(const std::vector<const Scorer*>& metrics,
                                                 const std::vector<SystemStatistics>& systems, const PairedTest& test);

}  // namespace fairseq_cpp::scoring
