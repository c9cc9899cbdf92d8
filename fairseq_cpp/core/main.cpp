#include "fairseq_cpp/core/main.h"

#include <c10/util/Exception.h>

#include <cstdio>
#include <new>

#include <fmt/core.h>

#include "fairseq_cpp/core/errors.h"

namespace fairseq_cpp::core {
namespace {

void print_error(const std::string& program, const std::string& message) {
  std::fflush(stdout);
  fmt::print(stderr, "{}: error: {}\n", program, message);
}

}  // namespace

std::vector<char*> c_argv(const std::vector<std::string>& args) {
  std::vector<char*> out;
  for (const auto& a : args) out.push_back(const_cast<char*>(a.c_str()));
  out.push_back(nullptr);
  return out;
}

int guarded_main(const std::string& program, const std::function<int()>& body) {
  try {
    return body();
  } catch (const ConfigError& e) {
    for (const auto& problem : e.problems()) print_error(program, problem);
    if (!e.backtrace().empty()) fmt::print(stderr, "{}", e.backtrace());
    return e.exit_code();
  } catch (const Error& e) {
    print_error(program, e.what());
    if (!e.backtrace().empty()) fmt::print(stderr, "{}", e.backtrace());
    return e.exit_code();
  } catch (const c10::Error& e) {
    print_error(program,
                "LibTorch: " + (debug_enabled() ? std::string(e.what()) : core::torch_message(e.what_without_backtrace())));
    return kExitOperational;
  } catch (const std::bad_alloc&) {
    print_error(program, "out of memory");
    return kExitOperational;
  } catch (const std::exception& e) {
    print_error(program, e.what());
    return kExitOperational;
  }
}

}  // namespace fairseq_cpp::core
