#include "fairseq_cpp/config/command_line.h"

#include <algorithm>

#include <fmt/format.h>

#include "fairseq_cpp/core/errors.h"

namespace fairseq_cpp::config {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_yaml_path(const std::string& arg) { return ends_with(arg, ".yaml") || ends_with(arg, ".yml"); }

// "optimization.lr=3e-4": a dotted key before the first '='.
bool is_assignment(const std::string& arg) {
  auto eq = arg.find('=');
  if (eq == std::string::npos || eq == 0) return false;
  auto dot = arg.find('.');
  return dot != std::string::npos && dot < eq && arg.find('/') > eq;
}

// Whether `arg` can be a further value of a list flag: not a flag (a lone "-" is standard input),
// not a config file, not a section.key=value assignment.
bool takes_list_value(const std::string& arg) {
  return (arg == "-" || arg.rfind('-', 0) != 0) && !is_yaml_path(arg) && !is_assignment(arg);
}

// `text` as a YAML double-quoted scalar: read back exactly.
std::string yaml_quoted(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + '"';
}

// ["a", "b"]: values as a YAML flow list of double-quoted strings (YAML reads numbers in quotes as
// the list's element type).
std::string yaml_flow_list(const std::vector<std::string>& values) {
  std::string out = "[";
  for (size_t i = 0; i < values.size(); ++i) out += (i ? ", " : "") + yaml_quoted(values[i]);
  return out + "]";
}

// fairseq flags that fairseq-cpp will not take, with the reason; empty for any other flag.
std::string outside_scope(const std::string& flag) {
  if (flag == "user-dir")
    return "its plugins are Python modules, and fairseq-cpp loads no Python; the models, tasks and criteria it "
           "has are built in (`--help` lists them)";
  return "";
}

bool has_switch(const ProgramSpec& spec, const std::string& name) {
  return std::any_of(spec.switches.begin(), spec.switches.end(), [&](const auto& s) { return s.first == name; });
}

const Subcommand* find_subcommand(const ProgramSpec& spec, const std::string& name) {
  for (const auto& sub : spec.subcommands)
    if (sub.name == name) return &sub;
  return nullptr;
}

bool in_key_set(const KeySet& keys, const std::string& key) {
  const std::string section = key.substr(0, key.find('.'));
  return std::any_of(keys.begin(), keys.end(), [&](const std::string& k) { return k == key || k == section; });
}

}  // namespace

namespace {

// The problem with `--NAME`, which is no flag: with the nearest flag named. When the flag meant
// takes a value (`--beem 5`), the next argument is that value, not a stray argument of its own to
// blame as well: `i` moves past it.
std::string unknown_flag(const ProgramSpec& spec, const std::vector<std::string>& args, size_t& i,
                         const std::string& name, bool has_value, const std::string& origin) {
  std::vector<std::string> known = all_flags();
  for (const auto& s : spec.switches) known.push_back(s.first);
  for (const char* builtin : {"help", "dump-config", "debug"}) known.emplace_back(builtin);
  std::string guess = nearest(name, known);
  bool guess_is_switch = false, guess_is_list = false, guess_is_string = false;
  if (!has_value && !guess.empty() && i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0 &&
      !key_for_flag(guess, &guess_is_switch, &guess_is_list, &guess_is_string).empty() && !guess_is_switch)
    ++i;
  return guess.empty() ? fmt::format("{}: `--{}` is not a flag of {}; `--help` lists them.", origin, name, spec.name)
                       : fmt::format("{}: `--{}` is not a flag; did you mean `--{}`?", origin, name, guess);
}

// One `--NAME[=VALUE]` flag at args[i] (`i` moves past the values it takes): a switch of the
// program, or an assignment to the key it sets; a problem otherwise.
void parse_flag(const ProgramSpec& spec, const std::vector<std::string>& args, size_t& i, CommandLine& cl,
                std::vector<std::string>& problems) {
  const std::string origin = fmt::format("argument {} `{}`", i + 1, args[i]);
  std::string name = args[i].substr(2);
  std::string value;
  bool has_value = false;
  if (auto eq = name.find('='); eq != std::string::npos) {
    value = name.substr(eq + 1);
    name = name.substr(0, eq);
    has_value = true;
  }
  if (has_switch(spec, name)) {
    if (has_value) problems.push_back(fmt::format("{}: `--{}` takes no value.", origin, name));
    cl.switches.insert(name);
    return;
  }
  if (auto reason = outside_scope(name); !reason.empty()) {
    if (!has_value && i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) ++i;  // its value goes with it
    problems.push_back(fmt::format("{}: fairseq's `--{}` is outside fairseq-cpp: {}.", origin, name, reason));
    return;
  }
  bool is_switch = false, is_list = false, is_string = false;
  std::optional<std::string> bare;
  std::string key = key_for_flag(name, &is_switch, &is_list, &is_string, &bare);
  if (key.empty()) {
    problems.push_back(unknown_flag(spec, args, i, name, has_value, origin));
    return;
  }
  if (!has_value) {
    if (is_switch) {
      value = "true";
    } else if (bare && (i + 1 == args.size() || args[i + 1].rfind("--", 0) == 0)) {
      value = *bare;  // `--remove-bpe` alone, as argparse's nargs='?'
    } else if (i + 1 < args.size()) {
      value = args[++i];
      // A list flag takes the values up to the next flag, assignment or config file, as
      // argparse's nargs='+': `--ref a.de b.de`, `--lr 0.25 0.1`.
      std::vector<std::string> values{value};
      while (is_list && i + 1 < args.size() && takes_list_value(args[i + 1])) values.push_back(args[++i]);
      if (values.size() > 1) {
        value = yaml_flow_list(values);
        is_string = false;  // quoted already
      }
    } else {
      problems.push_back(fmt::format("{}: `--{}` needs a value (it sets `{}`).", origin, name, key));
      return;
    }
  }
  const std::string source = fmt::format("--{} {}", name, value);
  cl.assignments.push_back({key, is_string ? yaml_quoted(value) : value, source});
}

}  // namespace

CommandLine parse_command_line(const ProgramSpec& spec, const std::vector<std::string>& args) {
  CommandLine cl;
  std::vector<std::string> problems;
  bool positional_taken = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    std::string origin = fmt::format("argument {} `{}`", i + 1, arg);
    if (arg == "--help" || arg == "-h") {
      cl.help = true;
    } else if (arg == "--dump-config") {
      cl.dump_config = true;
    } else if (arg == "--debug") {
      cl.debug = true;
    } else if (arg.rfind("--", 0) == 0 && arg.size() > 2) {
      parse_flag(spec, args, i, cl, problems);
    } else if (is_assignment(arg)) {
      auto eq = arg.find('=');
      cl.assignments.push_back({arg.substr(0, eq), arg.substr(eq + 1), fmt::format("command line `{}`", arg)});
    } else if (is_yaml_path(arg)) {
      if (!cl.config_file.empty())
        problems.push_back(fmt::format("{}: a second config file; `{}` was given already (use overrides instead).",
                                       origin, cl.config_file));
      cl.config_file = arg;
    } else if (cl.subcommand.empty() && find_subcommand(spec, arg) != nullptr) {
      cl.subcommand = arg;
    } else if (!spec.positional_key.empty() && !positional_taken) {
      positional_taken = true;
      cl.assignments.push_back({spec.positional_key, arg, fmt::format("argument {} `{}`", i + 1, arg)});
    } else {
      problems.push_back(fmt::format("{}: unexpected argument; expected {}.", origin,
                                     spec.usage.empty() ? "a config file, section.key=value or --flag" : spec.usage));
    }
  }
  if (!spec.subcommands.empty() && cl.subcommand.empty() && !cl.help) {
    std::string names;
    for (const auto& s : spec.subcommands) names += fmt::format("{}{}", names.empty() ? "" : ", ", s.name);
    problems.push_back(fmt::format("{} needs a subcommand: one of {}.", spec.name, names));
  }
  if (!problems.empty()) throw ConfigError(std::move(problems));
  return cl;
}

std::string help_text(const ProgramSpec& spec) {
  std::string out = fmt::format("usage: {}\n\n{}\n", spec.usage, spec.description);
  if (!spec.subcommands.empty()) {
    out += "\nsubcommands:\n";
    for (const auto& sub : spec.subcommands) out += fmt::format("  {:<24} {}\n", sub.name, sub.help);
  }
  out += "\noptions:\n";
  out += fmt::format("  {:<24} {}\n", "-h, --help", "show this help and exit");
  out += fmt::format("  {:<24} {}\n", "--dump-config", "print the resolved configuration as YAML and exit");
  out += fmt::format("  {:<24} {}\n", "--debug", "print stack traces with errors");
  for (const auto& [name, help] : spec.switches) out += fmt::format("  {:<24} {}\n", "--" + name, help);
  out += fmt::format("\nconfiguration keys that {} reads (YAML `section: {{key: value}}`, `section.key=value` or "
                     "`--flag value`):\n",
                     spec.name);
  out += describe_keys(spec.keys);
  for (const auto& sub : spec.subcommands) {
    if (sub.keys.empty()) continue;
    out += fmt::format("\nkeys that `{} {}` reads as well:\n", spec.name, sub.name);
    out += describe_keys(sub.keys);
  }
  return out;
}

bool reads_key(const ProgramSpec& spec, const std::string& subcommand, const std::string& key) {
  if (spec.keys.empty() || in_key_set(spec.keys, key)) return true;
  const Subcommand* sub = find_subcommand(spec, subcommand);
  return sub != nullptr && in_key_set(sub->keys, key);
}

namespace {

// " (fairseq-cpp-train and fairseq-cpp-eval validate read it)": the programs of `all` that read `key`.
std::string readers_of(const std::string& key, const std::vector<const ProgramSpec*>& all) {
  std::vector<std::string> names;
  for (const ProgramSpec* program : all) {
    if (reads_key(*program, "", key)) {
      names.push_back(program->name);
      continue;
    }
    for (const auto& sub : program->subcommands)
      if (in_key_set(sub.keys, key)) names.push_back(program->name + " " + sub.name);
  }
  if (names.empty()) return "";
  std::string out = " (";
  for (size_t i = 0; i < names.size(); ++i)
    out += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + names[i];
  return out + (names.size() == 1 ? " reads it)" : " read it)");
}

}  // namespace

std::vector<std::string> unread_keys(const ProgramSpec& spec, const CommandLine& cl,
                                     const std::vector<const ProgramSpec*>& all) {
  std::vector<std::string> problems;
  for (const Assignment& a : cl.assignments) {
    const std::string key = canonical_key(a.key);
    if (key.empty() || reads_key(spec, cl.subcommand, key)) continue;  // an unknown key: load_config says so
    const std::string program = cl.subcommand.empty() ? spec.name : spec.name + " " + cl.subcommand;
    const std::string readers = readers_of(key, all);
    problems.push_back(fmt::format("{}: {} does not read `{}`{}; `{} --help` lists the keys it reads.", a.origin,
                                   program, key, readers, spec.name));
  }
  return problems;
}

}  // namespace fairseq_cpp::config
