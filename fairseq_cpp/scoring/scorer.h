#pragma once
// Corpus metrics as sacreBLEU 2.x computes them, behind one streaming interface: add a
// hypothesis with its references, read the sufficient statistics (sums over segments), merge
// another worker's, and compute the score and sacreBLEU's signature from them.
//
//   ScoringOptions o;  o.tokenize = "intl";
//   auto bleu = make_scorer("bleu", o);
//   bleu->add("Hello, world!", {"Hello world!", "Hi, world!"});
//   bleu->merge(other_worker_statistics);              // sums, e.g. after an all-reduce
//   fmt::print("{}\n", bleu->format(bleu->score()));   // "BLEU|nrefs:2|case:mixed|... = 53.73 ..."

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fairseq_cpp::scoring {

// The version of sacreBLEU whose numbers and signatures we reproduce (tools/requirements.txt).
inline constexpr const char* kSacrebleuVersion = "2.5.1";

// sacreBLEU's options, by its command-line names.
struct ScoringOptions {
  std::string tokenize = "13a";             // BLEU: 13a | intl | zh | char | none
  bool lowercase = false;                   // BLEU: compare lowercased text
  std::string smooth_method = "exp";        // BLEU: exp | floor | add-k | none
  std::optional<double> smooth_value;       // BLEU: floor's and add-k's value (defaults 0.1 and 1)
  int chrf_char_order = 6;                  // chrF: character n-gram order
  int chrf_word_order = 0;                  // chrF: word n-gram order (2 = chrF++)
  int chrf_beta = 2;                        // chrF: recall's weight
  bool chrf_whitespace = false;             // chrF: keep whitespace in character n-grams
  bool chrf_lowercase = false;              // chrF: compare lowercased text
  bool chrf_eps_smoothing = false;          // chrF: chrF++.py's smoothing instead of effective order
  bool ter_case_sensitive = false;          // TER: keep case (TER lowercases by default)
  bool ter_normalized = false;              // TER: Tercom's normalisation (punctuation apart, entities)
  bool ter_no_punct = false;                // TER: remove punctuation
  bool ter_asian_support = false;           // TER: CJK characters and punctuation apart (with the two above)
};

// A score as sacreBLEU prints it: "<name>|<signature> = <score> <verbose>".
struct Score {
  std::string name;     // "BLEU", "chrF2", "chrF2++", "TER"
  double score = 0;     // 0..100
  std::string verbose;  // BLEU: "61.1/36.4/23.9/15.7 (BP = 1.000 ratio = ...)"; otherwise empty
  double mean = -1;     // bootstrap estimate of the true mean (--confidence); printed when above 0
  double ci = -1;       // half the width of its 95% confidence interval
};

class Scorer {
 public:
  virtual ~Scorer() = default;

  // One segment. Trailing whitespace is the caller's (sacreBLEU's command line strips it).
  void add(std::string_view hypothesis, const std::vector<std::string_view>& references);
  void add(const std::string& hypothesis, const std::vector<std::string>& references);
  // Adds one segment's statistics, computed elsewhere by segment_statistics with `references` references.
  void record(const std::vector<double>& segment, size_t references);

  // The statistics summed over the segments added (and merged) so far.
  const std::vector<double>& statistics() const { return totals_; }
  // One segment's statistics, as add() sums them.
  std::vector<double> segment_statistics(std::string_view hypothesis,
                                         const std::vector<std::string_view>& references) const {
    return systems_statistics({hypothesis}, references)[0];
  }
  // The statistics of several systems' hypotheses of one segment, each as segment_statistics
  // gives it; the references' share of the work is done once.
  virtual std::vector<std::vector<double>> systems_statistics(const std::vector<std::string_view>& hypotheses,
                                                              const std::vector<std::string_view>& references) const = 0;
  // Adds another scorer's statistics (same metric and options), e.g. another worker's.
  void merge(const std::vector<double>& statistics);

  // The score of `statistics` (of any set of segments: the corpus, a resample, ...).
  virtual Score score_from(const std::vector<double>& statistics) const = 0;
  Score score() const { return score_from(totals_); }
  // score_from(statistics).score, without the verbose part (for resamples).
  virtual double value_from(const std::vector<double>& statistics) const { return score_from(statistics).score; }
  // sacreBLEU's signature without the metric's name: "nrefs:1|case:mixed|...|version:2.5.1"; the
  // fields of a statistical test, e.g. "bs:1000|seed:12345", come after nrefs.
  std::string signature(const std::string& test_fields = "") const;
  // sacreBLEU's text line: "<name>|<signature> = <score with `width` decimals> <verbose>", with
  // " (μ = <mean> ± <ci>)" after the score when the score has a bootstrap estimate.
  std::string format(const Score& score, int width = 2, const std::string& test_fields = "") const;

 protected:
  explicit Scorer(size_t statistics_size) : totals_(statistics_size, 0.0) {}
  // The metric's signature fields after nrefs: "case:mixed|eff:no|tok:13a|smooth:exp".
  virtual std::string signature_fields() const = 0;

 private:
  std::vector<double> totals_;
  int nrefs_ = 0;  // references per segment; -1 once it varies ("var")
};

// The metrics of fairseq-cpp-eval score's --metric.
const std::vector<std::string>& metric_names();
// "bleu", "chrf", "chrf++", "ter"; throws UserError for an unknown metric or option, with the nearest name.
std::unique_ptr<Scorer> make_scorer(const std::string& metric, const ScoringOptions& options);

}  // namespace fairseq_cpp::scoring
