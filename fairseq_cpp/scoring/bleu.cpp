// sacreBLEU's BLEU: statistics [hyp_len, ref_len, correct 1..4, total 1..4] per segment, the
// reference length closest to the hypothesis's (the shorter on a tie), n-gram counts clipped by
// the largest count in any reference, and smoothing by exp, floor, add-k or none.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "fairseq_cpp/config/config.h"
#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/scoring/metrics.h"
#include "fairseq_cpp/scoring/ngrams.h"
#include "fairseq_cpp/scoring/tokenizers.h"
#include "fairseq_cpp/scoring/unicode.h"

namespace fairseq_cpp::scoring {
namespace {

constexpr int kOrder = 4;

struct Smoothing {
  std::string method;
  std::optional<double> value;  // floor: 0.1, add-k: 1 unless given; none for exp and none
};

Smoothing smoothing(const ScoringOptions& o) {
  static const std::vector<std::string> kMethods{"none", "floor", "add-k", "exp"};
  if (std::find(kMethods.begin(), kMethods.end(), o.smooth_method) == kMethods.end()) {
    std::string guess = config::nearest(o.smooth_method, kMethods);
    raise<UserError>("unknown smoothing method `{}`{}; the methods are none, floor, add-k, exp", o.smooth_method,
                     guess.empty() ? "" : fmt::format(" (did you mean `{}`?)", guess));
  }
  Smoothing s{o.smooth_method, std::nullopt};
  if (s.method == "floor") s.value = o.smooth_value.value_or(0.1);
  if (s.method == "add-k") s.value = o.smooth_value.value_or(1.0);
  return s;
}

class Bleu : public Scorer {
 public:
  explicit Bleu(const ScoringOptions& o)
      : Scorer(2 + 2 * kOrder), tokenizer_(tokenizer_from_name(o.tokenize)), lowercase_(o.lowercase),
        smoothing_(smoothing(o)) {}

  std::vector<std::vector<double>> systems_statistics(const std::vector<std::string_view>& hypotheses,
                                                      const std::vector<std::string_view>& references) const override {
    // The texts outlive the word ids and the n-gram keys made from them.
    std::vector<std::u32string> texts;
    texts.reserve(references.size() + hypotheses.size());
    SymbolIds ids;
    std::vector<double> ref_lengths;
    std::vector<std::u32string> ref_ids;
    for (std::string_view reference : references) {
      texts.push_back(preprocess(reference));
      const auto words = unicode::split(texts.back());
      ref_lengths.push_back(static_cast<double>(words.size()));
      ref_ids.push_back(ids.of(words));
    }
    // Each reference n-gram's count is the largest over the references.
    std::vector<NgramCounts> ref_counts(kOrder), per_reference(ref_ids.size());
    for (int n = 1; n <= kOrder; ++n) {
      for (size_t k = 0; k < ref_ids.size(); ++k) per_reference[k] = count_ngrams(ref_ids[k], n, kWordIdBits, ids);
      ref_counts[n - 1] = max_counts(per_reference);
    }
    std::vector<std::vector<double>> out;
    out.reserve(hypotheses.size());
    for (std::string_view hypothesis : hypotheses) {
      texts.push_back(preprocess(hypothesis));
      const auto hyp_words = unicode::split(texts.back());
      const auto hyp_len = static_cast<double>(hyp_words.size());
      double ref_len = -1, closest_diff = -1;  // the closest length, the shorter on a tie
      for (double len : ref_lengths) {
        const double diff = std::abs(hyp_len - len);
        if (closest_diff < 0 || diff < closest_diff) {
          closest_diff = diff;
          ref_len = len;
        } else if (diff == closest_diff && len < ref_len) {
          ref_len = len;
        }
      }
      const std::u32string hyp_ids = ids.of(hyp_words);
      std::vector<double> stats(2 + 2 * kOrder, 0.0);
      stats[0] = hyp_len;
      stats[1] = ref_len;
      for (int n = 1; n <= kOrder; ++n) {
        const Overlap o = overlap(count_ngrams(hyp_ids, n, kWordIdBits, ids), ref_counts[n - 1]);
        stats[1 + n] = o.matched;
        stats[1 + kOrder + n] = o.hyp_total;
      }
      out.push_back(std::move(stats));
    }
    return out;
  }

  Score score_from(const std::vector<double>& stats) const override {
    std::vector<double> precisions(kOrder, 0.0);
    double bp = 1.0;
    const double score = compute(stats, precisions, bp);
    const double sys_len = stats[0], ref_len = stats[1];
    const double ratio = ref_len != 0 ? sys_len / ref_len : 0.0;
    std::string verbose = fmt::format("{:.1f}/{:.1f}/{:.1f}/{:.1f} (BP = {:.3f} ratio = {:.3f} hyp_len = {} ref_len = {})",
                                      precisions[0], precisions[1], precisions[2], precisions[3], bp, ratio,
                                      static_cast<int64_t>(sys_len), static_cast<int64_t>(ref_len));
    return {"BLEU", score, std::move(verbose)};
  }

  double value_from(const std::vector<double>& stats) const override {
    std::vector<double> precisions(kOrder, 0.0);
    double bp = 1.0;
    return compute(stats, precisions, bp);
  }

 private:
  // The score, with the n-gram precisions and the brevity penalty behind it.
  double compute(const std::vector<double>& stats, std::vector<double>& precisions, double& bp) const {
    const double sys_len = stats[0], ref_len = stats[1];
    std::vector<double> correct(stats.begin() + 2, stats.begin() + 2 + kOrder);
    std::vector<double> total(stats.begin() + 2 + kOrder, stats.end());
    bp = 1.0;
    if (sys_len < ref_len) bp = sys_len > 0 ? std::exp(1 - ref_len / sys_len) : 0.0;
    double score = 0;
    bool any_correct = false;
    for (double c : correct) any_correct = any_correct || c != 0;
    if (any_correct) {
      double smooth_mteval = 1;
      for (int n = 1; n <= kOrder; ++n) {
        if (smoothing_.method == "add-k" && n > 1) {
          correct[n - 1] += *smoothing_.value;
          total[n - 1] += *smoothing_.value;
        }
        if (total[n - 1] == 0) break;
        if (correct[n - 1] == 0) {
          if (smoothing_.method == "exp") {
            smooth_mteval *= 2;
            precisions[n - 1] = 100.0 / (smooth_mteval * total[n - 1]);
          } else if (smoothing_.method == "floor") {
            precisions[n - 1] = 100.0 * *smoothing_.value / total[n - 1];
          }
        } else {
          precisions[n - 1] = 100.0 * correct[n - 1] / total[n - 1];
        }
      }
      double log_sum = 0;
      for (double p : precisions) log_sum += p > 0 ? std::log(p) : -9999999999.0;
      score = bp * std::exp(log_sum / kOrder);
    }
    return score;
  }

 protected:
  std::string signature_fields() const override {
    std::string smooth = smoothing_.method;
    if (smoothing_.value) smooth += fmt::format("[{:.2f}]", *smoothing_.value);
    return fmt::format("case:{}|eff:no|tok:{}|smooth:{}", lowercase_ ? "lc" : "mixed", tokenizer_name(tokenizer_),
                       smooth);
  }

 private:
  // sacreBLEU's _preprocess_segment: lowercase, rstrip, tokenize.
  std::u32string preprocess(std::string_view line) const {
    std::u32string text = unicode::decode(line);
    if (lowercase_) text = unicode::lower(text);
    return tokenize(tokenizer_, unicode::rstrip(std::u32string_view(text)));
  }

  Tokenizer tokenizer_;
  bool lowercase_;
  Smoothing smoothing_;
};

}  // namespace

std::unique_ptr<Scorer> make_bleu(const ScoringOptions& options) { return std::make_unique<Bleu>(options); }

}  // namespace fairseq_cpp::scoring
