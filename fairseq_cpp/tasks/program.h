#pragma once
// What every program does before its own work: parse the command line, answer --help and
// --dump-config, load and validate the config, set up logging, threads and the BLAS check,
// then run the program's body; errors become exit codes in one place (core/main.h).
//
//   int main(int argc, char** argv) { return run_program(argc, argv, kSpec, train_main); }

#include <functional>

#include "fairseq_cpp/config/command_line.h"

namespace fairseq_cpp::tasks {

struct Invocation {
  std::vector<std::string> argv;     // the program's arguments, argv[0] first
  config::CommandLine command_line;  // what was asked
  config::Config config;             // the resolved, validated config
  int cpu_threads = 0;               // intra-op threads set (0 when the program computes nothing)
};

using ProgramBody = std::function<int(const Invocation&)>;

int run_program(int argc, char** argv, const config::ProgramSpec& spec, const ProgramBody& body);

// Local processes on this node, as far as the environment tells before any spawn:
// LOCAL_WORLD_SIZE (torchrun), SLURM_NTASKS_PER_NODE, else distributed_world_size.
int local_processes_hint(const config::Config& cfg);

}  // namespace fairseq_cpp::tasks
