// fairseq-cpp-score (the program behind fairseq-cpp-eval score, without LibTorch; programs_test
// checks that both print the same) against the sacreBLEU package itself (the pinned one, in the project's
// Python environment): 300 generated cases of mixed scripts, punctuation runs, numbers, empty and
// very long lines, trailing and non-breaking spaces and Unicode normalisation, each with its own
// tokenizer, casing, smoothing, chrF orders, beta, references (1-3) and width. Every printed line
// must equal sacreBLEU's: the score to the width's decimals, the verbose part and the signature.
// FSQ_SACREBLEU_SEED picks other cases; a failure names the seed and the case and shows its files.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "tests/support/test_support.h"

namespace fairseq_cpp::testing {
namespace {

constexpr int kCases = 300;

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

TEST(SacrebleuPackage, ScoreEqualsThePackageOnGeneratedCases) {
  const char* seed_env = std::getenv("FSQ_SACREBLEU_SEED");
  const std::string seed = seed_env != nullptr && *seed_env != '\0' ? seed_env : "20261124";
  TempDir dir;
  auto gen = run({FSQ_SACREBLEU_PYTHON, source_dir() + "/tests/scoring/sacrebleu_cases.py", seed,
                  std::to_string(kCases), dir.path() + "/cases"});
  ASSERT_EQ(gen.exit_code, 0) << gen.err;
  ASSERT_NE(gen.out.find("sacrebleu 2.5.1"), std::string::npos) << "not the pinned sacreBLEU: " << gen.out;
  // The cases on two threads (each runs the program once per case), checked in order.
  std::vector<RunResult> results(kCases);
  std::vector<std::vector<std::string>> case_args(kCases);
  auto work = [&](int first) {
    for (int c = first; c < kCases; c += 2) {
      const std::string folder = fmt::format("{}/cases/{}", dir.path(), c);
      case_args[c] = lines_of(folder + "/args.txt");
      std::vector<std::string> argv{program("fairseq-cpp-score")};
      for (const std::string& a : case_args[c])
        argv.push_back(a.size() > 4 && a.compare(a.size() - 4, 4, ".txt") == 0 ? folder + "/" + a : a);
      results[c] = run(argv);
    }
  };
  std::thread other(work, 1);
  work(0);
  other.join();
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

}  // namespace
}  // namespace fairseq_cpp::testing
