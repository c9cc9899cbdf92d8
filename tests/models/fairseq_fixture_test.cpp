// The fairseq v0.9 fixture (../shared/fixtures/fairseq-v0.9/README.md): its checkpoint imported with
// tools/fairseq-import gives fairseq's validation loss through `fairseq-cpp-eval validate`, and
// tools/fairseq-export gives back a file with fairseq's keys, tensors and args.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>

#include "fairseq_cpp/checkpoint/load_model.h"
#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/data/dictionary.h"
#include "tests/support/imported_checkpoint.h"
#include "tests/support/test_support.h"

namespace fairseq_cpp {
namespace {
namespace fs = std::filesystem;

std::string fixture_dir() {
  std::string dir = testing::source_dir() + "/../shared/fixtures/fairseq-v0.9";
  if (!fs::exists(dir + "/checkpoint_best.pt")) {
    ADD_FAILURE() << "fixture missing: " << dir << "/checkpoint_best.pt (see the project's shared data)";
  }
  return dir;
}

// The fixture checkpoint imported once for the suite.
class FairseqFixture : public testing::ImportedFairseqCheckpoint {};

TEST_F(FairseqFixture, ImportedModelHasFairseqsParametersExactly) {
  const std::string data = fixture_dir() + "/data-bin";
  int64_t vocab = data::Dictionary::load(data + "/dict.en.txt").size();
  EXPECT_EQ(vocab, 8000);
  // Strict loading: every name and shape of the state dict equals the model's, none left over.
  auto loaded = checkpoint::load_model(imported_, models::Vocabularies{vocab, vocab, 1, true}, torch::kCPU);
  EXPECT_EQ(models::count_parameters(*loaded.model), 7577600);
  EXPECT_EQ(loaded.config.model.encoder_layers, std::optional<int64_t>(3));
  EXPECT_EQ(loaded.config.criterion._name, "label_smoothed_cross_entropy");
  EXPECT_DOUBLE_EQ(loaded.config.criterion.label_smoothing, 0.1);
  EXPECT_EQ(loaded.config.optimizer.adam_betas, (std::vector<double>{0.9, 0.98}));
  EXPECT_EQ(loaded.config.task.source_lang, "en");
}

TEST_F(FairseqFixture, ValidateReproducesFairseqsValidationLoss) {
  auto r = testing::run({testing::program("fairseq-cpp-eval"), "validate", fixture_dir() + "/data-bin", "--path",
                         imported_, "--valid-subset", "valid", "--max-tokens", "4096"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex(R"(loss ([0-9.]+) \| nll_loss ([0-9.]+) \| ppl ([0-9.]+))")))
      << r.out;
  const double loss = std::stod(m[1]), nll = std::stod(m[2]);
  // fixture README: loss 4.733251, nll_loss 3.359225 (base 2) over 1,014 sentences / 17,182 tokens.
  EXPECT_NEAR(loss, 4.733251, 4.733251 * 1e-4);
  EXPECT_NEAR(nll, 3.359225, 3.359225 * 1e-4);
  EXPECT_NE(r.out.find("ntokens 17182 | nsentences 1014"), std::string::npos) << r.out;
}

TEST_F(FairseqFixture, ExportGivesBackFairseqsFile) {
  const std::string exported = dir_->path() + "/exported.pt";
  auto r = testing::run_tool("fairseq-export", {imported_, exported});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = testing::run({testing::python_executable(), testing::source_dir() + "/tests/checkpoint/compare_export.py",
                    fixture_dir() + "/checkpoint_best.pt", exported});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.out.rfind("OK: 132 state-dict entries", 0), 0u) << r.out;
}

TEST(FairseqFiles, BadInputsGetOneLineErrorsAndExitCode2) {
  testing::TempDir dir;
  const std::string fairseq_file = fixture_dir() + "/checkpoint_best.pt";
  // A fairseq checkpoint given straight to fairseq-cpp: told to convert it.
  auto r = testing::run({testing::program("fairseq-cpp-eval"), "validate", fixture_dir() + "/data-bin", "--path",
                         fairseq_file, "--max-tokens", "4096"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("tools/fairseq-import"), std::string::npos) << r.err;
  // No checkpoint at all.
  r = testing::run(
      {testing::program("fairseq-cpp-eval"), "validate", fixture_dir() + "/data-bin", "--max-tokens", "4096"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--path"), std::string::npos) << r.err;
  // A truncated file to the importer.
  const std::string bytes = testing::read_file(fairseq_file);
  const std::string cut = dir.write("cut.pt", bytes.substr(0, 100000));
  r = testing::run_tool("fairseq-import", {cut, dir.path() + "/out.pt"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find(cut), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_FALSE(fs::exists(dir.path() + "/out.pt"));
  // A file whose pickle would run a command: both tools refuse it, and the command never runs.
  const std::string evil = dir.path() + "/evil.pt", marker = dir.path() + "/marker";
  const char* make_evil =
      "import os, sys, torch\n"
      "class Evil:\n"
      "    def __reduce__(self):\n"
      "        return (os.system, ('touch ' + sys.argv[2],))\n"
      "torch.save({'model': {'w': torch.zeros(2)}, 'cfg': '', 'args': Evil()}, sys.argv[1])\n";
  r = testing::run({testing::python_executable(), "-c", make_evil, evil, marker});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_FALSE(fs::exists(marker));
  for (const char* tool : {"fairseq-import", "fairseq-export"}) {
    r = testing::run_tool(tool, {evil, dir.path() + "/out.pt"});
    EXPECT_EQ(r.exit_code, 2) << tool << ": " << r.err;
    EXPECT_NE(r.err.find("refusing to load the global posix.system"), std::string::npos) << tool << ": " << r.err;
    EXPECT_FALSE(fs::exists(marker)) << tool << " ran the file's command";
    EXPECT_FALSE(fs::exists(dir.path() + "/out.pt"));
  }
  // Not a checkpoint at all, to the exporter.
  const std::string text = dir.write("text.pt", "hello\n");
  r = testing::run_tool("fairseq-export", {text, dir.path() + "/out.pt"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find(text), std::string::npos) << r.err;
}

}  // namespace
}  // namespace fairseq_cpp
