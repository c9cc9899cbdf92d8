#pragma once
// Helpers for the test suites: temporary directories, files, and running the built programs.

#include <cstdint>
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

// This process's resident bytes (/proc/self/statm).
int64_t resident_bytes();

struct RunResult {
  int exit_code = -1;  // the exit status, or 128 + signal
  std::string out;     // standard output
  std::string err;     // standard error
  long peak_rss_kib = 0;  // the largest resident set of the process and the children it waited for
};

// Runs `argv` (argv[0] a path) with `env` added to this process's environment (an empty value
// unsets the variable) and `input` on stdin.
RunResult run(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env = {},
              const std::string& input = "");

// A program running in the background, its output going to files; killed if still running at
// destruction.
class BackgroundProcess {
 public:
  BackgroundProcess(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env = {});
  ~BackgroundProcess();
  BackgroundProcess(const BackgroundProcess&) = delete;
  BackgroundProcess& operator=(const BackgroundProcess&) = delete;
  int pid() const { return pid_; }
  std::string out() const;
  std::string err() const;
  // Waits until stdout contains `text` `count` times; false after `timeout_seconds`.
  bool wait_for_output(const std::string& text, double timeout_seconds, int count = 1) const;
  // The exit code (128 + signal when killed), or -1 when still running after `timeout_seconds`.
  int wait(double timeout_seconds);
  void signal(int signo) const;

 private:
  TempDir io_;
  int pid_ = -1;
  int exit_code_ = -1;
};

// The path of a built program, e.g. program("fairseq-cpp-train") ($FSQ_BIN_DIR, else the build tree).
std::string program(const std::string& name);
// The source tree's root ($FSQ_SOURCE_DIR, else the one built from).
std::string source_dir();
// The project's shared test data (fixtures/fairseq-v0.9, data/multi30k): $FSQ_SHARED, else the
// directory `shared` beside the source tree. The one place that the tests name it.
std::string shared_dir();
// The Python with torch that references and tools run under ($FSQ_PYTHON, else the build's: Debian's
// /usr/bin/python3 in the default lane, the virtual environment's in the wheel lane).
std::string python_executable();
// Runs one of tools/ (fairseq-import, fairseq-export, ...) under python_executable().
RunResult run_tool(const std::string& name, const std::vector<std::string>& args);

}  // namespace fairseq_cpp::testing
