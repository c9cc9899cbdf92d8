// fairseq-cpp-eval's body: `validate` (fairseq-validate) or `score` (fairseq-score, with sacreBLEU's
// BLEU and chrF).
#include <iostream>
#include <iterator>
#include <sstream>

#include <fmt/core.h>

#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/data/text.h"
#include "fairseq_cpp/generation/sacrebleu.h"
#include "fairseq_cpp/tasks/compute_setup.h"
#include "fairseq_cpp/tasks/programs.h"
#include "fairseq_cpp/tasks/validate.h"

namespace fairseq_cpp::tasks {
namespace {

std::vector<std::string> read_lines(const std::string& path, const char* flag) {
  if (path.empty()) raise<UserError>("no {} file given: fairseq-cpp-eval score --sys HYP --ref REF", flag);
  data::TextFile text = [&] {
    if (path != "-") return data::TextFile::read(path);
    std::string content((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    return data::TextFile::from_string(std::move(content), "<stdin>");
  }();
  std::vector<std::string> lines;
  lines.reserve(text.size());
  for (auto line : text.lines()) lines.emplace_back(generation::rstrip(line));
  return lines;
}

int score_main(const config::Config& cfg) {
  std::vector<std::string> metrics;
  std::stringstream list(cfg.scoring.metric);
  for (std::string m; std::getline(list, m, ',');) {
    if (m.empty()) continue;
    if (m != "bleu" && m != "chrf") raise<UserError>("--metric: unknown metric `{}`; expected bleu and/or chrf", m);
    metrics.push_back(m);
  }
  if (metrics.empty()) raise<UserError>("--metric names no metric; expected bleu and/or chrf");
  if (cfg.scoring.sys == "-" && cfg.scoring.ref == "-") raise<UserError>("--sys and --ref cannot both be stdin");
  const std::vector<std::string> sys = read_lines(cfg.scoring.sys, "--sys");
  const std::vector<std::string> ref = read_lines(cfg.scoring.ref, "--ref");
  if (sys.size() != ref.size()) {
    raise<UserError>("{} has {} lines but {} has {}: --sys and --ref must have one line per sentence", cfg.scoring.sys,
                     sys.size(), cfg.scoring.ref, ref.size());
  }
  for (const std::string& m : metrics) {
    if (m == "bleu") fmt::print("{}\n", generation::format_bleu(generation::corpus_bleu(sys, ref)));
    if (m == "chrf") fmt::print("{}\n", generation::format_chrf(generation::corpus_chrf(sys, ref)));
  }
  return kExitOk;
}

}  // namespace

int eval_main(const Invocation& inv) {
  if (inv.command_line.subcommand == "validate") {
    setup_compute(inv.config);
    return validate_main(inv);
  }
  if (inv.command_line.subcommand == "score") return score_main(inv.config);
  raise<UserError>("unknown subcommand `{}`: use `validate` or `score`", inv.command_line.subcommand);
}

}  // namespace fairseq_cpp::tasks
