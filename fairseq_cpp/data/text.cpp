#include "fairseq_cpp/data/text.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "fairseq_cpp/core/errors.h"

namespace fairseq_cpp::data {
namespace {

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

}  // namespace

std::string_view rstrip(std::string_view line) {
  const auto* s = reinterpret_cast<const unsigned char*>(line.data());
  size_t end = line.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (s[start] & 0xC0) == 0x80) --start;  // the last character's first byte
    if (whitespace_length(s + start, end - start) != end - start) break;
    end = start;
  }
  return line.substr(0, end);
}

size_t find_invalid_utf8(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;  // overlong
      if (c == 0xED) hi = 0x9F;  // surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;  // overlong
      if (c == 0xF4) hi = 0x8F;  // above U+10FFFF
    } else {
      return i;
    }
    if (i + len > n || s[i + 1] < lo || s[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k)
      if (s[i + k] < 0x80 || s[i + k] > 0xBF) return i;
    i += len;
  }
  return std::string_view::npos;
}

void tokenize_line(std::string_view line, std::vector<std::string_view>& tokens) {
  const auto* p = reinterpret_cast<const unsigned char*>(line.data());
  size_t n = line.size();
  size_t i = 0;
  size_t start = 0;
  bool in_token = false;
  while (i < n) {
    size_t ws = whitespace_length(p + i, n - i);
    if (ws > 0) {
      if (in_token) tokens.emplace_back(line.data() + start, i - start);
      in_token = false;
      i += ws;
    } else {
      if (!in_token) start = i;
      in_token = true;
      ++i;
    }
  }
  if (in_token) tokens.emplace_back(line.data() + start, n - start);
}

TextFile TextFile::read(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) raise<DataError>("cannot read {}: {}", path, std::strerror(errno));
  std::string content;
  char buffer[1 << 16];
  size_t got;
  while ((got = std::fread(buffer, 1, sizeof buffer, f)) > 0) content.append(buffer, got);
  bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) raise<DataError>("cannot read {}: I/O error", path);
  return from_string(std::move(content), path);
}

TextFile TextFile::from_string(std::string content, const std::string& name) {
  TextFile file;
  file.path_ = name;
  file.content_ = std::make_unique<std::string>(std::move(content));
  file.split_and_check();
  return file;
}

void TextFile::split_and_check() {
  std::string_view all(*content_);
  size_t start = 0;
  const size_t n = all.size();
  while (start < n) {
    size_t end = start;
    while (end < n && all[end] != '\n' && all[end] != '\r') ++end;
    lines_.push_back(all.substr(start, end - start));
    if (end < n && all[end] == '\r' && end + 1 < n && all[end + 1] == '\n') ++end;
    start = end + 1;
  }
  for (size_t i = 0; i < lines_.size(); ++i) {
    size_t bad = find_invalid_utf8(lines_[i]);
    if (bad != std::string_view::npos) {
      raise<DataError>("{}:{}: invalid UTF-8 at byte {} of the line (found byte 0x{:02x}); expected UTF-8 text", path_,
                       i + 1, bad + 1, static_cast<unsigned>(static_cast<unsigned char>(lines_[i][bad])));
    }
  }
}

}  // namespace fairseq_cpp::data
