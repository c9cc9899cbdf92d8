#include "fairseq_cpp/generation/output.h"

#include <fmt/format.h>
#include "fairseq_cpp/core/torch.h"

#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/data/sentencepiece.h"
#include "fairseq_cpp/data/text.h"

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

std::map<std::string, std::string> load_align_dict(const std::string& path) {
  data::TextFile file = data::TextFile::read(path);
  std::map<std::string, std::string> out;
  std::vector<std::string_view> words;
  for (size_t i = 0; i < file.size(); ++i) {
    words.clear();
    data::tokenize_line(file.lines()[i], words);
    if (words.empty()) continue;
    if (words.size() < 2)
      raise<UserError>("--replace-unk {} line {}: expected \"source target\", found one word", path, i + 1);
    out[std::string(words[0])] = std::string(words[1]);
  }
  return out;
}

std::string replace_unk(std::string_view hypo, std::string_view source,
                        const std::vector<std::pair<int64_t, int64_t>>& alignment,
                        const std::map<std::string, std::string>& align_dict, const std::string& unk) {
  std::vector<std::string_view> hypo_words;
  std::vector<std::string_view> source_words;
  data::tokenize_line(hypo, hypo_words);
  data::tokenize_line(source, source_words);
  source_words.push_back("<eos>");
  std::string out;
  for (size_t i = 0; i < hypo_words.size(); ++i) {
    std::string word(hypo_words[i]);
    // fairseq fails on a word past the alignment (BPE removed); here it stays <unk>.
    if (word == unk && i < alignment.size() && alignment[i].first >= 0 &&
        static_cast<size_t>(alignment[i].first) < source_words.size()) {
      word = std::string(source_words[static_cast<size_t>(alignment[i].first)]);
      auto it = align_dict.find(word);
      if (it != align_dict.end()) word = it->second;
    }
    if (i > 0) out += ' ';
    out += word;
  }
  return out;
}

std::string alignment_string(const std::vector<std::pair<int64_t, int64_t>>& alignment) {
  std::string out;
  for (const auto& [source, target] : alignment) out += fmt::format("{}{}-{}", out.empty() ? "" : " ", source, target);
  return out;
}

std::string soft_alignment_string(const at::Tensor& attention, const std::vector<int64_t>& source, int64_t pad) {
  at::Tensor attn = attention.to(torch::kCPU, torch::kFloat32).contiguous();  // (T, S)
  const int64_t width = attn.size(1);
  std::string out;
  for (int64_t t = 0; t < attn.size(0); ++t) {
    if (t > 0) out += ' ';
    const float* row = attn.data_ptr<float>() + t * width;
    bool first = true;
    for (int64_t s = 0; s < width && static_cast<size_t>(s) < source.size(); ++s) {
      if (source[static_cast<size_t>(s)] == pad) continue;
      out += fmt::format("{}{:.6f}", first ? "" : ",", static_cast<double>(row[s]));
      first = false;
    }
  }
  return out;
}

std::string python_float(double value) {
  std::string s = fmt::format("{}", value);
  if (s.find_first_of(".eni") == std::string::npos) s += ".0";  // 1 -> 1.0, not 1e+20 / inf / nan
  return s;
}

}  // namespace fairseq_cpp::generation
