#include "fairseq_cpp/checkpoint/run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <string>

#include <fmt/format.h>

#include "fairseq_cpp/core/errors.h"

namespace fairseq_cpp::checkpoint {
namespace fs = std::filesystem;

RunLock::RunLock(const std::string& save_dir) {
  std::error_code ec;
  fs::create_directories(save_dir, ec);
  path_ = (fs::path(save_dir) / kRunLockName).string();
  const std::string& path = path_;
  int err = 0;  // flock's error when another run holds the lock
  for (;;) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) raise<OperationalError>("cannot create the run lock {}: {}", path, std::strerror(errno));
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      err = errno;
      break;
    }
    // Locked; but a run that just ended may have removed the file we opened: then lock the new one.
    struct stat opened {}, named {};
    if (::fstat(fd_, &opened) == 0 && ::stat(path.c_str(), &named) == 0 && opened.st_dev == named.st_dev &&
        opened.st_ino == named.st_ino)
      break;
    ::close(fd_);
  }
  if (err != 0) {
    std::string holder(512, '\0');
    const ssize_t n = ::pread(fd_, holder.data(), holder.size(), 0);
    holder.resize(n > 0 ? static_cast<size_t>(n) : 0);
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == '\0')) holder.pop_back();
    ::close(fd_);
    fd_ = -1;
    if (err != EWOULDBLOCK) raise<OperationalError>("cannot lock {}: {}", path, std::strerror(err));
    raise<UserError>("`checkpoint.save_dir` {} is in use by another training run ({}); wait for it to end, or give "
                     "this run another save_dir",
                     save_dir, holder.empty() ? "its lock file " + path + " is empty" : holder);
  }
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  const std::time_t now = std::time(nullptr);
  char when[32] = {};
  std::strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", std::localtime(&now));
  const std::string holder = fmt::format("fairseq-cpp-train pid {} on host {}, started {}\n", ::getpid(), host, when);
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, holder.data(), holder.size(), 0) != static_cast<ssize_t>(holder.size())) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    raise<OperationalError>("cannot write the run lock {}: {}", path, std::strerror(err));
  }
}

RunLock::~RunLock() {
  if (fd_ < 0) return;
  ::unlink(path_.c_str());  // before the lock goes: a run waiting on this file sees it gone (above)
  ::close(fd_);             // releases the flock
}

}  // namespace fairseq_cpp::checkpoint
