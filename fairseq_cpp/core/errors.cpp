#include "fairseq_cpp/core/errors.h"

#include <cxxabi.h>
#include <execinfo.h>

#include <atomic>
#include <cstdlib>
#include <memory>

namespace fairseq_cpp {
namespace {

std::atomic<bool> g_debug{false};

// "binary(_ZN3foo3barEv+0x1a) [0x...]" => "foo::bar()"
std::string demangle_frame(const char* frame) {
  std::string text(frame);
  auto open = text.find('(');
  auto plus = text.find('+', open == std::string::npos ? 0 : open);
  if (open == std::string::npos || plus == std::string::npos || plus == open + 1) return text;
  std::string mangled = text.substr(open + 1, plus - open - 1);
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> name(abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status),
                                              std::free);
  return status == 0 && name ? std::string(name.get()) : mangled;
}

std::string capture_backtrace() {
  void* frames[64];
  int n = ::backtrace(frames, 64);
  std::unique_ptr<char*, void (*)(void*)> symbols(::backtrace_symbols(frames, n), std::free);
  std::string out;
  for (int i = 2; symbols && i < n; ++i) out += fmt::format("  #{} {}\n", i - 2, demangle_frame(symbols.get()[i]));
  return out;
}

std::string join_problems(const std::vector<std::string>& problems) {
  std::string out;
  for (const auto& p : problems) out += (out.empty() ? "" : "\n") + p;
  return out;
}

}  // namespace

Error::Error(const std::string& message) : std::runtime_error(message) {
  if (g_debug.load()) backtrace_ = capture_backtrace();
}

ConfigError::ConfigError(std::vector<std::string> problems)
    : UserError(join_problems(problems)), problems_(std::move(problems)) {}

namespace core {
std::string torch_message(const std::string& what) {
  const std::string line = what.substr(0, what.find('\n'));
  if (line.find("INTERNAL ASSERT") != std::string::npos || line.find("please report a bug") != std::string::npos)
    return "an internal check of LibTorch failed on this input (--debug shows LibTorch's message)";
  return line;
}

void set_debug(bool on) { g_debug.store(on); }
bool debug_enabled() { return g_debug.load(); }
}  // namespace core

}  // namespace fairseq_cpp
