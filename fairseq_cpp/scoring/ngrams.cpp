#include "fairseq_cpp/scoring/ngrams.h"

#include <algorithm>

namespace fairseq_cpp::scoring {

char32_t SymbolIds::id(std::u32string_view text) {
  return ids_.emplace(text, static_cast<char32_t>(ids_.size())).first->second;
}

std::u32string SymbolIds::of(const std::vector<std::u32string_view>& words) {
  std::u32string out;
  out.reserve(words.size());
  for (std::u32string_view w : words) out.push_back(id(w));
  return out;
}

NgramCounts count_ngrams(std::u32string_view symbols, int order, int symbol_bits, SymbolIds& long_ngrams) {
  NgramCounts out;
  const size_t n = static_cast<size_t>(order);
  if (n == 0 || symbols.size() < n) return out;
  std::vector<NgramKey> all;
  all.reserve(symbols.size() - n + 1);
  if (order * symbol_bits <= 128) {
    // The key of the n symbols ending at j, rolled along: shift one in, mask the oldest out.
    const NgramKey mask = order * symbol_bits == 128 ? ~NgramKey{0} : (NgramKey{1} << (order * symbol_bits)) - 1;
    NgramKey key = 0;
    for (size_t j = 0; j < symbols.size(); ++j) {
      key = (key << symbol_bits | static_cast<NgramKey>(symbols[j])) & mask;
      if (j + 1 >= n) all.push_back(key);
    }
  } else {
    for (size_t i = 0; i + n <= symbols.size(); ++i) all.push_back(long_ngrams.id(symbols.substr(i, n)));
  }
  std::sort(all.begin(), all.end());
  out.total = static_cast<double>(all.size());
  for (size_t i = 0; i < all.size();) {
    size_t j = i + 1;
    while (j < all.size() && all[j] == all[i]) ++j;
    out.keys.push_back(all[i]);
    out.counts.push_back(static_cast<double>(j - i));
    i = j;
  }
  return out;
}

NgramCounts max_counts(const std::vector<NgramCounts>& counts) {
  if (counts.size() == 1) return counts[0];
  std::vector<std::pair<NgramKey, double>> all;
  for (const NgramCounts& c : counts)
    for (size_t i = 0; i < c.keys.size(); ++i) all.emplace_back(c.keys[i], c.counts[i]);
  std::sort(all.begin(), all.end());  // the largest count of an n-gram comes last
  NgramCounts out;
  for (size_t i = 0; i < all.size(); ++i) {
    if (i + 1 < all.size() && all[i + 1].first == all[i].first) continue;
    out.keys.push_back(all[i].first);
    out.counts.push_back(all[i].second);
    out.total += all[i].second;
  }
  return out;
}

Overlap overlap(const NgramCounts& hyp, const NgramCounts& ref) {
  Overlap o{0, hyp.total, ref.total};
  size_t r = 0;
  for (size_t h = 0; h < hyp.keys.size(); ++h) {
    while (r < ref.keys.size() && ref.keys[r] < hyp.keys[h]) ++r;
    if (r == ref.keys.size()) break;
    if (ref.keys[r] == hyp.keys[h]) o.matched += std::min(hyp.counts[h], ref.counts[r]);
  }
  return o;
}

}  // namespace fairseq_cpp::scoring
