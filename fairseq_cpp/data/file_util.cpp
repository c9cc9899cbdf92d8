#include "fairseq_cpp/data/file_util.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "fairseq_cpp/core/errors.h"

namespace fairseq_cpp::data {

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  temp_path_ = path_ + ".tmp." + std::to_string(::getpid());
  file_ = std::fopen(temp_path_.c_str(), "wb");
  if (file_ == nullptr) raise<OperationalError>("cannot write {}: {}", temp_path_, std::strerror(errno));
}

AtomicFile::~AtomicFile() {
  if (file_ != nullptr) {
    std::fclose(file_);
    std::remove(temp_path_.c_str());
  }
}

void AtomicFile::write(const void* data, size_t bytes) {
  if (bytes > 0 && std::fwrite(data, 1, bytes, file_) != bytes)
    raise<OperationalError>("cannot write {}: {}", temp_path_, std::strerror(errno));
}

void AtomicFile::commit() {
  bool ok = std::fflush(file_) == 0;
  ok = std::fclose(file_) == 0 && ok;
  file_ = nullptr;
  if (!ok) {
    std::remove(temp_path_.c_str());
    raise<OperationalError>("cannot write {}: {}", temp_path_, std::strerror(errno));
  }
  if (std::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    int err = errno;
    std::remove(temp_path_.c_str());
    raise<OperationalError>("cannot rename {} to {}: {}", temp_path_, path_, std::strerror(err));
  }
}

void write_file_atomically(const std::string& path, std::string_view content) {
  AtomicFile file(path);
  file.write(content);
  file.commit();
}

}  // namespace fairseq_cpp::data
