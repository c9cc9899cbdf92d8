#pragma once
// The one place where errors become exit codes: every program's main runs its body through
// guarded_main. UserError (and ConfigError, one line per problem) => 2; any other failure => 1.
// Messages are one line, "fairseq-cpp-train: error: ..."; stack traces only with --debug.

#include <functional>
#include <string>
#include <vector>

namespace fairseq_cpp::core {

int guarded_main(const std::string& program, const std::function<int()>& body);

// `args` as main() and execv() take them: pointers into the strings, then a null pointer.
std::vector<char*> c_argv(const std::vector<std::string>& args);

}  // namespace fairseq_cpp::core
