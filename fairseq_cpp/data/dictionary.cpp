#include "fairseq_cpp/data/dictionary.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <utility>

#include <fmt/format.h>

#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/data/file_util.h"
#include "fairseq_cpp/data/text.h"

namespace fairseq_cpp::data {
namespace {

const char* const kOverwriteFlag = "#fairseq:overwrite";

bool parse_count(std::string_view field, int64_t& out) {
  if (field.empty()) return false;
  size_t i = 0;
  bool negative = false;
  if (field[0] == '+' || field[0] == '-') {
    negative = field[0] == '-';
    i = 1;
  }
  if (i == field.size()) return false;
  // Accumulated negatively: the range of int64 (Python's ints are unbounded, ours are not).
  int64_t value = 0;
  for (; i < field.size(); ++i) {
    if (field[i] < '0' || field[i] > '9') return false;
    const int digit = field[i] - '0';
    if (value < (std::numeric_limits<int64_t>::min() + digit) / 10) return false;
    value = value * 10 - digit;
  }
  if (!negative && value == std::numeric_limits<int64_t>::min()) return false;
  out = negative ? value : -value;
  return true;
}

}  // namespace

Dictionary::Dictionary() {
  add_symbol("<s>", 1);
  add_symbol("<pad>", 1);
  add_symbol("</s>", 1);
  add_symbol("<unk>", 1);
  nspecial_ = 4;
}

Dictionary::Dictionary(const Dictionary& other)
    : symbols_(other.symbols_), counts_(other.counts_), nspecial_(other.nspecial_) {
  rebuild_index();
}

Dictionary& Dictionary::operator=(const Dictionary& other) {
  if (this != &other) {
    Dictionary copy(other);
    *this = std::move(copy);
  }
  return *this;
}

const std::string& Dictionary::unk_word() {
  static const std::string word = "<unk>";
  return word;
}

// Later entries win, as after an overwrite.
void Dictionary::rebuild_index() {
  indices_.clear();
  indices_.reserve(symbols_.size());
  for (size_t i = 0; i < symbols_.size(); ++i) indices_[std::string_view(symbols_[i])] = static_cast<int32_t>(i);
}

int32_t Dictionary::add_symbol(std::string_view word, int64_t n, bool overwrite) {
  auto it = indices_.find(word);
  if (it != indices_.end() && !overwrite) {
    counts_[static_cast<size_t>(it->second)] += n;
    return it->second;
  }
  auto id = static_cast<int32_t>(symbols_.size());
  symbols_.emplace_back(word);
  counts_.push_back(n);
  if (it != indices_.end()) indices_.erase(it);
  indices_[std::string_view(symbols_.back())] = id;
  return id;
}

const std::string& Dictionary::symbol(int64_t id) const {
  if (id < 0 || id >= size()) return unk_word();
  return symbols_[static_cast<size_t>(id)];
}

void Dictionary::finalize(int64_t threshold, int64_t nwords, int64_t padding_factor) {
  if (nwords <= 0) nwords = size();
  auto nspecial = static_cast<size_t>(nspecial_);
  // Counter(dict(sorted(zip(symbols, counts)))): ordered by symbol, a repeated symbol keeps its
  // first position and its last (largest) count.
  std::vector<std::pair<std::string, int64_t>> entries;
  entries.reserve(symbols_.size() - nspecial);
  for (size_t i = nspecial; i < symbols_.size(); ++i) entries.emplace_back(std::move(symbols_[i]), counts_[i]);
  std::sort(entries.begin(), entries.end());
  std::vector<std::pair<std::string, int64_t>> unique;
  unique.reserve(entries.size());
  for (auto& e : entries) {
    if (!unique.empty() && unique.back().first == e.first) {
      unique.back().second = e.second;
    } else {
      unique.push_back(std::move(e));
    }
  }
  // most_common(k): a stable sort by count, descending; k < 0 drops that many from the end.
  std::stable_sort(unique.begin(), unique.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  int64_t take = nwords - nspecial_;
  auto total = static_cast<int64_t>(unique.size());
  take = take >= 0 ? std::min(take, total) : std::max<int64_t>(0, total + take);

  symbols_.resize(nspecial);
  counts_.resize(nspecial);
  for (int64_t i = 0; i < take; ++i) {
    auto& e = unique[static_cast<size_t>(i)];
    if (e.second < threshold) break;
    symbols_.push_back(std::move(e.first));
    counts_.push_back(e.second);
  }
  if (padding_factor > 1) {
    int i = 0;
    while (static_cast<int64_t>(symbols_.size()) % padding_factor != 0) {
      symbols_.push_back(fmt::format("madeupword{:04d}", i++));
      counts_.push_back(0);
    }
  }
  rebuild_index();
}

std::string Dictionary::to_text() const {
  fmt::memory_buffer out;
  for (size_t i = static_cast<size_t>(nspecial_); i < symbols_.size(); ++i)
    fmt::format_to(std::back_inserter(out), "{} {}\n", symbols_[i], counts_[i]);
  return fmt::to_string(out);
}

void Dictionary::save(const std::string& path) const { write_file_atomically(path, to_text()); }

Dictionary Dictionary::load(const std::string& path) {
  TextFile file = TextFile::read(path);
  Dictionary d;
  const auto& lines = file.lines();
  for (size_t i = 0; i < lines.size(); ++i) {
    std::string_view line = rstrip(lines[i]);
    auto bad = [&]() {
      raise<DataError>("{}:{}: expected '<token> <count> [#fairseq:overwrite]', found \"{}\"", path, i + 1, line);
    };
    size_t space = line.rfind(' ');
    if (space == std::string_view::npos) bad();
    std::string_view word = line.substr(0, space);
    std::string_view field = line.substr(space + 1);
    bool overwrite = false;
    if (field == kOverwriteFlag) {
      overwrite = true;
      space = word.rfind(' ');
      if (space == std::string_view::npos) bad();
      field = word.substr(space + 1);
      word = word.substr(0, space);
    }
    int64_t count = 0;
    if (!parse_count(field, count)) bad();
    if (d.contains(word) && !overwrite) {
      raise<DataError>(
          "{}:{}: duplicate word '{}' (a repeated word needs the {} flag at the end of its line, as fairseq)", path,
          i + 1, word, kOverwriteFlag);
    }
    d.add_symbol(word, count, overwrite);
  }
  return d;
}

}  // namespace fairseq_cpp::data
