#include "fairseq_cpp/data/text.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "fairseq_cpp/core/errors.h"

namespace fairseq_cpp::data {
using detail::whitespace_length;

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
      // Runs of ASCII, eight bytes at a time.
      uint64_t word;
      while (i + 8 <= n && (std::memcpy(&word, s + i, 8), (word & 0x8080808080808080ULL) == 0)) i += 8;
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
  for_each_token(line, [&](std::string_view token) { tokens.push_back(token); });
}

void TextFile::Unmap::operator()(char* p) const {
  if (p != nullptr) ::munmap(p, size);
}

TextFile TextFile::read(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) raise<DataError>("cannot read {}: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
    // A regular file: its pages, mapped (no copy, no heap; lines point into them).
    const auto size = static_cast<size_t>(st.st_size);
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    if (p == MAP_FAILED) raise<DataError>("cannot read {}: {}", path, std::strerror(errno));
    TextFile file;
    file.path_ = path;
    file.mapped_ = std::unique_ptr<char, Unmap>(static_cast<char*>(p), Unmap{size});
    file.text_ = std::string_view(file.mapped_.get(), size);
    file.split_and_check();
    return file;
  }
  // A pipe, a device, or an empty file: read to the end.
  std::string content;
  char buffer[1 << 16];
  ssize_t got;
  while ((got = ::read(fd, buffer, sizeof buffer)) != 0) {
    if (got < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      raise<DataError>("cannot read {}: {}", path, std::strerror(err));
    }
    content.append(buffer, static_cast<size_t>(got));
  }
  ::close(fd);
  return from_string(std::move(content), path);
}

TextFile TextFile::from_string(std::string content, const std::string& name) {
  TextFile file;
  file.path_ = name;
  file.content_ = std::make_unique<std::string>(std::move(content));
  file.text_ = *file.content_;
  file.split_and_check();
  return file;
}

void TextFile::split_and_check() {
  const std::string_view all = text_;
  const size_t n = all.size();
  const char* base = all.data();
  if (std::memchr(base, '\r', n) == nullptr) {
    // "\n" alone ends lines (the usual case): memchr from one to the next.
    size_t start = 0;
    while (start < n) {
      const void* nl = std::memchr(base + start, '\n', n - start);
      const size_t end = nl == nullptr ? n : static_cast<size_t>(static_cast<const char*>(nl) - base);
      lines_.push_back(all.substr(start, end - start));
      start = end + 1;
    }
  } else {
    size_t start = 0;
    while (start < n) {
      size_t end = start;
      while (end < n && all[end] != '\n' && all[end] != '\r') ++end;
      lines_.push_back(all.substr(start, end - start));
      if (end < n && all[end] == '\r' && end + 1 < n && all[end + 1] == '\n') ++end;
      start = end + 1;
    }
  }
  // The whole text at once: its first invalid byte is the first one of the first invalid line (line
  // terminators are ASCII, so a sequence they cut is invalid either way).
  const size_t bad = find_invalid_utf8(all);
  if (bad == std::string_view::npos) return;
  auto line = std::upper_bound(lines_.begin(), lines_.end(), base + bad,
                               [](const char* p, std::string_view l) { return p < l.data(); });
  const auto i = static_cast<size_t>(line - lines_.begin()) - 1;
  const auto at = static_cast<size_t>(base + bad - lines_[i].data());
  raise<DataError>("{}:{}: invalid UTF-8 at byte {} of the line (found byte 0x{:02x}); expected UTF-8 text", path_,
                   i + 1, at + 1, static_cast<unsigned>(static_cast<unsigned char>(lines_[i][at])));
}

}  // namespace fairseq_cpp::data
