#include "fairseq_cpp/scoring/ngrams.h"

#include <algorithm>

namespace fairseq_cpp::scoring {

NgramCounts word_ngrams(const std::vector<std::u32string_view>& words, int order) {
  NgramCounts counts;
  const size_t n = static_cast<size_t>(order);
  for (size_t i = 0; i + n <= words.size(); ++i) {
    std::u32string key(words[i]);
    for (size_t k = 1; k < n; ++k) key.append(1, U' ').append(words[i + k]);
    counts[key] += 1;
  }
  return counts;
}

NgramCounts char_ngrams(std::u32string_view text, int order) {
  NgramCounts counts;
  const size_t n = static_cast<size_t>(order);
  for (size_t i = 0; i + n <= text.size(); ++i) counts[std::u32string(text.substr(i, n))] += 1;
  return counts;
}

Overlap overlap(const NgramCounts& hyp, const NgramCounts& ref) {
  Overlap o;
  for (const auto& [ngram, count] : hyp) {
    o.hyp_total += count;
    auto it = ref.find(ngram);
    if (it != ref.end()) o.matched += std::min(count, it->second);
  }
  for (const auto& entry : ref) o.ref_total += entry.second;
  return o;
}

}  // namespace fairseq_cpp::scoring
