#pragma once
// Text input as fairseq-preprocess reads it: a whole file in memory, split into lines the way
// Python's text mode does (universal newlines: "\n", "\r\n", "\r"), checked to be UTF-8, and
// each line split into tokens as fairseq's tokenize_line ("  a\u3000b\t" => {"a", "b"}).

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace fairseq_cpp::data {

// A text file read at once. Lines are views into `content`, without their line terminators.
class TextFile {
 public:
  // Reads `path` (a regular file is mapped, not copied); throws DataError naming the file when it
  // is missing or unreadable, and naming the file, line and byte offset when a line is not valid UTF-8.
  static TextFile read(const std::string& path);
  // The same from text already in memory (`name` is used in error messages).
  static TextFile from_string(std::string content, const std::string& name);

  const std::string& path() const { return path_; }
  const std::vector<std::string_view>& lines() const { return lines_; }
  size_t size() const { return lines_.size(); }

  TextFile(TextFile&&) = default;
  TextFile& operator=(TextFile&&) = default;

 private:
  TextFile() = default;
  void split_and_check();

  struct Unmap {
    size_t size;
    void operator()(char* p) const;
  };

  std::string path_;
  std::unique_ptr<std::string> content_;  // on the heap: lines_ point into it across moves
  std::unique_ptr<char, Unmap> mapped_;   // or the file's pages (read of a regular file)
  std::string_view text_;                 // the whole text, in one of the two
  std::vector<std::string_view> lines_;
};

// Byte offset of the first invalid UTF-8 sequence in `text` (as Python's strict decoder sees it:
// no overlong forms, no surrogates, nothing above U+10FFFF), or npos when the text is valid.
size_t find_invalid_utf8(std::string_view text);

// fairseq's tokenize_line: collapses runs of Unicode whitespace (Python's str.isspace) and splits.
// Appends the tokens (views into `line`) to `tokens`; `line` must be valid UTF-8.
void tokenize_line(std::string_view line, std::vector<std::string_view>& tokens);

namespace detail {

// Length of the whitespace character at `p` (Python's str.isspace), or 0 when it is not one.
// `p` points into valid UTF-8 with `n` bytes left.
inline size_t whitespace_length(const unsigned char* p, size_t n) {
  unsigned char c = p[0];
  if (c < 0x80) return (c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F)) ? 1 : 0;
  if (c == 0xC2 && n >= 2) return (p[1] == 0x85 || p[1] == 0xA0) ? 2 : 0;
  if (n < 3) return 0;
  if (c == 0xE1) return (p[1] == 0x9A && p[2] == 0x80) ? 3 : 0;
  if (c == 0xE2) {
    if (p[1] == 0x80) return (p[2] <= 0x8A || p[2] == 0xA8 || p[2] == 0xA9 || p[2] == 0xAF) ? 3 : 0;
    return (p[1] == 0x81 && p[2] == 0x9F) ? 3 : 0;
  }
  if (c == 0xE3) return (p[1] == 0x80 && p[2] == 0x80) ? 3 : 0;
  return 0;
}

// Whether a whitespace character can start with byte `c` (ASCII up to the space; the lead bytes
// of U+0085, U+00A0, U+1680, U+2000-U+205F, U+3000).
inline bool may_start_whitespace(unsigned char c) { return c <= 0x20 || c == 0xC2 || (c >= 0xE1 && c <= 0xE3); }

}  // namespace detail

// tokenize_line without the vector: calls f(token) for each token of `line` in order.
template <typename F>
void for_each_token(std::string_view line, F&& f) {
  const auto* p = reinterpret_cast<const unsigned char*>(line.data());
  const size_t n = line.size();
  size_t i = 0;
  while (true) {
    size_t ws;
    while (i < n && detail::may_start_whitespace(p[i]) && (ws = detail::whitespace_length(p + i, n - i)) > 0) i += ws;
    if (i >= n) return;
    const size_t start = i;
    while (i < n && !(detail::may_start_whitespace(p[i]) && detail::whitespace_length(p + i, n - i) > 0)) ++i;
    f(line.substr(start, i - start));
  }
}

// Python's str.rstrip(): `line` without its trailing Unicode whitespace; `line` must be valid UTF-8.
std::string_view rstrip(std::string_view line);

}  // namespace fairseq_cpp::data
