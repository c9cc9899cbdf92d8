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

// The keys a program (or one of its subcommands) reads: "section" for every key of a section,
// "section.key" for one. --help lists them; a key outside them on the command line is refused.
using KeySet = std::vector<std::string>;

struct Subcommand {
  std::string name;  // the first bare word, e.g. "validate"
  std::string help;
  KeySet keys;  // what it reads beside the program's own keys
};

struct ProgramSpec {
  std::string name;            // "fairseq-cpp-train"
  std::string usage;           // "fairseq-cpp-train [CONFIG.yaml] [section.key=value ...] [--flag ...]"
  std::string description;     // a few lines for --help
  KeySet keys;                 // what the program reads; empty = every key
  std::string positional_key;  // key that a bare argument sets (e.g. "task.data"); empty = none
  std::vector<std::pair<std::string, std::string>> switches;  // program flags without a value: name, help
  std::vector<Subcommand> subcommands;
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

// The full --help text: usage, description, switches, subcommands and every key the program reads.
std::string help_text(const ProgramSpec& spec);

// Whether `spec` (with `subcommand`, empty = none) reads `key` ("section.key", aliases resolved).
bool reads_key(const ProgramSpec& spec, const std::string& subcommand, const std::string& key);

// One line per assignment of `cl` (the command line; a config file may serve several programs) to
// a key that `spec` does not read, naming the programs of `all` that do read it.
std::vector<std::string> unread_keys(const ProgramSpec& spec, const CommandLine& cl,
                                     const std::vector<const ProgramSpec*>& all);

}  // namespace fairseq_cpp::config
