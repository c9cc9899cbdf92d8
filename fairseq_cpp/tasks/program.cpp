#include "fairseq_cpp/tasks/program.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include <fmt/core.h>

#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/core/logging.h"
#include "fairseq_cpp/core/main.h"
#include "fairseq_cpp/tasks/programs.h"

namespace fairseq_cpp::tasks {
namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  long parsed = std::strtol(v, &end, 10);
  return *end == '\0' && parsed > 0 ? static_cast<int>(parsed) : fallback;
}

// Parses the command line and resolves the config into `inv`; returns the exit code when that
// answers the invocation (--help, --dump-config). Errors are thrown, for core::guarded_main.
std::optional<int> prepare(int argc, char** argv, const config::ProgramSpec& spec, Invocation& inv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  for (const auto& a : args)
    if (a == "--debug") core::set_debug(true);
  inv.argv.assign(argv, argv + argc);
  inv.command_line = config::parse_command_line(spec, args);
  if (inv.command_line.help) {
    fmt::print("{}", config::help_text(spec));
    return kExitOk;
  }
  if (auto unread = config::unread_keys(spec, inv.command_line, all_program_specs()); !unread.empty())
    throw ConfigError(std::move(unread));
  inv.config = config::load_config(inv.command_line.config_file, inv.command_line.assignments);
  if (inv.command_line.dump_config) {
    fmt::print("{}", config::dump_config(inv.config));
    return kExitOk;
  }
  return std::nullopt;
}

}  // namespace

int run_program(int argc, char** argv, const config::ProgramSpec& spec, const ProgramBody& body) {
  return core::guarded_main(spec.name, [&]() -> int {
    Invocation inv;
    if (std::optional<int> answered = prepare(argc, argv, spec, inv)) return *answered;
    const auto& common = inv.config.common;
    log::LogOptions log_options;
    log_options.all_ranks = common.log_all_ranks;
    log_options.file = common.log_file;
    log_options.rank = env_int("RANK", env_int("SLURM_PROCID", 0));
    log::configure(log_options);
    return body(inv);
  });
}

int run_program(const std::vector<std::string>& argv, const config::ProgramSpec& spec, const ProgramBody& body) {
  std::vector<char*> args = core::c_argv(argv);
  return run_program(static_cast<int>(argv.size()), args.data(), spec, body);
}

std::optional<int> answer_without_running(int argc, char** argv, const config::ProgramSpec& spec) {
  std::optional<int> answered;
  const int code = core::guarded_main(spec.name, [&]() -> int {
    Invocation inv;
    answered = prepare(argc, argv, spec, inv);
    return kExitOk;
  });
  if (code != kExitOk) return code;  // refused, and said why
  return answered;
}

}  // namespace fairseq_cpp::tasks
