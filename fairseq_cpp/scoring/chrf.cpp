// sacreBLEU's chrF and chrF++: per order [hypothesis n-grams, reference n-grams, matches], the
// character orders first, then the word orders (words with a leading or trailing ASCII
// punctuation mark split off); with several references, the one with the best sentence F-score.
#include <fmt/format.h>

#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/scoring/metrics.h"
#include "fairseq_cpp/scoring/ngrams.h"
#include "fairseq_cpp/scoring/unicode.h"

namespace fairseq_cpp::scoring {
namespace {

bool is_ascii_punctuation(char32_t c) {
  return (c >= U'!' && c <= U'/') || (c >= U':' && c <= U'@') || (c >= U'[' && c <= U'`') || (c >= U'{' && c <= U'~');
}

class Chrf : public Scorer {
 public:
  Chrf(const ScoringOptions& o, int word_order)
      : Scorer(3 * static_cast<size_t>(o.chrf_char_order + word_order)), char_order_(o.chrf_char_order),
        word_order_(word_order), beta_(o.chrf_beta), lowercase_(o.chrf_lowercase), whitespace_(o.chrf_whitespace),
        eps_smoothing_(o.chrf_eps_smoothing) {
    if (char_order_ < 0 || word_order_ < 0 || char_order_ + word_order_ < 1)
      raise<UserError>("chrF needs a character order and a word order of at least 0, not both 0 (got {} and {})",
                       char_order_, word_order_);
  }

  std::vector<std::vector<double>> systems_statistics(const std::vector<std::string_view>& hypotheses,
                                                      const std::vector<std::string_view>& references) const override {
    // Sized once: the n-gram keys of long orders point into these lines, which must not move.
    SymbolIds ids;
    std::vector<Line> refs(references.size());
    for (size_t k = 0; k < references.size(); ++k) fill(refs[k], references[k], ids);
    std::vector<Line> hyps(hypotheses.size());
    std::vector<std::vector<double>> out;
    out.reserve(hypotheses.size());
    for (size_t h = 0; h < hypotheses.size(); ++h) {
      const Line& hyp = fill(hyps[h], hypotheses[h], ids);
      std::vector<double> best;
      double best_f = -1.0;
      for (const Line& ref : refs) {
        std::vector<double> stats;
        stats.reserve(3 * hyp.counts.size());
        for (size_t i = 0; i < hyp.counts.size(); ++i) {
          const Overlap o = overlap(hyp.counts[i], ref.counts[i]);
          stats.push_back(ref.counts[i].total == 0 ? 0.0 : o.hyp_total);
          stats.push_back(o.ref_total);
          stats.push_back(o.matched);
        }
        const double f = f_score(stats);
        if (f > best_f) {
          best_f = f;
          best = std::move(stats);
        }
      }
      out.push_back(std::move(best));
    }
    return out;
  }

  Score score_from(const std::vector<double>& stats) const override {
    return {fmt::format("chrF{}{}", beta_, std::string(static_cast<size_t>(word_order_), '+')), f_score(stats), ""};
  }

 protected:
  std::string signature_fields() const override {
    return fmt::format("case:{}|eff:{}|nc:{}|nw:{}|space:{}", lowercase_ ? "lc" : "mixed",
                       eps_smoothing_ ? "no" : "yes", char_order_, word_order_, whitespace_ ? "yes" : "no");
  }

 private:
  // One line's symbols and their n-gram counts: character orders 1..char_order, then word
  // orders 1..word_order.
  struct Line {
    std::u32string text, chars, words;
    std::vector<NgramCounts> counts;
  };

  const Line& fill(Line& line, std::string_view utf8, SymbolIds& ids) const {
    line.text = unicode::decode(utf8);
    if (lowercase_) line.text = unicode::lower(line.text);
    line.counts.reserve(static_cast<size_t>(char_order_ + word_order_));
    if (whitespace_) {
      line.chars = line.text;
    } else {
      for (auto word : unicode::split(line.text)) line.chars.append(word);
    }
    for (int n = 1; n <= char_order_; ++n) line.counts.push_back(count_ngrams(line.chars, n, kCodePointBits, ids));
    if (word_order_ > 0) {
      std::vector<std::u32string_view> words;
      for (std::u32string_view w : unicode::split(line.text)) {
        if (w.size() == 1) {
          words.push_back(w);
        } else if (is_ascii_punctuation(w.back())) {
          words.push_back(w.substr(0, w.size() - 1));
          words.push_back(w.substr(w.size() - 1));
        } else if (is_ascii_punctuation(w.front())) {
          words.push_back(w.substr(0, 1));
          words.push_back(w.substr(1));
        } else {
          words.push_back(w);
        }
      }
      line.words = ids.of(words);
      for (int n = 1; n <= word_order_; ++n) line.counts.push_back(count_ngrams(line.words, n, kWordIdBits, ids));
    }
    return line;
  }

  double f_score(const std::vector<double>& stats) const {
    constexpr double kEps = 1e-16;
    const double factor = static_cast<double>(beta_) * beta_;
    const int order = char_order_ + word_order_;
    double score = 0, avg_prec = 0, avg_rec = 0;
    int effective_order = 0;
    for (int i = 0; i < order; ++i) {
      const double n_hyp = stats[3 * i], n_ref = stats[3 * i + 1], n_match = stats[3 * i + 2];
      const double prec = n_hyp > 0 ? n_match / n_hyp : kEps;
      const double rec = n_ref > 0 ? n_match / n_ref : kEps;
      const double denom = factor * prec + rec;
      score += denom > 0 ? (1 + factor) * prec * rec / denom : kEps;
      if (n_hyp > 0 && n_ref > 0) {
        avg_prec += prec;
        avg_rec += rec;
        ++effective_order;
      }
    }
    if (eps_smoothing_) return 100 * score / order;
    if (effective_order == 0) return 0.0;
    avg_prec /= effective_order;
    avg_rec /= effective_order;
    if (avg_prec + avg_rec == 0) return 0.0;
    return 100 * ((1 + factor) * avg_prec * avg_rec / (factor * avg_prec + avg_rec));
  }

  int char_order_, word_order_, beta_;
  bool lowercase_, whitespace_, eps_smoothing_;
};

}  // namespace

std::unique_ptr<Scorer> make_chrf(const ScoringOptions& options, int word_order) {
  return std::make_unique<Chrf>(options, word_order);
}

}  // namespace fairseq_cpp::scoring
