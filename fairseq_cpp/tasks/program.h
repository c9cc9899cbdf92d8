#pragma once
// What every program does before its own work: parse the command line, answer --help and
// --dump-config, load and validate the config, set up logging, then run the program's body;
// errors become exit codes in one place (core/main.h). Bodies that compute call
// setup_compute (tasks/compute_setup.h) first.
//
//   int main(int argc, char** argv) { return run_program(argc, argv, kSpec, train_main); }

#include <functional>
#include <optional>

#include "fairseq_cpp/config/command_line.h"

namespace fairseq_cpp::tasks {

struct Invocation {
  std::vector<std::string> argv;     // the program's arguments, argv[0] first
  config::CommandLine command_line;  // what was asked
  config::Config config;             // the resolved, validated config
};

using ProgramBody = std::function<int(const Invocation&)>;

int run_program(int argc, char** argv, const config::ProgramSpec& spec, const ProgramBody& body);
// The same from an Invocation's argv: a forked worker runs its program again (LaunchOptions::rerun).
int run_program(const std::vector<std::string>& argv, const config::ProgramSpec& spec, const ProgramBody& body);

// What run_program does before the body, alone: answers --help and --dump-config, and refuses a
// bad command line or config with run_program's messages; returns the exit code then, or nullopt
// when the program has work to do. The launchers (cli/launch.cpp) call it, so that these answers
// come without loading LibTorch (about 1 s of CPU per start with Debian's).
std::optional<int> answer_without_running(int argc, char** argv, const config::ProgramSpec& spec);

}  // namespace fairseq_cpp::tasks
