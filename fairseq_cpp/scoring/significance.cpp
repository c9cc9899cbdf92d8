#include "fairseq_cpp/scoring/significance.h"

#include <algorithm>
#include <cmath>

#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/data/binarizer.h"
#include "fairseq_cpp/scoring/numpy_random.h"

namespace fairseq_cpp::scoring {
namespace {

// Several statistics tables side by side: row i holds segment i's statistics of every table.
struct WideTable {
  size_t width = 0;
  size_t segments = 0;
  std::vector<double> rows;
  std::vector<size_t> offsets;  // where each table's columns start
};

WideTable side_by_side(const std::vector<const SegmentStatistics*>& tables) {
  WideTable t;
  t.segments = tables.empty() ? 0 : tables[0]->segments();
  for (const SegmentStatistics* s : tables) {
    if (s->segments() != t.segments) raise<UserError>("statistics of {} and {} segments", s->segments(), t.segments);
    t.offsets.push_back(t.width);
    t.width += s->width;
  }
  t.rows.resize(t.segments * t.width);
  for (size_t k = 0; k < tables.size(); ++k) {
    const SegmentStatistics& s = *tables[k];
    for (size_t i = 0; i < t.segments; ++i)
      std::copy_n(s.values.begin() + static_cast<std::ptrdiff_t>(i * s.width), s.width,
                  t.rows.begin() + static_cast<std::ptrdiff_t>(i * t.width + t.offsets[k]));
  }
  return t;
}

// sums[r * width + c]: the sum of column c over the segments indices[r * segments ...] of
// resample r, for `samples` resamples.
std::vector<double> resample_sums(const WideTable& t, const std::vector<uint32_t>& indices, size_t samples,
                                  int workers) {
  // A block of columns at a time, so that its part of the table stays in the core's cache while
  // every resample reads its rows.
  // The table by blocks of columns (the last one padded with zeros).
  constexpr size_t kBlock = 16;
  const size_t blocks = (t.width + kBlock - 1) / kBlock;
  std::vector<double> table(blocks * t.segments * kBlock, 0.0);
  for (size_t i = 0; i < t.segments; ++i)
    for (size_t c = 0; c < t.width; ++c) table[((c / kBlock) * t.segments + i) * kBlock + c % kBlock] = t.rows[i * t.width + c];
  std::vector<double> sums(samples * t.width, 0.0);
  data::parallel_chunks(samples, workers, [&](size_t begin, size_t end, int) {
    for (size_t b = 0; b < blocks; ++b) {
      const double* block = table.data() + b * t.segments * kBlock;
      const size_t first = b * kBlock, width = std::min(kBlock, t.width - first);
      for (size_t r = begin; r < end; ++r) {
        double acc[kBlock] = {};
        const uint32_t* idx = indices.data() + r * t.segments;
        for (size_t j = 0; j < t.segments; ++j) {
          const double* row = block + static_cast<size_t>(idx[j]) * kBlock;
          for (size_t c = 0; c < kBlock; ++c) acc[c] += row[c];
        }
        std::copy_n(acc, width, sums.data() + r * t.width + first);
      }
    }
  });
  return sums;
}

// The sums of the rows selected in each trial: sums[r * width + c] = sum over segments i with
// selected[r * segments + i] of column c.
std::vector<double> selected_sums(const WideTable& t, const std::vector<uint8_t>& selected, size_t trials,
                                  int workers) {
  std::vector<double> sums(trials * t.width, 0.0);
  data::parallel_chunks(trials, workers, [&](size_t begin, size_t end, int) {
    for (size_t r = begin; r < end; ++r) {
      double* acc = sums.data() + r * t.width;
      const uint8_t* sel = selected.data() + r * t.segments;
      for (size_t i = 0; i < t.segments; ++i) {
        if (sel[i] == 0) continue;
        const double* row = t.rows.data() + i * t.width;
        for (size_t c = 0; c < t.width; ++c) acc[c] += row[c];
      }
    }
  });
  return sums;
}

std::vector<double> totals(const SegmentStatistics& s) {
  std::vector<double> out(s.width, 0.0);
  for (size_t i = 0; i < s.segments(); ++i)
    for (size_t c = 0; c < s.width; ++c) out[c] += s.values[i * s.width + c];
  return out;
}

// The score of each resample of one table's columns (those at `offset`, `width` of them).
std::vector<double> scores_of(const Scorer& metric, const std::vector<double>& sums, size_t samples,
                              size_t sums_width, size_t offset, size_t width) {
  std::vector<double> scores(samples);
  std::vector<double> stats(width);
  for (size_t r = 0; r < samples; ++r) {
    std::copy_n(sums.begin() + static_cast<std::ptrdiff_t>(r * sums_width + offset), width, stats.begin());
    scores[r] = metric.value_from(stats);
  }
  return scores;
}

double mean_of(const std::vector<double>& values) {
  long double sum = 0;
  for (double v : values) sum += v;
  return values.empty() ? 0.0 : static_cast<double>(sum / static_cast<long double>(values.size()));
}

// multeval's p-value: (number of resampled statistics above the actual one + 1) / (samples + 1).
double p_value(const std::vector<double>& statistics, double actual) {
  const auto above = std::count_if(statistics.begin(), statistics.end(), [&](double s) { return s > actual; });
  return static_cast<double>(above + 1) / static_cast<double>(statistics.size() + 1);
}

std::vector<uint32_t> bootstrap_indices(size_t segments, size_t samples, uint64_t seed) {
  if (segments > UINT32_MAX) raise<UserError>("cannot resample more than {} segments", UINT32_MAX);
  return NumpyGenerator(seed).integers(static_cast<uint32_t>(segments), samples * segments);
}

}  // namespace

std::vector<SegmentStatistics> score_systems(const std::vector<Scorer*>& scorers,
                                             const std::vector<std::vector<std::string>>& systems,
                                             const std::vector<std::vector<std::string>>& references, int workers) {
  const size_t n = systems.empty() ? 0 : systems[0].size();
  std::vector<std::vector<std::vector<double>>> per_segment(n);  // [segment][system]
  data::parallel_chunks(n, workers, [&](size_t begin, size_t end, int) {
    std::vector<std::string_view> hyps(systems.size()), refs(references.size());
    for (size_t i = begin; i < end; ++i) {
      for (size_t s = 0; s < systems.size(); ++s) hyps[s] = systems[s][i];
      for (size_t k = 0; k < references.size(); ++k) refs[k] = references[k][i];
      per_segment[i] = scorers[0]->systems_statistics(hyps, refs);
    }
  });
  std::vector<SegmentStatistics> out(systems.size());
  for (size_t s = 0; s < systems.size(); ++s) {
    out[s].width = scorers[s]->statistics().size();
    out[s].values.reserve(n * out[s].width);
    for (const auto& segment : per_segment) {
      scorers[s]->record(segment[s], references.size());
      out[s].values.insert(out[s].values.end(), segment[s].begin(), segment[s].end());
    }
  }
  return out;
}

Estimate estimate_ci(std::vector<double> scores) {
  if (scores.empty()) return {};
  std::sort(scores.begin(), scores.end());
  const size_t lower = scores.size() / 40, upper = scores.size() - lower - 1;
  return {mean_of(scores), 0.5 * (scores[upper] - scores[lower])};
}

std::vector<double> bootstrap_scores(const Scorer& metric, const SegmentStatistics& statistics, size_t samples,
                                     uint64_t seed, int workers) {
  const WideTable t = side_by_side({&statistics});
  const auto sums = resample_sums(t, bootstrap_indices(t.segments, samples, seed), samples, workers);
  return scores_of(metric, sums, samples, t.width, 0, t.width);
}

std::vector<std::vector<TestResult>> paired_test(const std::vector<const Scorer*>& metrics,
                                                 const std::vector<SystemStatistics>& systems, const PairedTest& test) {
  if (systems.size() < 2) raise<UserError>("a paired test needs a baseline and at least one system");
  for (const SystemStatistics& s : systems)
    if (s.size() != metrics.size()) raise<UserError>("{} statistics tables for {} metrics", s.size(), metrics.size());
  const size_t n_metrics = metrics.size();
  std::vector<std::vector<TestResult>> results(systems.size(), std::vector<TestResult>(n_metrics));
  for (size_t s = 0; s < systems.size(); ++s)
    for (size_t m = 0; m < n_metrics; ++m) results[s][m].score = metrics[m]->value_from(totals(systems[s][m]));

  if (test.kind == PairedTest::bootstrap) {
    // Every system is resampled with the same indices (the package seeds each test alike).
    std::vector<const SegmentStatistics*> tables;
    for (const SystemStatistics& s : systems)
      for (const SegmentStatistics& m : s) tables.push_back(&m);
    const WideTable t = side_by_side(tables);
    const auto sums = resample_sums(t, bootstrap_indices(t.segments, test.samples, test.seed), test.samples,
                                    test.workers);
    for (size_t m = 0; m < n_metrics; ++m) {
      const size_t width = systems[0][m].width;
      const auto baseline = scores_of(*metrics[m], sums, test.samples, t.width, t.offsets[m], width);
      results[0][m].estimate = estimate_ci(baseline);
      for (size_t s = 1; s < systems.size(); ++s) {
        const auto scores = scores_of(*metrics[m], sums, test.samples, t.width, t.offsets[s * n_metrics + m], width);
        std::vector<double> diffs(test.samples);
        for (size_t r = 0; r < test.samples; ++r) diffs[r] = std::abs(scores[r] - baseline[r]);
        const double mean = mean_of(diffs);
        for (double& d : diffs) d -= mean;
        TestResult& result = results[s][m];
        result.estimate = estimate_ci(scores);
        result.p_value = p_value(diffs, std::abs(results[0][m].score - result.score));
      }
    }
    return results;
  }

  // Approximate randomisation: in each trial, each segment's pair of translations is swapped
  // or not; the same swaps for every system. With d_i = baseline_i - system_i over the swapped
  // segments, the shuffled systems sum to system + d and baseline - d.
  const size_t segments = systems[0][0].segments();
  const auto swapped = NumpyGenerator(test.seed).booleans(test.samples * segments);
  std::vector<SegmentStatistics> differences;
  differences.reserve((systems.size() - 1) * n_metrics);
  for (size_t s = 1; s < systems.size(); ++s) {
    for (size_t m = 0; m < n_metrics; ++m) {
      SegmentStatistics d = systems[0][m];
      for (size_t k = 0; k < d.values.size(); ++k) d.values[k] -= systems[s][m].values[k];
      differences.push_back(std::move(d));
    }
  }
  std::vector<const SegmentStatistics*> tables;
  for (const SegmentStatistics& d : differences) tables.push_back(&d);
  const WideTable t = side_by_side(tables);
  const auto sums = selected_sums(t, swapped, test.samples, test.workers);
  for (size_t s = 1; s < systems.size(); ++s) {
    for (size_t m = 0; m < n_metrics; ++m) {
      const size_t offset = t.offsets[(s - 1) * n_metrics + m], width = systems[0][m].width;
      const auto baseline_total = totals(systems[0][m]), system_total = totals(systems[s][m]);
      std::vector<double> a(width), b(width), deltas(test.samples);
      for (size_t r = 0; r < test.samples; ++r) {
        for (size_t c = 0; c < width; ++c) {
          const double d = sums[r * t.width + offset + c];
          a[c] = system_total[c] + d;
          b[c] = baseline_total[c] - d;
        }
        deltas[r] = std::abs(metrics[m]->value_from(a) - metrics[m]->value_from(b));
      }
      results[s][m].p_value = p_value(deltas, std::abs(results[0][m].score - results[s][m].score));
    }
  }
  return results;
}

}  // namespace fairseq_cpp::scoring
