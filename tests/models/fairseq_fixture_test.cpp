// The fairseq v0.9 fixture (../shared/fixtures/fairseq-v0.9/README.md): its checkpoint imported with
// tools/fairseq-import gives fairseq's validation loss through `fairseq-cpp-eval validate`, and
// tools/fairseq-export gives back a file with fairseq's keys, tensors and args.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <regex>

#include <fmt/format.h>

#include "fairseq_cpp/checkpoint/checkpoint.h"
#include "fairseq_cpp/checkpoint/load_model.h"
#include "fairseq_cpp/config/config.h"
#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/data/dictionary.h"
#include "tests/support/imported_checkpoint.h"
#include "tests/support/test_support.h"

namespace fairseq_cpp {
namespace {
namespace fs = std::filesystem;

std::string fixture_dir() {
  std::string dir = testing::shared_dir() + "/fixtures/fairseq-v0.9";
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
  // fairseq's own file, read as it is.
  auto r = testing::run({testing::program("fairseq-cpp-eval"), "validate", fixture_dir() + "/data-bin", "--path",
                         fixture_dir() + "/checkpoint_best.pt", "--valid-subset", "valid", "--max-tokens", "4096"});
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

// fairseq's file read directly (the restricted pickle machine) is the file tools/fairseq-import
// writes: every parameter to the bit, the same configuration and the same training position.
TEST_F(FairseqFixture, FairseqsFileReadsAsTheImportedOne) {
  const checkpoint::StateDict direct = checkpoint::load_file(fixture_dir() + "/checkpoint_best.pt");
  const checkpoint::StateDict imported = checkpoint::load_file(imported_);
  const auto a = checkpoint::model_entry(direct, "direct"), b = checkpoint::model_entry(imported, "imported");
  EXPECT_GT(a.size(), 100u);
  ASSERT_EQ(a.size(), b.size());
  for (const auto& item : b) {
    ASSERT_TRUE(a.contains(item.key())) << item.key();
    EXPECT_TRUE(torch::equal(a.at(item.key()), item.value())) << item.key();
    EXPECT_EQ(a.at(item.key()).scalar_type(), torch::kFloat) << item.key();
  }
  EXPECT_EQ(config::dump_config(checkpoint::config_entry(direct, "direct")),
            config::dump_config(checkpoint::config_entry(imported, "imported")));
  const auto x = direct.at("extra_state").toGenericDict(), y = imported.at("extra_state").toGenericDict();
  for (const char* key : {"imported_from", "num_updates", "epoch", "iterations_in_epoch", "world_size", "best"}) {
    ASSERT_TRUE(x.contains(key) && y.contains(key)) << key;
    EXPECT_EQ(x.at(key), y.at(key)) << key;
  }
  EXPECT_EQ(x.at("num_updates").toInt(), 952);
  EXPECT_EQ(x.at("iterations_in_epoch").toInt(), 136);
}

// fairseq 0.12's layout (tests/checkpoint/make_fairseq012.py writes the fixture's model as 0.12 saves
// it: `cfg` a dict of sections, the model's arguments a Namespace, the tied output projection in the
// state dict, numpy scalars and a tensor in extra_state) reads as the v0.9 file and validates alike.
TEST_F(FairseqFixture, AFairseq012FileReadsAsTheV09OneAndValidatesAlike) {
  const std::string v012 = dir_->path() + "/v012.pt", v09 = fixture_dir() + "/checkpoint_best.pt";
  auto made = testing::run(
      {testing::python_executable(), testing::source_dir() + "/tests/checkpoint/make_fairseq012.py", v09, v012});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  const checkpoint::StateDict direct = checkpoint::load_file(v012), reference = checkpoint::load_file(v09);
  const auto a = checkpoint::model_entry(direct, v012), b = checkpoint::model_entry(reference, v09);
  EXPECT_EQ(a.size(), b.size());  // the tied output projection is the embedding, not a parameter of its own
  for (const auto& item : b) {
    ASSERT_TRUE(a.contains(item.key())) << item.key();
    EXPECT_TRUE(torch::equal(a.at(item.key()), item.value())) << item.key();
  }
  const config::Config x = checkpoint::config_entry(direct, v012), y = checkpoint::config_entry(reference, v09);
  EXPECT_EQ(x.model.arch, y.model.arch);
  EXPECT_EQ(x.model.encoder_layers, y.model.encoder_layers);
  EXPECT_EQ(x.model.share_all_embeddings, y.model.share_all_embeddings);
  EXPECT_EQ(x.criterion.label_smoothing, y.criterion.label_smoothing);
  EXPECT_EQ(x.optimizer.adam_betas, (std::vector<double>{0.9, 0.98}));
  EXPECT_EQ(x.task.source_lang, "en");
  const auto extra = direct.at("extra_state").toGenericDict();
  EXPECT_EQ(extra.at("num_updates").toInt(), 952);
  EXPECT_EQ(extra.at("epoch").toInt(), 7);
  // best was written as a float32 tensor: the v0.9 file's value rounded to float32.
  const double best = reference.at("extra_state").toGenericDict().at("best").toDouble();
  EXPECT_DOUBLE_EQ(extra.at("best").toDouble(), static_cast<double>(static_cast<float>(best)));
  auto r = testing::run({testing::program("fairseq-cpp-eval"), "validate", fixture_dir() + "/data-bin", "--path", v012,
                         "--valid-subset", "valid", "--max-tokens", "4096"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("loss 4.733"), std::string::npos) << r.out;
}

// fairseq-cpp-eval average takes fairseq's file too (its tensors mapped from the file; the shared
// embedding read under both names): averaged with its own import, every parameter is unchanged.
TEST_F(FairseqFixture, AveragingFairseqsFileWithItsImportGivesItBack) {
  const std::string out = dir_->path() + "/averaged.pt";
  auto r = testing::run({testing::program("fairseq-cpp-eval"), "average", "--inputs",
                         fixture_dir() + "/checkpoint_best.pt", imported_, "--output", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto averaged = checkpoint::model_entry(checkpoint::load_file(out), out);
  const auto imported = checkpoint::model_entry(checkpoint::load_file(imported_), imported_);
  ASSERT_EQ(averaged.size(), imported.size());
  for (const auto& item : imported) EXPECT_TRUE(torch::equal(averaged.at(item.key()), item.value())) << item.key();
}

// Training goes on from fairseq's checkpoint (read as it is) as fairseq's own restore does: the weights, the update
// count and the data position (its epoch 7 ended: epoch 8 starts); a fresh optimizer, said so.
TEST_F(FairseqFixture, TrainingGoesOnFromFairseqsCheckpoint) {
  const std::string save = dir_->path() + "/goes-on";
  const std::string fairseq = fs::absolute(fixture_dir() + "/checkpoint_best.pt").lexically_normal().string();
  auto r = testing::run({testing::program("fairseq-cpp-train"), fixture_dir() + "/data-bin", "--arch", "transformer",
                         "--encoder-layers", "3", "--decoder-layers", "3", "--encoder-embed-dim", "256",
                         "--decoder-embed-dim", "256", "--encoder-ffn-embed-dim", "1024", "--decoder-ffn-embed-dim",
                         "1024", "--encoder-attention-heads", "4", "--decoder-attention-heads", "4",
                         "--share-all-embeddings", "--criterion", "label_smoothed_cross_entropy", "--label-smoothing",
                         "0.1", "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--lr", "5e-4",
                         "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "400", "--max-tokens", "4096",
                         "--max-update", "954", "--restore-file", fairseq, "--save-dir", save, "--log-format",
                         "simple", "--log-interval", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find(fairseq + " is fairseq's: its weights, update count and best metric are restored; the "
                                 "optimizer, its learning-rate schedule and the loss scale start afresh"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("loaded " + fairseq + " (epoch 7 @ 952 updates)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("epoch 008:     1 / 136 loss="), std::string::npos) << r.err;
  const checkpoint::StateDict last = checkpoint::load_file(save + "/checkpoint_last.pt");
  const auto extra = last.at("extra_state").toGenericDict();
  EXPECT_EQ(extra.at("num_updates").toInt(), 954);
  EXPECT_EQ(extra.at("train_iterator").toGenericDict().at("epoch").toInt(), 8);
  // The weights went on from fairseq's (valid loss 4.733 there); fresh ones start near log2(8000) = 13.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.err, m, std::regex(R"(valid on 'valid' subset \| loss ([0-9.]+))"))) << r.err;
  EXPECT_LT(std::stod(m[1]), 5.2) << r.err;
}

TEST_F(FairseqFixture, ChangedBytesAreRefusedByEveryProgramAndTool) {
  // The issue's trial: 30 copies of the imported checkpoint, each with 3 bytes flipped at seeded
  // places, to fairseq-cpp-eval validate; a few to generate, interactive and fairseq-export. Every
  // one is refused with one line naming the file (exit 2), never with LibTorch's assertion text.
  const std::string bytes = testing::read_file(imported_);
  std::mt19937_64 rng(30);
  const std::string input = dir_->write("input.en", "a man is sleeping .\n");
  for (int k = 0; k < 30; ++k) {
    std::string copy = bytes;
    for (int b = 0; b < 3; ++b) copy[rng() % copy.size()] ^= static_cast<char>(1 << (rng() % 8));
    const std::string bad = dir_->write(fmt::format("bad{}.pt", k), copy);
    std::vector<std::string> argv{testing::program("fairseq-cpp-eval"), "validate", fixture_dir() + "/data-bin",
                                  "--path", bad, "--max-tokens", "4096"};
    if (k == 1) argv = {testing::program("fairseq-cpp-generate"), fixture_dir() + "/data-bin", "--path", bad,
                        "--gen-subset", "test", "--max-tokens", "4096"};
    if (k == 2) argv = {testing::program("fairseq-cpp-interactive"), fixture_dir() + "/data-bin", "--path", bad,
                        "--input", input};
    auto r = k == 3 ? testing::run_tool("fairseq-export", {bad, dir_->path() + "/exported_bad.pt"}) : testing::run(argv);
    EXPECT_EQ(r.exit_code, 2) << "copy " << k << ": " << r.out << r.err;
    EXPECT_NE(r.err.find(bad + " is damaged and was not used"), std::string::npos) << "copy " << k << ": " << r.err;
    EXPECT_EQ(r.err.find("INTERNAL ASSERT"), std::string::npos) << r.err;
    // The error is the last line; a log line may come before it.
    EXPECT_EQ(r.err.substr(r.err.find("error:")).find('\n'), r.err.size() - r.err.find("error:") - 1) << r.err;
  }
  EXPECT_FALSE(fs::exists(dir_->path() + "/exported_bad.pt"));
  // fairseq's own file with one byte of a weight changed: fairseq-import names the record.
  std::string fairseq_bytes = testing::read_file(fixture_dir() + "/checkpoint_best.pt");
  fairseq_bytes[fairseq_bytes.size() / 2] ^= 0x10;
  const std::string damaged = dir_->write("damaged_fairseq.pt", fairseq_bytes);
  auto r = testing::run_tool("fairseq-import", {damaged, dir_->path() + "/imported_bad.pt"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find(damaged + " is damaged and was not used: record checkpoint_best/data/"), std::string::npos)
      << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_FALSE(fs::exists(dir_->path() + "/imported_bad.pt"));
}

TEST(FairseqFiles, BadInputsGetOneLineErrorsAndExitCode2) {
  testing::TempDir dir;
  const std::string fairseq_file = fixture_dir() + "/checkpoint_best.pt";
  // No checkpoint at all.
  auto r = testing::run(
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
  // A file whose pickle would run a command: both tools and the programs refuse it, and the command
  // never runs.
  const std::string evil = dir.path() + "/evil.pt", marker = dir.path() + "/marker";
  const char* make_evil =
      "import os, sys, torch\n"
      "class Evil:\n"
      "    def __reduce__(self):\n"
      "        return (os.system, ('touch ' + sys.argv[2],))\n"
      "torch.save({'model': {'w': torch.zeros(2)}, 'cfg': '', 'args': Evil(), 'optimizer_history': []},\n"
      "           sys.argv[1])\n";
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
  r = testing::run({testing::program("fairseq-cpp-eval"), "validate", fixture_dir() + "/data-bin", "--path", evil});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find(evil + ": data.pkl: refusing the global posix.system"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(marker)) << "fairseq-cpp-eval ran the file's command";
  // Not a checkpoint at all, to the exporter.
  const std::string text = dir.write("text.pt", "hello\n");
  r = testing::run_tool("fairseq-export", {text, dir.path() + "/out.pt"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find(text), std::string::npos) << r.err;
}

}  // namespace
}  // namespace fairseq_cpp
