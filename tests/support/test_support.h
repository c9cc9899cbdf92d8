#pragma once
// Helpers for the test suites: temporary directories, files, and running the built programs.

#include <map>
#include <string>
#include <vector>

namespace fairseq_cpp::testing {

// A fresh directory under $TMPDIR, removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  // Writes `content` to path()/name and returns the full path.
  std::string write(const std::string& name, const std::string& content) const;

 private:
  std::string path_;
};

std::string read_file(const std::string& path);

struct RunResult {
  int exit_code = -1;  // the exit status, or 128 + signal
  std::string out;     // standard output
  std::string err;     // standard error
};

// Runs `argv` (argv[0] a path) with `env` added to this process's environment and `input` on stdin.
RunResult run(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env = {},
              const std::string& input = "");

// The path of a built program, e.g. program("fairseq-cpp-train") ($FSQ_BIN_DIR, else the build tree).
std::string program(const std::string& name);
// The source tree's root ($FSQ_SOURCE_DIR, else the one built from).
std::string source_dir();

}  // namespace fairseq_cpp::testing
