#pragma once
// fairseq's Dictionary: symbols <-> consecutive ids, with the specials <s>=0 <pad>=1 </s>=2 <unk>=3
// first, and the `dict.<lang>.txt` format ("symbol count" per line, specials not written).
//
//   Dictionary d;                        // the four specials
//   d.add_symbol("Haus", 3);             // counting (fairseq-preprocess)
//   d.finalize(/*threshold=*/0, /*nwords=*/-1, /*padding_factor=*/8);
//   d.save("data-bin/dict.de.txt");
//   Dictionary::load("data-bin/dict.de.txt").index("Haus");   // 4

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace fairseq_cpp::data {

class Dictionary {
 public:
  static constexpr int32_t kBos = 0;
  static constexpr int32_t kPad = 1;
  static constexpr int32_t kEos = 2;
  static constexpr int32_t kUnk = 3;

  Dictionary();
  Dictionary(const Dictionary& other);
  Dictionary& operator=(const Dictionary& other);
  Dictionary(Dictionary&&) = default;
  Dictionary& operator=(Dictionary&&) = default;

  // Reads fairseq's dict.txt after the specials: "<symbol> <count>[ #fairseq:overwrite]" per line,
  // split on the last space. Throws DataError naming the file and line on a bad or duplicate line.
  static Dictionary load(const std::string& path);

  // Adds `n` to the count of `word`, appending it when new (or when `overwrite`, as fairseq: a new
  // entry that the word then maps to). Returns its id.
  int32_t add_symbol(std::string_view word, int64_t n = 1, bool overwrite = false);
  // The id of `word`, or unk() when absent.
  int32_t index(std::string_view word) const {
    auto it = indices_.find(word);
    return it == indices_.end() ? kUnk : it->second;
  }
  bool contains(std::string_view word) const { return indices_.count(word) > 0; }
  // The symbol of `id`; "<unk>" for ids past the end.
  const std::string& symbol(int64_t id) const;
  int64_t count(int64_t id) const { return counts_.at(static_cast<size_t>(id)); }
  int64_t size() const { return static_cast<int64_t>(symbols_.size()); }
  int64_t nspecial() const { return nspecial_; }

  int32_t bos() const { return kBos; }
  int32_t pad() const { return kPad; }
  int32_t eos() const { return kEos; }
  int32_t unk() const { return kUnk; }
  static const std::string& unk_word();

  // fairseq's finalize: keeps the specials, then the other symbols by count descending, ties in
  // ascending code-point order; stops at the first count below `threshold`; keeps at most `nwords`
  // symbols including the specials (<= 0: all); pads with madeupword0000, ... to a multiple of
  // `padding_factor` (<= 1: no padding).
  void finalize(int64_t threshold = -1, int64_t nwords = -1, int64_t padding_factor = 8);

  // The dict.txt text: "symbol count\n" for every symbol after the specials.
  std::string to_text() const;
  // Writes to_text() to `path` through a temporary file and a rename.
  void save(const std::string& path) const;

 private:
  void rebuild_index();

  std::deque<std::string> symbols_;  // a deque: indices_ holds views of its strings
  std::vector<int64_t> counts_;
  std::unordered_map<std::string_view, int32_t> indices_;
  int64_t nspecial_ = 0;
};

}  // namespace fairseq_cpp::data
