#include "fairseq_cpp/generation/sacrebleu.h"

#include <cmath>
#include <unordered_map>

#include <fmt/format.h>

#include "fairseq_cpp/data/text.h"

namespace fairseq_cpp::generation {
namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// sacreBLEU's first post-tokenizer rule: ASCII punctuation and symbols get spaces around them.
bool is_13a_symbol(unsigned char c) {
  return (c >= 0x7B && c <= 0x7E) || (c >= 0x5B && c <= 0x60) || (c >= 0x20 && c <= 0x26) || (c >= 0x28 && c <= 0x2B) ||
         (c >= 0x3A && c <= 0x40) || c == '/';
}

void replace_all(std::string& text, std::string_view from, std::string_view to) {
  std::string out;
  size_t start = 0;
  for (size_t pos; (pos = text.find(from, start)) != std::string::npos; start = pos + from.size()) {
    out.append(text, start, pos - start).append(to);
  }
  if (start == 0) return;
  out.append(text, start, std::string::npos);
  text = std::move(out);
}

// Python's str.split(), then ' '.join.
std::string normalize_spaces(std::string_view text) {
  std::vector<std::string_view> tokens;
  data::tokenize_line(text, tokens);
  std::string out;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i > 0) out += ' ';
    out.append(tokens[i]);
  }
  return out;
}

size_t utf8_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xE) return 3;
  return 4;
}

// Decodes the code point at text[i]; sets `len` to its byte length.
char32_t decode(std::string_view text, size_t i, size_t& len) {
  const auto c = static_cast<unsigned char>(text[i]);
  len = std::min(utf8_length(c), text.size() - i);
  if (len == 1) return c;
  char32_t cp = c & (0x7F >> len);
  for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
  return cp;
}

// Python's str.isspace() for one code point.
bool is_python_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

using NgramCounts = std::unordered_map<std::string, int64_t>;

// Word n-grams of orders 1..4 of a tokenized line (tokens have no spaces, so joining is unambiguous).
std::array<NgramCounts, 4> word_ngrams(std::string_view line, int64_t& length) {
  std::vector<std::string_view> tokens;
  data::tokenize_line(line, tokens);
  length = static_cast<int64_t>(tokens.size());
  std::array<NgramCounts, 4> counts;
  for (size_t n = 1; n <= 4; ++n) {
    for (size_t i = 0; i + n <= tokens.size(); ++i) {
      std::string key(tokens[i]);
      for (size_t k = 1; k < n; ++k) key.append(" ").append(tokens[i + k]);
      ++counts[n - 1][key];
    }
  }
  return counts;
}

constexpr int kChrfOrder = 6;
constexpr double kChrfBeta = 2.0;

// Character n-grams of orders 1..6 of a line with its whitespace removed.
std::array<NgramCounts, kChrfOrder> char_ngrams(std::string_view line) {
  std::vector<std::string_view> words;
  data::tokenize_line(line, words);
  std::string joined;
  for (auto w : words) joined.append(w);
  std::vector<size_t> starts;  // byte offset of each code point, then the end
  for (size_t i = 0, len = 0; i < joined.size(); i += len) {
    starts.push_back(i);
    decode(joined, i, len);
  }
  const size_t chars = starts.size();
  starts.push_back(joined.size());
  std::array<NgramCounts, kChrfOrder> counts;
  for (size_t n = 1; n <= kChrfOrder; ++n) {
    for (size_t i = 0; i + n <= chars; ++i) ++counts[n - 1][joined.substr(starts[i], starts[i + n] - starts[i])];
  }
  return counts;
}

double chrf_f_score(const std::vector<int64_t>& stats) {
  constexpr double kEps = 1e-16;
  const double factor = kChrfBeta * kChrfBeta;
  double avg_prec = 0, avg_rec = 0;
  int effective_order = 0;
  for (int i = 0; i < kChrfOrder; ++i) {
    const int64_t n_hyp = stats[3 * i], n_ref = stats[3 * i + 1], n_match = stats[3 * i + 2];
    const double prec = n_hyp > 0 ? static_cast<double>(n_match) / static_cast<double>(n_hyp) : kEps;
    const double rec = n_ref > 0 ? static_cast<double>(n_match) / static_cast<double>(n_ref) : kEps;
    if (n_hyp > 0 && n_ref > 0) {
      avg_prec += prec;
      avg_rec += rec;
      ++effective_order;
    }
  }
  if (effective_order == 0) return 0.0;
  avg_prec /= effective_order;
  avg_rec /= effective_order;
  if (avg_prec + avg_rec == 0) return 0.0;
  return 100 * ((1 + factor) * avg_prec * avg_rec / (factor * avg_prec + avg_rec));
}

}  // namespace

std::string_view rstrip(std::string_view text) {
  size_t end = text.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
    size_t len = 0;
    if (!is_python_space(decode(text, start, len))) break;
    end = start;
  }
  return text.substr(0, end);
}

std::string tokenize_13a(std::string_view input) {
  std::string line(input);
  replace_all(line, "<skipped>", "");
  replace_all(line, "-\n", "");
  replace_all(line, "\n", " ");
  if (line.find('&') != std::string::npos) {
    replace_all(line, "&quot;", "\"");
    replace_all(line, "&amp;", "&");
    replace_all(line, "&lt;", "<");
    replace_all(line, "&gt;", ">");
  }
  line = " " + line + " ";
  // Rule 1: ([\{-\~\[-\` -\&\(-\+\:-\@\/]) => " \1 "
  std::string a;
  for (char c : line) {
    if (is_13a_symbol(static_cast<unsigned char>(c))) {
      a.append(" ").append(1, c).append(" ");
    } else {
      a += c;
    }
  }
  // Rule 2: ([^0-9])([\.,]) => "\1 \2 ", left to right without overlaps. Bytewise is exact: a
  // match needs an ASCII '.'/',' right after the last byte of the preceding character.
  std::string b;
  for (size_t i = 0; i < a.size(); ++i) {
    if (i + 1 < a.size() && !is_digit(a[i]) && (a[i + 1] == '.' || a[i + 1] == ',')) {
      b.append(1, a[i]).append(" ").append(1, a[i + 1]).append(" ");
      ++i;
    } else {
      b += a[i];
    }
  }
  // Rule 3: ([\.,])([^0-9]) => " \1 \2". The second character may be multibyte; its other bytes
  // cannot start a match, so copying them on the next iterations is exact.
  std::string c;
  for (size_t i = 0; i < b.size(); ++i) {
    if (i + 1 < b.size() && (b[i] == '.' || b[i] == ',') && !is_digit(b[i + 1])) {
      c.append(" ").append(1, b[i]).append(" ").append(1, b[i + 1]);
      ++i;
    } else {
      c += b[i];
    }
  }
  // Rule 4: ([0-9])(-) => "\1 \2 "
  std::string d;
  for (size_t i = 0; i < c.size(); ++i) {
    if (i + 1 < c.size() && is_digit(c[i]) && c[i + 1] == '-') {
      d.append(1, c[i]).append(" - ");
      ++i;
    } else {
      d += c[i];
    }
  }
  return normalize_spaces(d);
}

BleuScore corpus_bleu(const std::vector<std::string>& hypotheses, const std::vector<std::string>& references) {
  BleuScore s;
  for (size_t i = 0; i < hypotheses.size() && i < references.size(); ++i) {
    int64_t hyp_len = 0, ref_len = 0;
    auto hyp = word_ngrams(tokenize_13a(rstrip(hypotheses[i])), hyp_len);
    auto ref = word_ngrams(tokenize_13a(rstrip(references[i])), ref_len);
    s.sys_len += hyp_len;
    s.ref_len += ref_len;
    for (size_t n = 0; n < 4; ++n) {
      for (const auto& [ngram, count] : hyp[n]) {
        s.total[n] += count;
        auto it = ref[n].find(ngram);
        if (it != ref[n].end()) s.correct[n] += std::min(count, it->second);
      }
    }
  }
  if (s.sys_len < s.ref_len) {
    s.bp = s.sys_len > 0 ? std::exp(1 - static_cast<double>(s.ref_len) / static_cast<double>(s.sys_len)) : 0.0;
  }
  bool any_correct = false;
  for (int64_t c : s.correct) any_correct = any_correct || c > 0;
  if (!any_correct) return s;  // score 0, precisions 0 (sacreBLEU's early stop)
  double smooth = 1;
  for (size_t n = 0; n < 4; ++n) {
    if (s.total[n] == 0) break;
    if (s.correct[n] == 0) {
      smooth *= 2;  // exp smoothing (mteval-v13a)
      s.precisions[n] = 100.0 / (smooth * static_cast<double>(s.total[n]));
    } else {
      s.precisions[n] = 100.0 * static_cast<double>(s.correct[n]) / static_cast<double>(s.total[n]);
    }
  }
  double log_sum = 0;
  for (double p : s.precisions) log_sum += p == 0.0 ? -9999999999.0 : std::log(p);
  s.score = s.bp * std::exp(log_sum / 4);
  return s;
}

std::string bleu_signature() {
  return fmt::format("BLEU|nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:{}", kSacrebleuVersion);
}

std::string format_bleu(const BleuScore& s) {
  const double ratio = s.ref_len ? static_cast<double>(s.sys_len) / static_cast<double>(s.ref_len) : 0.0;
  return fmt::format("{} = {:.2f} {:.1f}/{:.1f}/{:.1f}/{:.1f} (BP = {:.3f} ratio = {:.3f} hyp_len = {} ref_len = {})",
                     bleu_signature(), s.score, s.precisions[0], s.precisions[1], s.precisions[2], s.precisions[3],
                     s.bp, ratio, s.sys_len, s.ref_len);
}

ChrfScore corpus_chrf(const std::vector<std::string>& hypotheses, const std::vector<std::string>& references) {
  ChrfScore s;
  s.statistics.assign(3 * kChrfOrder, 0);
  for (size_t i = 0; i < hypotheses.size() && i < references.size(); ++i) {
    auto hyp = char_ngrams(rstrip(hypotheses[i]));
    auto ref = char_ngrams(rstrip(references[i]));
    for (size_t n = 0; n < kChrfOrder; ++n) {
      int64_t hyp_count = 0, ref_count = 0, match = 0;
      for (const auto& [ngram, count] : hyp[n]) {
        hyp_count += count;
        auto it = ref[n].find(ngram);
        if (it != ref[n].end()) match += std::min(count, it->second);
      }
      for (const auto& entry : ref[n]) ref_count += entry.second;
      s.statistics[3 * n] += ref[n].empty() ? 0 : hyp_count;  // no hits counted without a reference n-gram
      s.statistics[3 * n + 1] += ref_count;
      s.statistics[3 * n + 2] += match;
    }
  }
  s.score = chrf_f_score(s.statistics);
  return s;
}

std::string chrf_signature() {
  return fmt::format("chrF2|nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:{}", kSacrebleuVersion);
}

std::string format_chrf(const ChrfScore& s) { return fmt::format("{} = {:.2f}", chrf_signature(), s.score); }

}  // namespace fairseq_cpp::generation
