// fairseq-cpp-generate on the fixture's whole test split (1,000 sentences, beam 5, batch 128)
// against fairseq v0.9's own output (../shared/fixtures/fairseq-v0.9/generate-test-beam5.txt).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <sstream>

#include "tests/support/imported_checkpoint.h"
#include "tests/support/test_support.h"

namespace fairseq_cpp {
namespace {
namespace fs = std::filesystem;

struct Hypo {
  double score = 0;
  std::string text;
};

// id -> H- line, and the order of the S- lines.
std::map<int, Hypo> hypotheses(const std::string& text, std::vector<int>* order) {
  std::map<int, Hypo> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("S-", 0) == 0) order->push_back(std::stoi(line.substr(2)));
    if (line.rfind("H-", 0) != 0) continue;
    const size_t tab1 = line.find('\t'), tab2 = line.find('\t', tab1 + 1);
    out[std::stoi(line.substr(2, tab1 - 2))] = {std::stod(line.substr(tab1 + 1, tab2 - tab1 - 1)),
                                                line.substr(tab2 + 1)};
  }
  return out;
}

std::string line_starting(const std::string& text, const std::string& prefix) {
  const size_t at = text.find(prefix);
  return at == std::string::npos ? "" : text.substr(at, text.find('\n', at) - at);
}

TEST(GenerateFixture, ReproducesFairseqsHypothesesScoresOrderAndBleu) {
  testing::TempDir tmp;
  const std::string imported = tmp.path() + "/imported.pt";
  auto imp = testing::run_tool("fairseq-import", {testing::fixture_path("checkpoint_best.pt"), imported});
  ASSERT_EQ(imp.exit_code, 0) << imp.err;
  auto r = testing::run({testing::program("fairseq-cpp-generate"), testing::fixture_path("data-bin"), "--path",
                         imported, "--gen-subset", "test", "--beam", "5", "--batch-size", "128", "--remove-bpe",
                         "sentencepiece", "--results-path", tmp.path() + "/results"},
                        {{"OMP_WAIT_POLICY", "PASSIVE"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string ours = testing::read_file(tmp.path() + "/results/generate-test.txt");
  const std::string theirs = testing::read_file(testing::fixture_path("generate-test-beam5.txt"));
  std::vector<int> our_order, their_order;
  auto a = hypotheses(ours, &our_order);
  auto b = hypotheses(theirs, &their_order);
  ASSERT_EQ(b.size(), 1000u);
  int same_text = 0, close_score = 0;
  for (const auto& [id, h] : b) {
    auto it = a.find(id);
    if (it == a.end()) continue;
    same_text += it->second.text == h.text;
    close_score += std::abs(it->second.score - h.score) <= 1e-3;
  }
  EXPECT_GE(same_text, 990) << "H- lines equal to fairseq's";
  EXPECT_GE(close_score, 990) << "scores within 1e-3 of fairseq's";
  EXPECT_EQ(our_order, their_order);
  EXPECT_EQ(line_starting(ours, "D-944\t").substr(0, 6), "D-944\t");
  EXPECT_EQ(line_starting(r.out, "| Generate test with beam=5: "),
            line_starting(theirs, "| Generate test with beam=5: "));
  EXPECT_NE(line_starting(r.out, "| Translated 1000 sentences (14976 tokens) in "), "") << r.out;
}

}  // namespace
}  // namespace fairseq_cpp
