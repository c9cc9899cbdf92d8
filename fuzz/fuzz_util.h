#pragma once
// What the fuzz targets share: a scratch folder of this process for the files that the readers
// open, and the rule that an error a user reads is one line.

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

namespace fairseq_cpp::fuzz {

// "/tmp/fsq-fuzz-XXXXXX", made on first use and removed at exit (the string is never destroyed:
// the exit handler runs after static destructors).
inline const std::string& scratch_dir() {
  static const std::string* dir = [] {
    char tmpl[] = "/tmp/fsq-fuzz-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) {
      std::perror("fuzz: mkdtemp");
      std::abort();
    }
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(scratch_dir(), ec);
    });
    return new std::string(tmpl);
  }();
  return *dir;
}

inline void write_file(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::perror(("fuzz: cannot write " + path).c_str());
    std::abort();
  }
}

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// A finding: prints what went wrong and aborts, so that libFuzzer keeps the input.
[[noreturn]] inline void finding(const std::string& what) {
  std::fprintf(stderr, "fuzz: FINDING: %s\n", what.c_str());
  std::abort();
}

// Errors of readers are one line (core/errors.h): a message with a line break is a finding.
inline void check_one_line(const std::exception& e) {
  std::string_view message = e.what();
  if (message.find('\n') != std::string_view::npos || message.find('\r') != std::string_view::npos)
    finding("an error message of more than one line: " + std::string(message));
}

}  // namespace fairseq_cpp::fuzz
