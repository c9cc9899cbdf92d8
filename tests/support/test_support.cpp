#include "tests/support/test_support.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace fairseq_cpp::testing {
namespace fs = std::filesystem;

TempDir::TempDir() {
  std::string pattern = (fs::temp_directory_path() / "fsq-test-XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

std::string TempDir::write(const std::string& name, const std::string& content) const {
  std::string full = (fs::path(path_) / name).string();
  fs::create_directories(fs::path(full).parent_path());
  std::ofstream(full, std::ios::binary) << content;
  return full;
}

int64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t total = 0, resident = 0;
  statm >> total >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

namespace {
[[noreturn]] void exec_with(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                            const std::string& in_path, const std::string& out_path, const std::string& err_path) {
  int in = open(in_path.c_str(), O_RDONLY);
  int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  dup2(in, 0);
  dup2(out, 1);
  dup2(err, 2);
  for (const auto& [k, v] : env) {
    if (v.empty()) {
      unsetenv(k.c_str());
    } else {
      setenv(k.c_str(), v.c_str(), 1);
    }
  }
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  execv(args[0], args.data());
  _exit(127);
}

int decode_status(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

BackgroundProcess::BackgroundProcess(const std::vector<std::string>& argv,
                                     const std::map<std::string, std::string>& env) {
  std::string in_path = io_.write("stdin", "");
  pid_ = fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) exec_with(argv, env, in_path, io_.path() + "/stdout", io_.path() + "/stderr");
}

BackgroundProcess::~BackgroundProcess() {
  if (exit_code_ < 0 && pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

std::string BackgroundProcess::out() const { return read_file(io_.path() + "/stdout"); }
std::string BackgroundProcess::err() const { return read_file(io_.path() + "/stderr"); }

bool BackgroundProcess::wait_for_output(const std::string& text, double timeout_seconds, int count) const {
  double deadline = now_seconds() + timeout_seconds;
  while (now_seconds() < deadline) {
    std::string o = out();
    int found = 0;
    for (size_t at = o.find(text); at != std::string::npos; at = o.find(text, at + 1)) ++found;
    if (found >= count) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

int BackgroundProcess::wait(double timeout_seconds) {
  if (exit_code_ >= 0) return exit_code_;
  double deadline = now_seconds() + timeout_seconds;
  while (true) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) return exit_code_ = decode_status(status);
    if (now_seconds() >= deadline) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

void BackgroundProcess::signal(int signo) const { kill(pid_, signo); }

RunResult run(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
              const std::string& input) {
  TempDir io;
  std::string in_path = io.write("stdin", input);
  std::string out_path = io.path() + "/stdout";
  std::string err_path = io.path() + "/stderr";
  pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) exec_with(argv, env, in_path, out_path, err_path);
  int status = 0;
  struct rusage usage {};
  wait4(pid, &status, 0, &usage);
  RunResult r;
  r.exit_code = decode_status(status);
  r.peak_rss_kib = usage.ru_maxrss;
  r.out = read_file(out_path);
  r.err = read_file(err_path);
  return r;
}

// The environment's value, else the build's.
static std::string env_or(const char* name, const char* built_in) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : built_in;
}

std::string program(const std::string& name) { return env_or("FSQ_BIN_DIR", FSQ_BIN_DIR) + "/" + name; }
std::string source_dir() { return env_or("FSQ_SOURCE_DIR", FSQ_SOURCE_DIR); }

std::string shared_dir() {
  const char* v = std::getenv("FSQ_SHARED");
  return v != nullptr && *v != '\0' ? std::string(v) : source_dir() + "/../shared";
}

std::string python_executable() { return env_or("FSQ_PYTHON", FSQ_PYTHON); }

RunResult run_tool(const std::string& name, const std::vector<std::string>& args) {
  std::vector<std::string> argv{python_executable(), source_dir() + "/tools/" + name};
  argv.insert(argv.end(), args.begin(), args.end());
  return run(argv);
}

}  // namespace fairseq_cpp::testing
