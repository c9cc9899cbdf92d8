#include "fairseq_cpp/generation/output.h"

#include <fmt/format.h>

#include "fairseq_cpp/data/sentencepiece.h"

namespace fairseq_cpp::generation {
namespace {

void replace_all(std::string& text, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  std::string out;
  size_t start = 0;
  for (size_t pos; (pos = text.find(from, start)) != std::string::npos; start = pos + from.size()) {
    out.append(text, start, pos - start).append(to);
  }
  out.append(text, start, std::string::npos);
  text = std::move(out);
}

std::string strip_spaces(std::string text, bool left) {
  const char* kSpaces = " \t\n\r\f\v";
  size_t end = text.find_last_not_of(kSpaces);
  if (end == std::string::npos) return "";
  size_t begin = left ? text.find_first_not_of(kSpaces) : 0;
  return text.substr(begin, end - begin + 1);
}

}  // namespace

std::string post_process(std::string_view sentence, const std::string& symbol) {
  if (symbol.empty() || symbol == "none") return std::string(sentence);
  if (symbol == "sentencepiece") return data::decode_pieces(sentence);
  std::string text(sentence);
  if (symbol == "_EOW") {
    replace_all(text, " ", "");
    replace_all(text, "_EOW", " ");
    return strip_spaces(text, true);
  }
  text += ' ';
  replace_all(text, symbol == "subword_nmt" ? std::string("@@ ") : symbol, "");
  return strip_spaces(text, false);
}

std::string ids_to_string(const data::Dictionary& dict, const std::vector<int64_t>& ids, const std::string& symbol,
                          bool escape_unk) {
  return ids_to_string(dict, ids, symbol,
                       escape_unk ? "<" + data::Dictionary::unk_word() + ">" : data::Dictionary::unk_word());
}

std::string ids_to_string(const data::Dictionary& dict, const std::vector<int64_t>& ids, const std::string& symbol,
                          const std::string& unk_string) {
  std::string out;
  bool first = true;
  for (int64_t id : ids) {
    if (id == dict.eos() || id == dict.bos()) continue;
    if (!first) out += ' ';
    first = false;
    if (id == dict.unk()) {
      out += unk_string;
    } else {
      out += dict.symbol(id);
    }
  }
  return post_process(out, symbol);
}

std::string python_float(double value) {
  std::string s = fmt::format("{}", value);
  if (s.find_first_of(".eni") == std::string::npos) s += ".0";  // 1 -> 1.0, not 1e+20 / inf / nan
  return s;
}

}  // namespace fairseq_cpp::generation
