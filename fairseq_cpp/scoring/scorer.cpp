#include "fairseq_cpp/scoring/scorer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "fairseq_cpp/config/config.h"
#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/scoring/metrics.h"

namespace fairseq_cpp::scoring {

void Scorer::add(std::string_view hypothesis, const std::vector<std::string_view>& references) {
  if (references.empty()) raise<UserError>("a segment needs at least one reference");
  record(segment_statistics(hypothesis, references), references.size());
}

void Scorer::record(const std::vector<double>& segment, size_t references) {
  const int nrefs = static_cast<int>(references);
  nrefs_ = nrefs_ == 0 || nrefs_ == nrefs ? nrefs : -1;
  merge(segment);
}

void Scorer::add(const std::string& hypothesis, const std::vector<std::string>& references) {
  std::vector<std::string_view> views(references.begin(), references.end());
  add(std::string_view(hypothesis), views);
}

void Scorer::merge(const std::vector<double>& statistics) {
  if (statistics.size() != totals_.size())
    raise<UserError>("cannot merge {} statistics into a scorer of {}", statistics.size(), totals_.size());
  for (size_t i = 0; i < totals_.size(); ++i) totals_[i] += statistics[i];
}

std::string Scorer::signature(const std::string& test_fields) const {
  const std::string nrefs = nrefs_ < 0 ? "var" : std::to_string(nrefs_);
  return fmt::format("nrefs:{}|{}{}|version:{}", nrefs, test_fields.empty() ? "" : test_fields + "|",
                     signature_fields(), kSacrebleuVersion);
}

std::string Scorer::format(const Score& score, int width, const std::string& test_fields) const {
  std::string line = fmt::format("{}|{} = {:.{}f}", score.name, signature(test_fields), score.score, width);
  if (score.mean > 0) line += fmt::format(" (μ = {:.{}f} ± {:.{}f})", score.mean, width, score.ci, width);
  if (!score.verbose.empty()) line += " " + score.verbose;
  return line;
}

const std::vector<std::string>& metric_names() {
  static const std::vector<std::string> kNames{"bleu", "chrf", "chrf++", "ter"};
  return kNames;
}

std::unique_ptr<Scorer> make_scorer(const std::string& metric, const ScoringOptions& options) {
  if (metric == "bleu") return make_bleu(options);
  if (metric == "chrf") return make_chrf(options, options.chrf_word_order);
  if (metric == "chrf++") return make_chrf(options, options.chrf_word_order > 0 ? options.chrf_word_order : 2);
  if (metric == "ter") return make_ter(options);
  std::string guess = config::nearest(metric, metric_names());
  raise<UserError>("unknown metric `{}`{}; the metrics are {}", metric,
                   guess.empty() ? "" : fmt::format(" (did you mean `{}`?)", guess),
                   fmt::format("{}", fmt::join(metric_names(), ", ")));
}

}  // namespace fairseq_cpp::scoring
