#pragma once
// The regular-expression rules of sacreBLEU's tokenizers (mteval's 13a and v14, Tercom's
// normaliser), as plain loops over code points. Each does what Python's re.sub does with the
// corresponding pattern: matches found left to right, without overlaps.

#include <string>
#include <string_view>

namespace fairseq_cpp::scoring::rules {

// mteval's first rule, [\{-\~\[-\` -\&\(-\+\:-\@\/]: ASCII punctuation and symbols but ' , . - and digits.
inline bool is_mteval_symbol(char32_t c) {
  return (c >= 0x7B && c <= 0x7E) || (c >= 0x5B && c <= 0x60) || (c >= 0x20 && c <= 0x26) || (c >= 0x28 && c <= 0x2B) ||
         (c >= 0x3A && c <= 0x40) || c == U'/';
}

// str.replace(from, to).
void replace_all(std::u32string& text, std::u32string_view from, std::u32string_view to);

// re.sub("(X)", " \1 ", text) for the characters where `pred` holds.
template <typename Pred>
std::u32string space_around(std::u32string_view text, Pred pred) {
  std::u32string out;
  out.reserve(text.size() + text.size() / 2);
  for (char32_t c : text) {
    if (pred(c)) {
      out += {U' ', c, U' '};
    } else {
      out += c;
    }
  }
  return out;
}

// re.sub("(A)(B)", repl, text) for one-character classes A = `first`, B = `second`; `emit` appends
// the replacement of a match (x, y).
template <typename First, typename Second, typename Emit>
std::u32string pairs(std::u32string_view text, First first, Second second, Emit emit) {
  std::u32string out;
  out.reserve(text.size() + text.size() / 4);
  for (size_t i = 0; i < text.size(); ++i) {
    if (i + 1 < text.size() && first(text[i]) && second(text[i + 1])) {
      emit(out, text[i], text[i + 1]);
      ++i;
    } else {
      out += text[i];
    }
  }
  return out;
}

// The replacements of those rules: "\1 \2 " and " \1 \2".
inline void space_after_each(std::u32string& out, char32_t x, char32_t y) { out += {x, U' ', y, U' '}; }
inline void space_before_each(std::u32string& out, char32_t x, char32_t y) { out += {U' ', x, U' ', y}; }

// mteval's rules 2-4 after the first: period and comma apart unless next to a digit, a dash after
// a digit apart.
std::u32string periods_commas_and_dashes(std::u32string_view text);

}  // namespace fairseq_cpp::scoring::rules
