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
  // Reads `path`; throws DataError naming the file when it is missing or unreadable, and naming the
  // file, line and byte offset when a line is not valid UTF-8.
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

  std::string path_;
  std::unique_ptr<std::string> content_;  // on the heap: lines_ point into it across moves
  std::vector<std::string_view> lines_;
};

// Byte offset of the first invalid UTF-8 sequence in `text` (as Python's strict decoder sees it:
// no overlong forms, no surrogates, nothing above U+10FFFF), or npos when the text is valid.
size_t find_invalid_utf8(std::string_view text);

// fairseq's tokenize_line: collapses runs of Unicode whitespace (Python's str.isspace) and splits.
// Appends the tokens (views into `line`) to `tokens`; `line` must be valid UTF-8.
void tokenize_line(std::string_view line, std::vector<std::string_view>& tokens);

// Python's str.rstrip(): `line` without its trailing Unicode whitespace; `line` must be valid UTF-8.
std::string_view rstrip(std::string_view line);

}  // namespace fairseq_cpp::data
