#include "fairseq_cpp/tasks/program.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include <fmt/core.h>

#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/core/logging.h"
#include "fairseq_cpp/core/main.h"
#include "fairseq_cpp/core/runtime.h"

namespace fairseq_cpp::tasks {
namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  long parsed = std::strtol(v, &end, 10);
  return *end == '\0' && parsed > 0 ? static_cast<int>(parsed) : fallback;
}

}  // namespace

int local_processes_hint(const config::Config& cfg) {
  int local = env_int("LOCAL_WORLD_SIZE", 0);
  if (local > 0) return local;
  // SLURM writes "8" or "8(x2)" (8 tasks on each of 2 nodes): the leading count is this node's.
  if (const char* per_node = std::getenv("SLURM_NTASKS_PER_NODE"); per_node != nullptr) {
    local = static_cast<int>(std::strtol(per_node, nullptr, 10));
    if (local > 0) return local;
  }
  return static_cast<int>(std::max<int64_t>(1, cfg.distributed_training.distributed_world_size));
}

int run_program(int argc, char** argv, const config::ProgramSpec& spec, const ProgramBody& body) {
  return core::guarded_main(spec.name, [&]() -> int {
    std::vector<std::string> args(argv + 1, argv + argc);
    for (const auto& a : args)
      if (a == "--debug") core::set_debug(true);
    Invocation inv;
    inv.argv.assign(argv, argv + argc);
    inv.command_line = config::parse_command_line(spec, args);
    if (inv.command_line.help) {
      fmt::print("{}", config::help_text(spec));
      return kExitOk;
    }
    inv.config = config::load_config(inv.command_line.config_file, inv.command_line.assignments);
    if (inv.command_line.dump_config) {
      fmt::print("{}", config::dump_config(inv.config));
      return kExitOk;
    }
    const auto& common = inv.config.common;
    log::LogOptions log_options;
    log_options.all_ranks = common.log_all_ranks;
    log_options.file = common.log_file;
    log_options.rank = env_int("RANK", env_int("SLURM_PROCID", 0));
    log::configure(log_options);
    if (spec.computes) {
      inv.cpu_threads =
          core::configure_cpu_threads(static_cast<int>(common.cpu_threads), local_processes_hint(inv.config));
      log::info("runtime", "{} intra-op CPU threads", inv.cpu_threads);
      core::warn_if_slow_blas();
    }
    return body(inv);
  });
}

}  // namespace fairseq_cpp::tasks
