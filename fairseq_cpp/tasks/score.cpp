// fairseq-cpp-score, and fairseq-cpp-eval's `score`: sacreBLEU's metrics of a hypothesis file against
// one or more reference files (scoring/). No LibTorch: fairseq-cpp-score starts in milliseconds.
#include <sched.h>

#include <algorithm>
#include <iostream>
#include <iterator>
#include <sstream>
#include <thread>

#include <fmt/core.h>

#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/data/text.h"
#include "fairseq_cpp/scoring/report.h"
#include "fairseq_cpp/scoring/scorer.h"
#include "fairseq_cpp/scoring/significance.h"
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

// The cores this process may run on.
int available_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
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

// The metrics of --metric, checked before any file is read.
std::vector<std::string> metric_list(const config::ScoringConfig& c) {
  std::vector<std::string> metrics;
  std::stringstream list(c.metric);
  for (std::string m; std::getline(list, m, ',');)
    if (!m.empty()) metrics.push_back(m);
  if (metrics.empty()) raise<UserError>("--metric names no metric; expected some of bleu, chrf, chrf++, ter");
  for (const std::string& m : metrics) scoring::make_scorer(m, scoring_options(c));
  return metrics;
}

struct Inputs {
  std::vector<std::string> names;                // the systems, named by their paths
  std::vector<std::vector<std::string>> systems;  // [system][segment]
  std::vector<std::vector<std::string>> refs;     // [reference][segment]
};

// The systems and references, each with one line per segment. In a paired test the baseline's
// path given again is skipped, as sacreBLEU does.
Inputs read_inputs(const config::ScoringConfig& c, bool paired) {
  if (c.sys.empty()) raise<UserError>("no --sys file given: fairseq-cpp-eval score --sys HYP [HYP ...] --ref REF [REF ...]");
  if (c.ref.empty()) raise<UserError>("no --ref file given: fairseq-cpp-eval score --sys HYP [HYP ...] --ref REF [REF ...]");
  int stdin_files = 0;
  for (const std::string& f : c.sys) stdin_files += f == "-";
  for (const std::string& r : c.ref) stdin_files += r == "-";
  if (stdin_files > 1) raise<UserError>("only one of the --sys and --ref files can be standard input (-)");
  Inputs in;
  for (const std::string& path : c.sys) {
    if (std::find(in.names.begin(), in.names.end(), path) != in.names.end()) {
      if (paired && path == in.names[0]) continue;
      raise<UserError>("--sys names {} twice; each system needs its own file", path);
    }
    in.names.push_back(path);
    in.systems.push_back(read_lines(path, "--sys"));
  }
  for (const std::string& r : c.ref) {
    in.refs.push_back(read_lines(r, "--ref"));
    for (size_t s = 0; s < in.systems.size(); ++s) {
      if (in.refs.back().size() != in.systems[s].size()) {
        raise<UserError>("{} has {} lines but {} has {}: each --sys and --ref file must have one line per sentence",
                         in.names[s], in.systems[s].size(), r, in.refs.back().size());
      }
    }
  }
  if (paired && in.systems.size() < 2)
    raise<UserError>("--paired-bs and --paired-ar compare systems with a baseline: give --sys BASELINE SYSTEM [SYSTEM ...]");
  return in;
}

// One line per metric, with its bootstrap estimate under --confidence.
void print_one_system(const config::ScoringConfig& c, const std::vector<std::unique_ptr<scoring::Scorer>>& scorers,
                      const scoring::SystemStatistics& statistics, int workers) {
  for (size_t m = 0; m < scorers.size(); ++m) {
    const scoring::Scorer& scorer = *scorers[m];
    scoring::Score score = scorer.score();
    std::string test_fields;
    if (c.confidence) {
      const auto n = static_cast<size_t>(c.confidence_n);
      const scoring::Estimate e = scoring::estimate_ci(
          scoring::bootstrap_scores(scorer, statistics[m], n, static_cast<uint64_t>(c.resample_seed), workers));
      score.mean = e.mean;
      score.ci = e.ci;
      test_fields = fmt::format("bs:{}|seed:{}", n, c.resample_seed);
    }
    fmt::print("{}\n", scorer.format(score, static_cast<int>(c.width), test_fields));
  }
}

// sacreBLEU's table of several systems, with the paired test when one is asked for.
void print_systems(const config::ScoringConfig& c, std::vector<std::string> names,
                   const std::vector<std::vector<std::unique_ptr<scoring::Scorer>>>& scorers,
                   const std::vector<scoring::SystemStatistics>& statistics, int workers) {
  scoring::Report report;
  report.width = static_cast<int>(c.width);
  scoring::PairedTest test;
  std::string test_fields;
  if (c.paired_bs || c.paired_ar) {
    test.kind = c.paired_bs ? scoring::PairedTest::bootstrap : scoring::PairedTest::randomization;
    test.samples = static_cast<size_t>(c.paired_bs ? c.paired_bs_n : c.paired_ar_n);
    test.seed = static_cast<uint64_t>(c.resample_seed);
    test.workers = workers;
    report.test = &test;
    test_fields = fmt::format("{}:{}|seed:{}", c.paired_bs ? "bs" : "ar", test.samples, test.seed);
    std::vector<const scoring::Scorer*> metrics;
    for (const auto& scorer : scorers[0]) metrics.push_back(scorer.get());
    report.results = scoring::paired_test(metrics, statistics, test);
    names[0] = "Baseline: " + names[0];
  } else {
    for (const auto& system : scorers) {
      report.results.emplace_back();
      for (const auto& scorer : system) report.results.back().push_back({scorer->score().score, {}, {}});
    }
  }
  report.systems = std::move(names);
  for (const auto& scorer : scorers[0]) {
    report.metrics.push_back(scorer->score().name);
    report.signatures.push_back(scorer->signature(test_fields));
  }
  fmt::print("{}", scoring::format_report(report));
}

}  // namespace

int score_main(const config::Config& cfg) {
  const config::ScoringConfig& c = cfg.scoring;
  const std::vector<std::string> metrics = metric_list(c);
  const Inputs in = read_inputs(c, c.paired_bs || c.paired_ar);
  const int workers = cfg.common.cpu_threads > 0 ? static_cast<int>(cfg.common.cpu_threads) : available_cores();
  // scorers[s][m] and the per-segment statistics of system s under metric m.
  std::vector<std::vector<std::unique_ptr<scoring::Scorer>>> scorers(in.systems.size());
  std::vector<scoring::SystemStatistics> statistics(in.systems.size());
  for (const std::string& m : metrics) {
    std::vector<scoring::Scorer*> of_metric;
    for (auto& system : scorers) {
      system.push_back(scoring::make_scorer(m, scoring_options(cfg.scoring)));
      of_metric.push_back(system.back().get());
    }
    auto tables = scoring::score_systems(of_metric, in.systems, in.refs, workers);
    for (size_t s = 0; s < in.systems.size(); ++s) statistics[s].push_back(std::move(tables[s]));
  }
  if (in.systems.size() == 1) {
    print_one_system(c, scorers[0], statistics[0], workers);
  } else {
    print_systems(c, in.names, scorers, statistics, workers);
  }
  return kExitOk;
}


int score_program_main(const Invocation& inv) { return score_main(inv.config); }

}  // namespace fairseq_cpp::tasks
