#include "fairseq_cpp/scoring/fairseq_bleu.h"

#include <cmath>
#include <limits>
#include <unordered_map>

#include <fmt/format.h>

#include "fairseq_cpp/data/text.h"

namespace fairseq_cpp::scoring {
namespace {

constexpr int32_t kUnmatchable = -999;  // fairseq's stand-in for <unk> in the reference

// libbleu's n-gram key: FNV-1a over the n ints' bytes, each byte sign-extended as a `char`.
size_t ngram_hash(const int32_t* data, size_t n) {
  size_t h = 14695981039346656037ul;
  const auto* bytes = reinterpret_cast<const signed char*>(data);
  for (size_t i = 0; i < sizeof(int32_t) * n; ++i) {
    h ^= static_cast<size_t>(static_cast<int64_t>(bytes[i]));
    h *= 0x100000001b3ul;
  }
  return h;
}

// Left: drop pad; right: drop </s> and pad, never the first token (libbleu's bleu_trim).
std::pair<const int32_t*, size_t> trim(const std::vector<int32_t>& s, int32_t pad, int32_t eos) {
  size_t start = 0;
  while (start < s.size() && s[start] == pad) ++start;
  size_t len = s.size() - start;
  if (len == 0) return {s.data() + start, 0};
  size_t end = len - 1;
  while (end > 0 && (s[start + end] == eos || s[start + end] == pad)) --end;
  return {s.data() + start, end + 1};
}

}  // namespace

FairseqBleu::FairseqBleu(data::Dictionary dictionary) : dict_(std::move(dictionary)) {}

void FairseqBleu::add(std::vector<int32_t> ref, std::vector<int32_t> pred) {
  for (int32_t& id : ref) {
    if (id == dict_.unk()) id = kUnmatchable;
  }
  auto [r, rlen] = trim(ref, dict_.pad(), dict_.eos());
  auto [p, plen] = trim(pred, dict_.pad(), dict_.eos());
  reflen_ += static_cast<int64_t>(rlen);
  predlen_ += static_cast<int64_t>(plen);
  for (size_t n = 1; n <= 4; ++n) {
    if (plen < n) continue;
    count_[n - 1] += static_cast<int64_t>(plen - n + 1);
    if (rlen < n) continue;
    std::unordered_map<size_t, int64_t> counts;
    for (size_t i = 0; i + n <= plen; ++i) ++counts[ngram_hash(p + i, n)];
    for (size_t i = 0; i + n <= rlen; ++i) {
      auto it = counts.find(ngram_hash(r + i, n));
      if (it != counts.end() && it->second > 0) {
        ++match_[n - 1];
        --it->second;
      }
    }
  }
}

std::vector<int32_t> FairseqBleu::encode_line(std::string_view line) {
  std::vector<std::string_view> words;
  data::tokenize_line(line, words);
  std::vector<int32_t> ids;
  ids.reserve(words.size() + 1);
  for (auto w : words) ids.push_back(dict_.add_symbol(w));
  ids.push_back(dict_.eos());
  return ids;
}

void FairseqBleu::add_strings(std::string_view ref, std::string_view pred) {
  std::vector<int32_t> p = encode_line(pred);
  add(encode_line(ref), std::move(p));
}

std::vector<double> FairseqBleu::precisions() const {
  std::vector<double> p(4);
  for (size_t n = 0; n < 4; ++n) {
    p[n] = count_[n] > 0 ? static_cast<double>(match_[n]) / static_cast<double>(count_[n]) : 0.0;
  }
  return p;
}

double FairseqBleu::brevity() const {
  if (predlen_ == 0) return 0.0;
  const double r = static_cast<double>(reflen_) / static_cast<double>(predlen_);
  return std::min(1.0, std::exp(1 - r));
}

double FairseqBleu::score() const {
  double psum = 0;
  for (double p : precisions()) psum += p > 0 ? std::log(p) : -std::numeric_limits<double>::infinity();
  return brevity() * std::exp(psum / 4) * 100;
}

std::string FairseqBleu::result_string() const {
  auto p = precisions();
  const double ratio = reflen_ > 0 ? static_cast<double>(predlen_) / static_cast<double>(reflen_) : 0.0;
  return fmt::format("BLEU4 = {:2.2f}, {:2.1f}/{:2.1f}/{:2.1f}/{:2.1f} (BP={:.3f}, ratio={:.3f}, syslen={}, reflen={})",
                     score(), p[0] * 100, p[1] * 100, p[2] * 100, p[3] * 100, brevity(), ratio, predlen_, reflen_);
}

}  // namespace fairseq_cpp::scoring
