#include "fairseq_cpp/scoring/text_rules.h"

#include "fairseq_cpp/scoring/unicode.h"

namespace fairseq_cpp::scoring::rules {

void replace_all(std::u32string& text, std::u32string_view from, std::u32string_view to) {
  std::u32string out;
  size_t start = 0;
  for (size_t pos; (pos = text.find(from, start)) != std::u32string::npos; start = pos + from.size())
    out.append(text, start, pos - start).append(to);
  if (start == 0) return;
  out.append(text, start, std::u32string::npos);
  text = std::move(out);
}

std::u32string periods_commas_and_dashes(std::u32string_view text) {
  auto digit = [](char32_t c) { return unicode::is_ascii_digit(c); };
  auto not_digit = [](char32_t c) { return !unicode::is_ascii_digit(c); };
  auto period_or_comma = [](char32_t c) { return c == U'.' || c == U','; };
  // ([^0-9])([\.,]) => "\1 \2 ", ([\.,])([^0-9]) => " \1 \2", ([0-9])(-) => "\1 \2 "
  std::u32string a = pairs(text, not_digit, period_or_comma, space_after_each);
  std::u32string b = pairs(a, period_or_comma, not_digit, space_before_each);
  return pairs(b, digit, [](char32_t c) { return c == U'-'; }, space_after_each);
}

}  // namespace fairseq_cpp::scoring::rules
