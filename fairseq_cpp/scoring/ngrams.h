#pragma once
// N-gram counting shared by the metrics. A sequence of symbols (code points, or word ids from
// SymbolIds) is a std::u32string; its n-grams of one order are packed into 128-bit keys, sorted
// and counted, so that two sequences' n-grams meet by a merge instead of a hash table of strings.
//
//   SymbolIds ids;   // one per segment: its hypothesis and references
//   std::u32string hyp = ids.of(hypothesis_words), ref = ids.of(reference_words);
//   Overlap o = overlap(count_ngrams(hyp, 2, kWordIdBits, ids), count_ngrams(ref, 2, kWordIdBits, ids));

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace fairseq_cpp::scoring {

// Bits a symbol takes in a packed n-gram: code points are below 2^21, word ids below 2^32.
inline constexpr int kCodePointBits = 21;
inline constexpr int kWordIdBits = 32;

// Ids for words (and for n-grams too long to pack): the same text gets the same id within one
// SymbolIds. The texts must outlive it.
class SymbolIds {
 public:
  char32_t id(std::u32string_view text);
  std::u32string of(const std::vector<std::u32string_view>& words);

 private:
  std::unordered_map<std::u32string_view, char32_t> ids_;
};

// Distinct n-grams of one order in increasing key order, each with how often it occurs.
using NgramKey = unsigned __int128;
struct NgramCounts {
  std::vector<NgramKey> keys;
  std::vector<double> counts;
  double total = 0;  // sum of counts
};
// The n-grams of `order` over `symbols`, each symbol taking `symbol_bits`. An order whose
// n-grams do not fit in 128 bits gets its keys from `long_ngrams` (the sequences compared must
// share it, and `symbols` must outlive it).
NgramCounts count_ngrams(std::u32string_view symbols, int order, int symbol_bits, SymbolIds& long_ngrams);

// For each n-gram, its largest count in any of `counts` (BLEU's clipping with several references).
NgramCounts max_counts(const std::vector<NgramCounts>& counts);

// sum over `hyp` of min(count, count in `ref`), and the sums of the counts of both.
struct Overlap {
  double matched = 0, hyp_total = 0, ref_total = 0;
};
Overlap overlap(const NgramCounts& hyp, const NgramCounts& ref);

}  // namespace fairseq_cpp::scoring
