#pragma once
// One training run per save_dir. The run holds an flock on SAVE_DIR/.fairseq-cpp-train.lock for its
// lifetime; the kernel releases it on any exit, SIGKILL included (and an NFS server when the
// holder's host reboots), so the file a dead run leaves is never in the way. The file names the
// holder (host, pid, start) for the second run's error; a run that ends removes it.
//
//   checkpoint::RunLock lock(cfg.checkpoint.save_dir);   // throws UserError if another run holds it

#include <string>

namespace fairseq_cpp::checkpoint {

inline constexpr const char* kRunLockName = ".fairseq-cpp-train.lock";

class RunLock {
 public:
  // Creates save_dir if needed. Throws UserError naming the other run's host and pid when a live
  // run holds the directory, OperationalError when the lock file cannot be made.
  explicit RunLock(const std::string& save_dir);
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace fairseq_cpp::checkpoint
