#pragma once
// The Unicode that sacreBLEU's metrics see through Python: code points, str.isspace, str.split,
// str.strip/rstrip, str.lower, and the `regex` module's \p{P}, \p{N}, \p{S}. The tables come from
// the pinned Python environment (tools/make-unicode-tables), so the answers are the package's.
//
//   std::u32string s = unicode::decode("Grüße.");   // 6 code points
//   unicode::lower(s); unicode::is_punctuation(U'.');  // true

#include <string>
#include <string_view>
#include <vector>

namespace fairseq_cpp::scoring::unicode {

// UTF-8 to code points and back. decode() expects valid UTF-8 (the readers check it first).
std::u32string decode(std::string_view text);
std::string encode(std::u32string_view text);
void append_utf8(std::string& out, char32_t c);

bool is_space(char32_t c);        // Python's str.isspace()
bool is_punctuation(char32_t c);  // \p{P}
bool is_number(char32_t c);       // \p{N}
bool is_symbol(char32_t c);       // \p{S}
bool is_ascii_digit(char32_t c);  // [0-9]

std::u32string lower(std::u32string_view text);  // Python's str.lower()
std::u32string_view strip(std::u32string_view text);   // str.strip()
std::u32string_view rstrip(std::u32string_view text);  // str.rstrip() (UTF-8: data::rstrip)
// str.split(): the words between runs of whitespace.
std::vector<std::u32string_view> split(std::u32string_view text);
// ' '.join(text.split())
std::u32string normalize_spaces(std::u32string_view text);

}  // namespace fairseq_cpp::scoring::unicode
