// fairseq-cpp-score (the program behind fairseq-cpp-eval score, without LibTorch; programs_test
// checks that both print the same) against the sacreBLEU package itself (the pinned one, in the project's
// Python environment): 300 generated cases of mixed scripts, punctuation runs, numbers, empty and
// very long lines, trailing and non-breaking spaces and Unicode normalisation, each with its own
// tokenizer, casing, smoothing, chrF orders, beta, references (1-3) and width. Every printed line
// must equal sacreBLEU's: the score to the width's decimals, the verbose part and the signature.
//
// The statistical tests likewise, against the package's command line: 40 generated cases of 1-5
// systems with --paired-bs, --paired-ar, --confidence or a plain table, each with its own seed,
// sample count, metrics, references and width. Our output must be sacreBLEU's, character for
// character, except that a p-value may differ by 0.01 (the issue's bound) and a bootstrap mean or
// interval by one unit of its last printed digit (the package sums float32 statistics), and that
// our one-system lines are not padded to align their '=' signs. Also: our numpy generator gives
// numpy's draws exactly.
//
// FSQ_SACREBLEU_SEED picks other cases; a failure names the seed and the case (and shows its files).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "fairseq_cpp/scoring/numpy_random.h"
#include "tests/support/test_support.h"

namespace fairseq_cpp::testing {
namespace {

constexpr int kCases = 300;
constexpr int kPairedCases = 40;

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// The first lines of a case's files, with invisible characters shown, for a failure message.
std::string show_case(const std::string& folder, const std::vector<std::string>& args) {
  std::string out;
  for (const std::string& a : args) {
    if (a.size() < 4 || a.compare(a.size() - 4, 4, ".txt") != 0) continue;
    out += fmt::format("--- {} (first lines)\n", a);
    auto lines = lines_of(folder + "/" + a);
    for (size_t i = 0; i < lines.size() && i < 5; ++i) {
      std::string shown;
      for (unsigned char c : lines[i]) shown += c == '\t' ? std::string("\\t") : std::string(1, static_cast<char>(c));
      out += fmt::format("{:>3}: {}\n", i + 1, shown.substr(0, 300));
    }
  }
  return out;
}

// fairseq-cpp-score with each case's arguments (CASES/c/args.txt), in the case's folder as
// sacreBLEU ran (systems are named by the paths given), two cases at a time.
std::vector<RunResult> run_cases(const std::string& cases, int n, std::vector<std::vector<std::string>>& case_args) {
  std::vector<RunResult> results(static_cast<size_t>(n));
  case_args.assign(static_cast<size_t>(n), {});
  auto work = [&](int first) {
    for (int c = first; c < n; c += 2) {
      const std::string folder = fmt::format("{}/{}", cases, c);
      case_args[c] = lines_of(folder + "/args.txt");
      std::vector<std::string> argv{"/bin/sh", "-c", "cd \"$0\" && exec \"$@\"", folder, program("fairseq-cpp-score")};
      argv.insert(argv.end(), case_args[c].begin(), case_args[c].end());
      results[c] = run(argv);
    }
  };
  std::thread other(work, 1);
  work(0);
  other.join();
  return results;
}

TEST(SacrebleuPackage, ScoreEqualsThePackageOnGeneratedCases) {
  const char* seed_env = std::getenv("FSQ_SACREBLEU_SEED");
  const std::string seed = seed_env != nullptr && *seed_env != '\0' ? seed_env : "20261124";
  TempDir dir;
  auto gen = run({FSQ_SACREBLEU_PYTHON, source_dir() + "/tests/scoring/sacrebleu_cases.py", seed,
                  std::to_string(kCases), dir.path() + "/cases"});
  ASSERT_EQ(gen.exit_code, 0) << gen.err;
  ASSERT_NE(gen.out.find("sacrebleu 2.5.1"), std::string::npos) << "not the pinned sacreBLEU: " << gen.out;
  std::vector<std::vector<std::string>> case_args;
  const std::vector<RunResult> results = run_cases(dir.path() + "/cases", kCases, case_args);
  int failures = 0;
  for (int c = 0; c < kCases && failures < 5; ++c) {
    const std::string folder = fmt::format("{}/cases/{}", dir.path(), c);
    const RunResult& r = results[c];
    const std::string expected = read_file(folder + "/expected.txt");
    if (r.exit_code == 0 && r.out == expected) continue;
    ++failures;
    std::string call;
    for (const std::string& a : case_args[c]) call += " " + a;
    ADD_FAILURE() << fmt::format("case {} of seed {} (tests/scoring/sacrebleu_cases.py {} {} DIR):\n  fairseq-cpp-score{}\nexit {}, stderr: {}\nsacreBLEU:\n{}ours:\n{}{}",
                                 c, seed, seed, kCases, call, r.exit_code, r.err, expected, r.out,
                                 show_case(folder, case_args[c]));
  }
}

std::string without_leading_spaces(const std::string& text) {
  std::string out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out += line.substr(std::min(line.find_first_not_of(' '), line.size())) + "\n";
  return out;
}

// A printed text as its numbers (with what precedes each) and the rest, with runs of spaces and
// of rule characters collapsed (a number one digit longer widens a column).
struct Parsed {
  std::string skeleton;
  std::vector<std::string> numbers, before;
};

Parsed parse(const std::string& text) {
  static const std::regex number(R"(\d+\.\d+)");
  Parsed p;
  std::string rest;
  size_t last = 0;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), number); it != std::sregex_iterator(); ++it) {
    const auto pos = static_cast<size_t>(it->position());
    rest += text.substr(last, pos - last) + "#";
    p.numbers.push_back(it->str());
    p.before.push_back(text.substr(pos >= 4 ? pos - 4 : 0, pos >= 4 ? 4 : pos));
    last = pos + static_cast<size_t>(it->length());
  }
  rest += text.substr(last);
  for (size_t i = 0; i < rest.size(); ++i) {
    const bool space = rest[i] == ' ';
    const bool rule = rest.compare(i, 3, "─") == 0 || rest.compare(i, 3, "═") == 0;
    if (space && !p.skeleton.empty() && p.skeleton.back() == ' ') continue;
    if (rule) {
      const std::string r = rest.substr(i, 3);
      if (p.skeleton.size() < 3 || p.skeleton.compare(p.skeleton.size() - 3, 3, r) != 0) p.skeleton += r;
      i += 2;
      continue;
    }
    p.skeleton += rest[i];
  }
  return p;
}

// Empty when `ours` is `theirs` within the tolerances; else what differs. Updates the largest
// p-value difference seen.
std::string compare(const std::string& ours, const std::string& theirs, double& max_p_diff) {
  if (ours == theirs) return "";
  const Parsed a = parse(ours), b = parse(theirs);
  if (a.skeleton != b.skeleton || a.numbers.size() != b.numbers.size()) return "the texts differ beyond their numbers";
  for (size_t i = 0; i < a.numbers.size(); ++i) {
    if (a.numbers[i] == b.numbers[i]) continue;
    const double x = std::stod(a.numbers[i]), y = std::stod(b.numbers[i]);
    const size_t decimals = a.numbers[i].size() - a.numbers[i].find('.') - 1;
    const std::string& ctx = b.before[i];
    if (ctx.find("p = ") != std::string::npos) {
      max_p_diff = std::max(max_p_diff, std::abs(x - y));
      if (std::abs(x - y) <= 0.01) continue;
      return fmt::format("p-value {} against {}", a.numbers[i], b.numbers[i]);
    }
    // A bootstrap mean follows "(" or "μ = ", its interval "± ".
    const bool estimate = ctx.find('(') != std::string::npos || ctx.find("± ") != std::string::npos ||
                          (ctx.find("= ") != std::string::npos && ctx.find("μ") != std::string::npos);
    if (estimate && std::abs(x - y) <= 1.01 * std::pow(10.0, -static_cast<double>(decimals))) continue;
    return fmt::format("{} against {} (after '{}')", a.numbers[i], b.numbers[i], ctx);
  }
  return "";
}

TEST(SacrebleuPackage, StatisticalTestsEqualThePackagesOnGeneratedCases) {
  const char* seed_env = std::getenv("FSQ_SACREBLEU_SEED");
  const std::string seed = seed_env != nullptr && *seed_env != '\0' ? seed_env : "20261125";
  TempDir dir;
  auto gen = run({FSQ_SACREBLEU_PYTHON, source_dir() + "/tests/scoring/sacrebleu_paired_cases.py", seed,
                  std::to_string(kPairedCases), dir.path() + "/cases"});
  ASSERT_EQ(gen.exit_code, 0) << gen.err;
  ASSERT_NE(gen.out.find("sacrebleu 2.5.1"), std::string::npos) << "not the pinned sacreBLEU: " << gen.out;

  // numpy's draws, exactly.
  for (const std::string& line : lines_of(dir.path() + "/cases/numpy.txt")) {
    std::istringstream in(line);
    uint64_t rng_seed = 0, high = 0;
    size_t count = 0;
    std::string kind;
    in >> rng_seed >> kind >> high >> count;
    std::vector<uint64_t> expected(count);
    for (auto& v : expected) in >> v;
    scoring::NumpyGenerator rng(rng_seed);
    std::vector<uint64_t> ours;
    if (kind == "bool") {
      for (uint8_t v : rng.booleans(count)) ours.push_back(v);
    } else {
      for (uint32_t v : rng.integers(static_cast<uint32_t>(high), count)) ours.push_back(v);
    }
    EXPECT_EQ(ours, expected) << "default_rng(" << rng_seed << ") " << kind << " " << high;
  }

  std::vector<std::vector<std::string>> case_args;
  const std::vector<RunResult> results = run_cases(dir.path() + "/cases", kPairedCases, case_args);
  int failures = 0, identical = 0;
  double max_p_diff = 0;
  for (int c = 0; c < kPairedCases && failures < 5; ++c) {
    const std::string folder = fmt::format("{}/cases/{}", dir.path(), c);
    const RunResult& r = results[c];
    std::string expected = read_file(folder + "/expected.txt");
    const std::string& ours = r.out;
    const bool one_system = expected.find("╒") == std::string::npos;
    if (one_system) expected = without_leading_spaces(expected);
    identical += ours == expected;
    const std::string problem = r.exit_code != 0 ? fmt::format("exit {}", r.exit_code) : compare(ours, expected, max_p_diff);
    if (problem.empty()) continue;
    ++failures;
    std::string call;
    for (const std::string& a : case_args[c]) call += " " + a;
    ADD_FAILURE() << fmt::format("case {} of seed {}: {}\n  fairseq-cpp-score{}\nstderr: {}\nsacreBLEU:\n{}ours:\n{}", c,
                                 seed, problem, call, r.err, expected, ours);
  }
  std::cout << fmt::format("{} of {} cases print sacreBLEU's very text; the largest p-value difference is {:.4f}\n",
                           identical, kPairedCases, max_p_diff);
}

}  // namespace
}  // namespace fairseq_cpp::testing
