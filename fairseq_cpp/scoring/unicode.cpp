#include "fairseq_cpp/scoring/unicode.h"

#include <algorithm>
#include <iterator>

namespace fairseq_cpp::scoring::unicode {
namespace {

struct CodeRange {
  char32_t first, last;
};
struct LowerEntry {
  char32_t from;
  char32_t to[3];
};

#include "fairseq_cpp/scoring/unicode_tables.inc"

template <size_t N>
bool in_ranges(const CodeRange (&table)[N], char32_t c) {
  auto it = std::upper_bound(std::begin(table), std::end(table), c,
                             [](char32_t v, const CodeRange& r) { return v < r.first; });
  return it != std::begin(table) && c <= std::prev(it)->last;
}

size_t sequence_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xE) return 3;
  return 4;
}

// CPython's handle_capital_sigma: U+03A3 lowers to final sigma after a cased letter (case-ignorable
// ones skipped) unless a cased letter follows (case-ignorable ones skipped).
bool final_sigma(std::u32string_view text, size_t i) {
  size_t j = i;
  while (j > 0 && in_ranges(kCaseIgnorable, text[j - 1])) --j;
  if (j == 0 || !in_ranges(kCased, text[j - 1])) return false;
  j = i + 1;
  while (j < text.size() && in_ranges(kCaseIgnorable, text[j])) ++j;
  return j == text.size() || !in_ranges(kCased, text[j]);
}

}  // namespace

std::u32string decode(std::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const auto lead = static_cast<unsigned char>(text[i]);
    const size_t len = std::min(sequence_length(lead), text.size() - i);
    char32_t cp = len == 1 ? lead : lead & (0x7F >> len);
    for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
    out.push_back(cp);
    i += len;
  }
  return out;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::string encode(std::u32string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char32_t c : text) append_utf8(out, c);
  return out;
}

bool is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool is_punctuation(char32_t c) { return in_ranges(kPunctuation, c); }
bool is_number(char32_t c) { return in_ranges(kNumber, c); }
bool is_symbol(char32_t c) { return in_ranges(kSymbol, c); }
bool is_ascii_digit(char32_t c) { return c >= U'0' && c <= U'9'; }

std::u32string lower(std::u32string_view text) {
  std::u32string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const char32_t c = text[i];
    if (c == 0x3A3) {
      out.push_back(final_sigma(text, i) ? 0x3C2 : 0x3C3);
      continue;
    }
    if (c < 0x80) {
      out.push_back(c >= U'A' && c <= U'Z' ? c + 32 : c);
      continue;
    }
    auto it = std::lower_bound(std::begin(kLower), std::end(kLower), c,
                               [](const LowerEntry& e, char32_t v) { return e.from < v; });
    if (it == std::end(kLower) || it->from != c) {
      out.push_back(c);
      continue;
    }
    for (char32_t to : it->to)
      if (to != 0) out.push_back(to);
  }
  return out;
}

std::u32string_view rstrip(std::u32string_view text) {
  size_t end = text.size();
  while (end > 0 && is_space(text[end - 1])) --end;
  return text.substr(0, end);
}

std::u32string_view strip(std::u32string_view text) {
  text = rstrip(text);
  size_t start = 0;
  while (start < text.size() && is_space(text[start])) ++start;
  return text.substr(start);
}

std::vector<std::u32string_view> split(std::u32string_view text) {
  std::vector<std::u32string_view> words;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && is_space(text[i])) ++i;
    const size_t start = i;
    while (i < text.size() && !is_space(text[i])) ++i;
    if (i > start) words.push_back(text.substr(start, i - start));
  }
  return words;
}

std::u32string normalize_spaces(std::u32string_view text) {
  std::u32string out;
  out.reserve(text.size());
  for (auto word : split(text)) {
    if (!out.empty()) out.push_back(U' ');
    out.append(word);
  }
  return out;
}

}  // namespace fairseq_cpp::scoring::unicode
