#pragma once
// sacreBLEU 2.x's BLEU tokenizers on code points: 13a (mteval-v13a, the default), intl
// (mteval-v14 international), zh (Chinese characters apart, then 13a's rules), char and none.
// Each returns the tokens joined by single spaces, as sacreBLEU's do (char: every character,
// spaces included, joined by spaces; none: the line unchanged).
//
//   tokenize(Tokenizer::t13a, U"Hello, world!")   // U"Hello , world !"

#include <string>
#include <string_view>
#include <vector>

namespace fairseq_cpp::scoring {

enum class Tokenizer { none, zh, t13a, intl, char_level };

// The names sacreBLEU's --tokenize takes that we implement, in its order.
const std::vector<std::string>& tokenizer_names();
// Throws UserError for an unknown name, with the nearest known one.
Tokenizer tokenizer_from_name(const std::string& name);
std::string tokenizer_name(Tokenizer tokenizer);

std::u32string tokenize(Tokenizer tokenizer, std::u32string_view line);

// 13a on UTF-8 text (fairseq-generate's --sacrebleu and the tests).
std::string tokenize_13a(std::string_view line);

}  // namespace fairseq_cpp::scoring
