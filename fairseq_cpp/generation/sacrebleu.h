#pragma once
// Corpus BLEU and chrF exactly as sacreBLEU 2.x computes them with its defaults (one reference):
// BLEU with the 13a tokenizer and exp smoothing, chrF with character order 6, word order 0,
// beta 2, whitespace removed. Lines are compared as given (the caller strips them as sacreBLEU's
// command line does: trailing whitespace removed).
//
//   BleuScore b = corpus_bleu(hyps, refs);    // b.score 30.2432...
//   format_bleu(b)   // "BLEU|nrefs:1|...|version:2.5.1 = 30.24 61.1/36.4/23.9/15.7 (BP = 1.000 ...)"

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace fairseq_cpp::generation {

// The version of sacreBLEU whose numbers and signatures we reproduce.
inline constexpr const char* kSacrebleuVersion = "2.5.1";

// sacreBLEU's 13a tokenizer (mteval-v13a): "Hello, world!" => "Hello , world !".
std::string tokenize_13a(std::string_view line);

struct BleuScore {
  double score = 0;                    // 0..100
  std::array<int64_t, 4> correct{};    // matched n-grams, n = 1..4 (clipped by the reference)
  std::array<int64_t, 4> total{};      // hypothesis n-grams
  std::array<double, 4> precisions{};  // 0..100, smoothed
  double bp = 1;                       // brevity penalty
  int64_t sys_len = 0;                 // hypothesis tokens
  int64_t ref_len = 0;                 // reference tokens
};

// Corpus BLEU of `hypotheses` against one reference each (same count: the caller checks).
BleuScore corpus_bleu(const std::vector<std::string>& hypotheses, const std::vector<std::string>& references);

// sacreBLEU's text line: "<signature> = 30.24 61.1/36.4/23.9/15.7 (BP = 1.000 ratio = 1.016
// hyp_len = 12302 ref_len = 12106)".
std::string format_bleu(const BleuScore& score);
std::string bleu_signature();

struct ChrfScore {
  double score = 0;                 // 0..100
  std::vector<int64_t> statistics;  // per character order 1..6: hypothesis, reference, matched n-grams
};

// Corpus chrF2 of `hypotheses` against one reference each.
ChrfScore corpus_chrf(const std::vector<std::string>& hypotheses, const std::vector<std::string>& references);

// "<signature> = 54.43".
std::string format_chrf(const ChrfScore& score);
std::string chrf_signature();

// Python's str.rstrip(): drops trailing Unicode whitespace (text must be valid UTF-8).
std::string_view rstrip(std::string_view text);

}  // namespace fairseq_cpp::generation
