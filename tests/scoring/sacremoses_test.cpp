// The Moses detokenizer (--eval-bleu-detok moses) against the sacremoses package itself (the
// pinned one, in the project's Python environment): every line of Multi30k's test and val sets in
// English and German as fairseq's moses tokenizer leaves them, hostile lines in eleven languages,
// and 20,000 random lines of quotes, apostrophes, entities, currency, brackets and CJK
// (tests/scoring/sacremoses_cases.py). Every line must be the package's, byte for byte.
//
// FSQ_SACREMOSES_SEED picks other random lines; a failure names the seed and the first lines that differ.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "fairseq_cpp/scoring/detokenizer.h"
#include "tests/support/test_support.h"

namespace fairseq_cpp::testing {
namespace {

// One line of sacremoses_cases.py's output.
struct Case {
  std::string origin, lang, tokens, expected;
};

std::vector<Case> read_cases(const std::string& path) {
  std::ifstream in(path);
  std::vector<Case> cases;
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> fields;
    size_t start = 0;
    for (size_t tab; (tab = line.find('\t', start)) != std::string::npos; start = tab + 1)
      fields.push_back(line.substr(start, tab - start));
    fields.push_back(line.substr(start));
    if (fields.size() != 4) throw std::runtime_error("not 4 tab-separated fields in " + path + ": " + line);
    cases.push_back({fields[0], fields[1], fields[2], fields[3]});
  }
  return cases;
}

TEST(SacremosesPackage, DetokenizerEqualsThePackage) {
  const char* seed_env = std::getenv("FSQ_SACREMOSES_SEED");
  const std::string seed = seed_env != nullptr && *seed_env != '\0' ? seed_env : "20261124";
  TempDir dir;
  const std::string multi30k = shared_dir() + "/data/multi30k";
  auto gen = run({FSQ_SACREBLEU_PYTHON, source_dir() + "/tests/scoring/sacremoses_cases.py", multi30k, seed,
                  dir.path() + "/cases.tsv"});
  ASSERT_EQ(gen.exit_code, 0) << gen.err;
  ASSERT_NE(gen.out.find(fmt::format("sacremoses {}\n", scoring::kSacremosesVersion)), std::string::npos)
      << "not the pinned sacremoses: " << gen.out;

  const std::vector<Case> cases = read_cases(dir.path() + "/cases.tsv");
  std::map<std::string, int> compared;  // by origin: test_2016_flickr.en, hostile, random, ...
  int mismatches = 0;
  std::string shown;
  for (const Case& c : cases) {
    ++compared[c.origin.substr(0, c.origin.find(':'))];
    const std::string ours = scoring::moses_detokenize(c.tokens, c.lang);
    if (ours == c.expected) continue;
    if (++mismatches <= 10)
      shown += fmt::format("{} ({}):\n  tokens:     {}\n  sacremoses: {}\n  ours:       {}\n", c.origin, c.lang,
                           c.tokens, c.expected, ours);
  }
  EXPECT_EQ(mismatches, 0) << mismatches << " of " << cases.size() << " lines differ (seed " << seed << "):\n" << shown;
  // Every source was there and compared: test 1,000 and val 1,014 lines per language.
  for (const char* origin : {"test_2016_flickr.en", "test_2016_flickr.de", "val.en", "val.de"})
    EXPECT_GE(compared[origin], 1000) << origin << " from " << multi30k << "; " << gen.out;
  EXPECT_GE(compared["hostile"], 200) << gen.out;
  EXPECT_GE(compared["random"], 19900) << gen.out;
}

}  // namespace
}  // namespace fairseq_cpp::testing
