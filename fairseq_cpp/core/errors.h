#pragma once
// Typed errors. Every error the library throws derives from Error and knows its exit code:
// UserError (2: bad config, bad input, missing file) or OperationalError (1: I/O, network, peers).
// Throw with fmt messages through raise<E>(...); one place per program maps them to exit codes
// (core/main.h).

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <fmt/core.h>

namespace fairseq_cpp {

inline constexpr int kExitOk = 0;
inline constexpr int kExitOperational = 1;
inline constexpr int kExitUserError = 2;

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message);
  virtual int exit_code() const = 0;
  // The stack at the throw site, when core::set_debug(true) was called before; else empty.
  const std::string& backtrace() const { return backtrace_; }

 private:
  std::string backtrace_;
};

// The user can fix it: bad config, bad input file, bad flag. Exit code 2.
class UserError : public Error {
 public:
  using Error::Error;
  int exit_code() const override { return kExitUserError; }
};

// Something failed while running: I/O, a peer, resources. Exit code 1.
class OperationalError : public Error {
 public:
  using Error::Error;
  int exit_code() const override { return kExitOperational; }
};

// A configuration with one or more problems; every problem is one line in `problems()`.
class ConfigError : public UserError {
 public:
  explicit ConfigError(std::vector<std::string> problems);
  const std::vector<std::string>& problems() const { return problems_; }

 private:
  std::vector<std::string> problems_;
};

// Bad data on disk (a data-bin, a dictionary, a text file): names the file and the line or field.
class DataError : public UserError {
 public:
  using UserError::UserError;
};

// A feature asked for exists in fairseq but not (yet) here.
class NotImplementedError : public OperationalError {
 public:
  using OperationalError::OperationalError;
};

template <typename E, typename... Args>
[[noreturn]] void raise(fmt::format_string<Args...> format, Args&&... args) {
  throw E(fmt::format(format, std::forward<Args>(args)...));
}

namespace core {
// The first line of a LibTorch error message (c10::Error::what_without_backtrace()), for one-line
// errors; LibTorch's internal assertions ("... INTERNAL ASSERT FAILED ... please report a bug")
// become a plain sentence, since they are not the user's to read.
std::string torch_message(const std::string& what);
// With debug on, errors capture a stack trace where they are thrown (the --debug flag).
void set_debug(bool on);
bool debug_enabled();
}  // namespace core

}  // namespace fairseq_cpp
