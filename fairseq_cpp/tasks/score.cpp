// fairseq-cpp-score, and fairseq-cpp-eval's `score`: sacreBLEU's metrics of a hypothesis file against
// one or more reference files (scoring/). No LibTorch: fairseq-cpp-score starts in milliseconds.
#include <iostream>
#include <iterator>
#include <sstream>

#include <fmt/core.h>

#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/data/text.h"
#include "fairseq_cpp/scoring/scorer.h"
#include "fairseq_cpp/tasks/programs.h"

namespace fairseq_cpp::tasks {
namespace {

// A file's lines with trailing whitespace removed, as sacreBLEU's command line reads them.
std::vector<std::string> read_lines(const std::string& path, const char* flag) {
  if (path.empty()) raise<UserError>("no {} file given: fairseq-cpp-eval score --sys HYP --ref REF [REF ...]", flag);
  data::TextFile text = [&] {
    if (path != "-") return data::TextFile::read(path);
    std::string content((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    return data::TextFile::from_string(std::move(content), "<stdin>");
  }();
  std::vector<std::string> lines;
  lines.reserve(text.size());
  for (auto line : text.lines()) lines.emplace_back(data::rstrip(line));
  return lines;
}

scoring::ScoringOptions scoring_options(const config::ScoringConfig& c) {
  scoring::ScoringOptions o;
  o.tokenize = c.tokenize;
  o.lowercase = c.lowercase;
  o.smooth_method = c.smooth_method;
  o.smooth_value = c.smooth_value;
  o.chrf_char_order = static_cast<int>(c.chrf_char_order);
  o.chrf_word_order = static_cast<int>(c.chrf_word_order);
  o.chrf_beta = static_cast<int>(c.chrf_beta);
  o.chrf_whitespace = c.chrf_whitespace;
  o.chrf_lowercase = c.chrf_lowercase;
  o.chrf_eps_smoothing = c.chrf_eps_smoothing;
  o.ter_case_sensitive = c.ter_case_sensitive;
  o.ter_normalized = c.ter_normalized;
  o.ter_no_punct = c.ter_no_punct;
  o.ter_asian_support = c.ter_asian_support;
  return o;
}

}  // namespace

int score_main(const config::Config& cfg) {
  const config::ScoringConfig& c = cfg.scoring;
  std::vector<std::unique_ptr<scoring::Scorer>> scorers;
  std::stringstream list(c.metric);
  for (std::string m; std::getline(list, m, ',');)
    if (!m.empty()) scorers.push_back(scoring::make_scorer(m, scoring_options(c)));
  if (scorers.empty()) raise<UserError>("--metric names no metric; expected some of bleu, chrf, chrf++, ter");
  if (c.ref.empty()) raise<UserError>("no --ref file given: fairseq-cpp-eval score --sys HYP --ref REF [REF ...]");
  int stdin_files = c.sys == "-";
  for (const std::string& r : c.ref) stdin_files += r == "-";
  if (stdin_files > 1) raise<UserError>("only one of --sys and --ref can be standard input (-)");
  const std::vector<std::string> sys = read_lines(c.sys, "--sys");
  std::vector<std::vector<std::string>> refs;
  for (const std::string& r : c.ref) {
    refs.push_back(read_lines(r, "--ref"));
    if (refs.back().size() != sys.size()) {
      raise<UserError>("{} has {} lines but {} has {}: --sys and each --ref must have one line per sentence", c.sys,
                       sys.size(), r, refs.back().size());
    }
  }
  std::vector<std::string_view> segment_refs(refs.size());
  for (size_t i = 0; i < sys.size(); ++i) {
    for (size_t k = 0; k < refs.size(); ++k) segment_refs[k] = refs[k][i];
    for (auto& scorer : scorers) scorer->add(std::string_view(sys[i]), segment_refs);
  }
  for (const auto& scorer : scorers)
    fmt::print("{}\n", scorer->format(scorer->score(), static_cast<int>(c.width)));
  return kExitOk;
}


int score_program_main(const Invocation& inv) { return score_main(inv.config); }

}  // namespace fairseq_cpp::tasks
