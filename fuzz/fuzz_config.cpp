// The configuration as every program reads it: a YAML file, then the command line's
// `section.key=value` overrides and `--flag value`s, then validation; a config that loads is
// dumped (--dump-config, and a checkpoint's `cfg`) and must load back to the same dump.
// Input: the YAML file, optionally followed by a line "%%" and one command-line argument per line;
// a first argument "@generate" (or @preprocess, @interactive, @eval, @score) picks that program.
#include <string>
#include <string_view>
#include <vector>

#include "fairseq_cpp/config/command_line.h"
#include "fairseq_cpp/config/config.h"
#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/tasks/programs.h"
#include "fuzz/fuzz_util.h"

namespace {

const fairseq_cpp::config::ProgramSpec& spec_named(std::string_view name) {
  using namespace fairseq_cpp::tasks;
  if (name == "@generate") return generate_spec();
  if (name == "@preprocess") return preprocess_spec();
  if (name == "@interactive") return interactive_spec();
  if (name == "@eval") return eval_spec();
  if (name == "@score") return score_spec();
  return train_spec();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fairseq_cpp;
  std::string_view text = fuzz::as_text(data, size);
  std::string_view yaml = text, command_line;
  if (size_t at = text.find("\n%%\n"); at != std::string_view::npos) {
    yaml = text.substr(0, at);
    command_line = text.substr(at + 4);
  }
  std::vector<std::string> args;
  for (size_t start = 0; start < command_line.size();) {
    size_t end = std::min(command_line.find('\n', start), command_line.size());
    args.emplace_back(command_line.substr(start, end - start));
    start = end + 1;
  }
  const config::ProgramSpec& spec = spec_named(args.empty() ? "" : args[0]);
  if (!args.empty() && args[0].rfind('@', 0) == 0) args.erase(args.begin());
  // The YAML is always this file: a config path in the input names no real file.
  const std::string path = fuzz::scratch_dir() + "/config.yaml";
  fuzz::write_file(path, yaml);
  config::Config cfg;
  try {
    config::CommandLine cl = config::parse_command_line(spec, args);
    cfg = config::load_config(path, cl.assignments);
  } catch (const UserError&) {
    return 0;  // ConfigError lists one problem per line
  }
  const std::string dump = config::dump_config(cfg);
  const std::string dumped_path = fuzz::scratch_dir() + "/dumped.yaml";
  fuzz::write_file(dumped_path, dump);
  try {
    if (config::dump_config(config::load_config(dumped_path)) != dump)
      fuzz::finding("a dumped config loads back to other values:\n" + dump);
  } catch (const ConfigError& e) {
    fuzz::finding(std::string("a dumped config does not load: ") + e.what() + "\n" + dump);
  }
  return 0;
}
