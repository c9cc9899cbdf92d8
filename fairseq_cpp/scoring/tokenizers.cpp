#include "fairseq_cpp/scoring/tokenizers.h"

#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "fairseq_cpp/config/config.h"
#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/scoring/text_rules.h"
#include "fairseq_cpp/scoring/unicode.h"

namespace fairseq_cpp::scoring {
namespace {

// sacreBLEU's TokenizerRegexp: the four mteval rules, then single spaces.
std::u32string regexp_rules(std::u32string_view line) {
  return unicode::normalize_spaces(rules::periods_commas_and_dashes(rules::space_around(line, rules::is_mteval_symbol)));
}

std::u32string tokenize_13a_u32(std::u32string_view input) {
  std::u32string line(input);
  rules::replace_all(line, U"<skipped>", U"");
  rules::replace_all(line, U"-\n", U"");
  rules::replace_all(line, U"\n", U" ");
  if (line.find(U'&') != std::u32string::npos) {
    rules::replace_all(line, U"&quot;", U"\"");
    rules::replace_all(line, U"&amp;", U"&");
    rules::replace_all(line, U"&lt;", U"<");
    rules::replace_all(line, U"&gt;", U">");
  }
  return regexp_rules(U" " + line + U" ");
}

// mteval-v14's international rules with the `regex` module's classes.
std::u32string tokenize_intl(std::u32string_view line) {
  auto not_number = [](char32_t c) { return !unicode::is_number(c); };
  // (\P{N})(\p{P}) => "\1 \2 ", (\p{P})(\P{N}) => " \1 \2", (\p{S}) => " \1 "
  std::u32string a = rules::pairs(line, not_number, unicode::is_punctuation, rules::space_after_each);
  std::u32string b = rules::pairs(a, unicode::is_punctuation, not_number, rules::space_before_each);
  return unicode::normalize_spaces(rules::space_around(b, unicode::is_symbol));
}

// sacreBLEU's zh tokenizer compares a character with range bounds written as Python strings, and
// four of those literals are two characters long (u'\u20000' is U+2000 then '0'): the ranges
// below are the ones its comparisons really test, for example U+2001..U+2A6D for "Extension B".
bool is_chinese(char32_t c) {
  static constexpr std::pair<char32_t, char32_t> kRanges[] = {
      {0x3400, 0x4DB5}, {0x4E00, 0x9FA5}, {0x9FA6, 0x9FBB}, {0xF900, 0xFA2D}, {0xFA30, 0xFA6A}, {0xFA70, 0xFAD9},
      {0x2001, 0x2A6D},  // u'\u20000' .. u'\u2a6d6'
      {0x2F81, 0x2FA1},  // u'\u2f800' .. u'\u2fa1d'
      {0xFF00, 0xFFEF}, {0x2E80, 0x2EFF}, {0x3000, 0x303F}, {0x31C0, 0x31EF}, {0x2F00, 0x2FDF}, {0x2FF0, 0x2FFF},
      {0x3100, 0x312F}, {0x31A0, 0x31BF}, {0xFE10, 0xFE1F}, {0xFE30, 0xFE4F}, {0x2600, 0x26FF}, {0x2700, 0x27BF},
      {0x3200, 0x32FF}, {0x3300, 0x33FF}};
  for (const auto& [first, last] : kRanges)
    if (c >= first && c <= last) return true;
  return false;
}

std::u32string tokenize_zh(std::u32string_view input) {
  return regexp_rules(rules::space_around(unicode::strip(input), is_chinese));
}

std::u32string tokenize_char(std::u32string_view line) {
  std::u32string out;
  out.reserve(line.size() * 2);
  for (char32_t c : line) {
    if (!out.empty()) out.push_back(U' ');
    out.push_back(c);
  }
  return out;
}

}  // namespace

namespace {

// sacreBLEU's names, in its order.
constexpr std::pair<const char*, Tokenizer> kTokenizers[] = {
    {"none", Tokenizer::none}, {"zh", Tokenizer::zh}, {"13a", Tokenizer::t13a}, {"intl", Tokenizer::intl},
    {"char", Tokenizer::char_level}};

}  // namespace

const std::vector<std::string>& tokenizer_names() {
  static const std::vector<std::string> kNames = [] {
    std::vector<std::string> names;
    for (const auto& [name, tokenizer] : kTokenizers) names.emplace_back(name);
    return names;
  }();
  return kNames;
}

Tokenizer tokenizer_from_name(const std::string& name) {
  for (const auto& [known, tokenizer] : kTokenizers)
    if (name == known) return tokenizer;
  std::string guess = config::nearest(name, tokenizer_names());
  raise<UserError>("unknown tokenizer `{}`{}; the tokenizers are {}", name,
                   guess.empty() ? "" : fmt::format(" (did you mean `{}`?)", guess),
                   fmt::format("{}", fmt::join(tokenizer_names(), ", ")));
}

std::string tokenizer_name(Tokenizer tokenizer) {
  for (const auto& [name, known] : kTokenizers)
    if (tokenizer == known) return name;
  return "13a";
}

std::u32string tokenize(Tokenizer tokenizer, std::u32string_view line) {
  switch (tokenizer) {
    case Tokenizer::none:
      return std::u32string(line);
    case Tokenizer::zh:
      return tokenize_zh(line);
    case Tokenizer::t13a:
      return tokenize_13a_u32(line);
    case Tokenizer::intl:
      return tokenize_intl(line);
    case Tokenizer::char_level:
      return tokenize_char(line);
  }
  return std::u32string(line);
}

std::string tokenize_13a(std::string_view line) { return unicode::encode(tokenize_13a_u32(unicode::decode(line))); }

}  // namespace fairseq_cpp::scoring
