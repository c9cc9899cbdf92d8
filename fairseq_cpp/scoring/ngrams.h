#pragma once
// N-gram counting shared by the metrics: word n-grams of space-separated tokens and character
// n-grams of code points, keyed by their text.

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace fairseq_cpp::scoring {

using NgramCounts = std::unordered_map<std::u32string, double>;

// Word n-grams of one order over `words` (an n-gram's words joined by single spaces).
NgramCounts word_ngrams(const std::vector<std::u32string_view>& words, int order);
// Character n-grams of one order.
NgramCounts char_ngrams(std::u32string_view text, int order);

// sum over `hyp` of min(count, count in `ref`), and the sums of the counts of both.
struct Overlap {
  double matched = 0, hyp_total = 0, ref_total = 0;
};
Overlap overlap(const NgramCounts& hyp, const NgramCounts& ref);

}  // namespace fairseq_cpp::scoring
