#pragma once
// Files that appear whole or not at all: written under a temporary name beside the target and
// renamed into place on commit(); removed if never committed.
//
//   AtomicFile out("data-bin/train.en-de.en.bin");
//   out.write(bytes, n);
//   out.commit();

#include <cstddef>
#include <cstdio>
#include <string>
#include <string_view>

namespace fairseq_cpp::data {

class AtomicFile {
 public:
  // Creates `path`.tmp.<pid>; throws OperationalError naming the path when it cannot.
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t bytes);
  void write(std::string_view text) { write(text.data(), text.size()); }
  // Flushes, closes and renames the temporary file to the target.
  void commit();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::string temp_path_;
  std::FILE* file_ = nullptr;
};

void write_file_atomically(const std::string& path, std::string_view content);

}  // namespace fairseq_cpp::data
