#pragma once
// The command line of every program, fairseq-style:
//   fairseq-cpp-train configs/demo.yaml optimization.lr=3e-4 --max-update 100 --fp16
//   fairseq-cpp-generate data-bin --path checkpoints/checkpoint_best.pt --beam 5
// A *.yaml/*.yml argument is the config file; `section.key=value` and `--flag value` (every key's
// flag is its name with dashes) override it in order; a bare word is the program's positional key
// (e.g. `task.data`) or its subcommand. --help, --dump-config and --debug work everywhere.

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "fairseq_cpp/config/config.h"

namespace fairseq_cpp::config {

struct ProgramSpec {
  std::string name;                   // "fairseq-cpp-train"
  std::string usage;                  // "fairseq-cpp-train [CONFIG.yaml] [section.key=value ...] [--flag ...]"
  std::string description;            // a few lines for --help
  std::vector<std::string> sections;  // sections that --help lists; empty = all
  std::string positional_key;         // key that a bare argument sets (e.g. "task.data"); empty = none
  std::vector<std::pair<std::string, std::string>> switches;     // program flags without a value: name, help
  std::vector<std::pair<std::string, std::string>> subcommands;  // first bare word: name, help
};

struct CommandLine {
  bool help = false;                    // --help / -h
  bool dump_config = false;             // --dump-config: print the resolved config and exit
  bool debug = false;                   // --debug: stack traces with errors
  std::string config_file;              // the *.yaml argument; empty = none
  std::string subcommand;               // one of ProgramSpec::subcommands; empty = none
  std::vector<Assignment> assignments;  // overrides in command-line order
  std::set<std::string> switches;       // program switches given
};

// Parses argv[1..]; throws ConfigError listing every bad argument (unknown flags with the
// nearest known one, a flag without its value, two config files, ...).
CommandLine parse_command_line(const ProgramSpec& spec, const std::vector<std::string>& args);

// The full --help text: usage, description, switches, subcommands and every key of spec.sections.
std::string help_text(const ProgramSpec& spec);

}  // namespace fairseq_cpp::config
