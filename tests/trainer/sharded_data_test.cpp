// Data too large for one directory (issue 21), through whole runs of fairseq-cpp-train: fairseq's
// `data: bin1:bin2` (epoch e trains on directory (e - 1) mod N, validation on the first), its
// resume in the same directory at the same batch, and train + train1 with `upsample_primary`.
#include <gtest/gtest.h>
#include "tests/support/torch.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/support/training_fixture.h"

namespace fairseq_cpp::testing {
namespace {
namespace fs = std::filesystem;

class ShardedTraining : public TrainingFixture {
 protected:
  // Beside the fixture's bin (300 sentences): bin2, 120 other sentences with bin's dictionary and
  // no valid split; up, 60 sentences as train and 40 as train1; flat, those 60 twice and the 40 in
  // one train split.
  static void SetUpTestSuite() {
    TrainingFixture::SetUpTestSuite();
    const std::string dir = corpus_->path();
    write_corpus(dir + "/train2", 120, 7);
    write_corpus(dir + "/primary", 60, 11);
    write_corpus(dir + "/extra", 40, 12);
    for (const char* lang : {"src", "tgt"}) {
      std::ofstream flat(dir + "/flat." + lang);
      for (const char* part : {"primary", "primary", "extra"}) flat << read_file(dir + "/" + part + "." + lang);
    }
    for (const auto& [pref, dest] : std::vector<std::pair<std::string, std::string>>{
             {"train2", "bin2"}, {"primary", "up"}, {"extra", "extra-bin"}, {"flat", "flat"}}) {
      std::vector<std::string> argv{program("fairseq-cpp-preprocess"),
                                    "--source-lang",
                                    "src",
                                    "--target-lang",
                                    "tgt",
                                    "--trainpref",
                                    dir + "/" + pref,
                                    "--destdir",
                                    dir + "/" + dest,
                                    "--joined-dictionary",
                                    "--srcdict",
                                    dir + "/bin/dict.src.txt"};
      if (dest != "bin2") argv.insert(argv.end(), {"--validpref", dir + "/valid"});
      auto r = run(argv);
      ASSERT_EQ(r.exit_code, 0) << r.err;
    }
    // train1 of `up` is extra-bin's train, renamed as fairseq users do.
    for (const char* lang : {"src", "tgt"})
      for (const char* ext : {"bin", "idx"})
        fs::copy_file(fmt::format("{}/extra-bin/train.src-tgt.{}.{}", dir, lang, ext),
                      fmt::format("{}/up/train1.src-tgt.{}.{}", dir, lang, ext));
  }

  static std::string bin(const std::string& name) { return corpus_->path() + "/" + name; }

  // A run of up to `max_epoch` epochs on `data`, with a checkpoint at the end of every epoch.
  RunResult train_on(const std::string& save_dir, const std::string& data, int max_epoch, int max_update = 100000,
                     std::vector<std::string> more = {}) {
    std::vector<std::string> overrides{"task.data=" + data, fmt::format("optimization.max_epoch={}", max_epoch),
                                       "checkpoint.no_epoch_checkpoints=false"};
    overrides.insert(overrides.end(), more.begin(), more.end());
    return train(config(save_dir, 1, 1, max_update), overrides);
  }

  static c10::impl::GenericDict cursor(const std::string& path) {
    return checkpoint::load_file(path).at("extra_state").toGenericDict().at("train_iterator").toGenericDict();
  }

  static void expect_equal_parameters(const checkpoint::TensorDict& a, const checkpoint::TensorDict& b) {
    ASSERT_EQ(a.size(), b.size());
    std::string differ;
    for (const auto& item : a)
      if (!torch::equal(item.value(), b.at(item.key()))) differ += " " + item.key();
    EXPECT_TRUE(differ.empty()) << "parameters that differ:" << differ;
  }

  // How many `[tag] {...}` summaries a json log holds.
  static int summaries_of(const std::string& log, const std::string& tag) {
    int n = 0;
    std::istringstream in(log);
    for (std::string line; std::getline(in, line);) n += line.find("[" + tag + "] {") != std::string::npos ? 1 : 0;
    return n;
  }

  // The error lines of a run's standard error.
  static std::vector<std::string> error_lines(const std::string& err) {
    std::vector<std::string> out;
    std::istringstream in(err);
    for (std::string line; std::getline(in, line);)
      if (line.find("error: ") != std::string::npos) out.push_back(line);
    return out;
  }
};

TEST_F(ShardedTraining, EpochsTrainOnTheDirectoriesInTurnAndValidateOnTheFirst) {
  // Every epoch validates; bin2 has no valid split, so validation reads bin only.
  const std::string sharded = work_.path() + "/sharded";
  auto r = train_on(sharded, bin("bin") + ":" + bin("bin2"), 3);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(summaries_of(r.err, "valid"), 3);
  // Epochs 1 and 3 on bin (300 sentences), epoch 2 on bin2 (120): the batch counts say which.
  const int64_t u1 = updates_in(sharded + "/checkpoint1.pt"), u2 = updates_in(sharded + "/checkpoint2.pt"),
                u3 = updates_in(sharded + "/checkpoint3.pt");
  const std::string one = work_.path() + "/one";
  ASSERT_EQ(train_on(one, bin("bin2"), 1, 100000, {"dataset.disable_validation=true"}).exit_code, 0);
  EXPECT_EQ(u2 - u1, updates_in(one + "/checkpoint1.pt"));
  EXPECT_LT(u2 - u1, u1);
  EXPECT_EQ(u3 - u2, u1);
  EXPECT_NE(r.err.find("[data] " + bin("bin2") + " train src-tgt 120 examples"), std::string::npos) << r.err;
  // The cursor of a file written at the end of epoch 2 points at epoch 3, directory 0 of 2.
  auto end2 = cursor(sharded + "/checkpoint2.pt");
  EXPECT_EQ(end2.at("epoch").toInt(), 3);
  EXPECT_EQ(end2.at("data_shard").toInt(), 0);
  EXPECT_EQ(end2.at("data_shards").toInt(), 2);

  // Epoch 2 of the sharded run is an epoch on bin2 alone: 1 epoch on bin, then resumed on bin2 for
  // epoch 2, gives the same parameters to the bit (with epoch 2 on bin they would differ).
  const std::string by_hand = work_.path() + "/by-hand";
  ASSERT_EQ(train_on(by_hand, bin("bin"), 1).exit_code, 0);
  auto second = train_on(by_hand, bin("bin2"), 2, 100000, {"dataset.disable_validation=true"});
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_EQ(updates_in(by_hand + "/checkpoint2.pt"), u2);
  auto at_epoch2 = checkpoint::model_entry(checkpoint::load_file(sharded + "/checkpoint2.pt"), "checkpoint2.pt");
  expect_equal_parameters(at_epoch2, parameters(by_hand));

  // fairseq-cpp-generate and fairseq-cpp-eval validate given both directories read the first.
  const std::string data = bin("bin") + ":" + bin("bin2"), ckpt = sharded + "/checkpoint_last.pt";
  auto g = run({program("fairseq-cpp-generate"), data, "--path", ckpt, "--gen-subset", "valid", "--source-lang", "src",
                "--target-lang", "tgt", "--quiet"});
  ASSERT_EQ(g.exit_code, 0) << g.err;
  EXPECT_NE(g.out.find("| Translated 40 sentences"), std::string::npos) << g.out;
  auto v = run({program("fairseq-cpp-eval"), "validate", data, "--path", ckpt, "--valid-subset", "valid",
                "--source-lang", "src", "--target-lang", "tgt", "--max-tokens", "4096"});
  EXPECT_EQ(v.exit_code, 0) << v.err;
}

TEST_F(ShardedTraining, StoppedInTheSecondDirectoryResumesThereAtTheSameBatch) {
  const std::string data = bin("bin") + ":" + bin("bin2");
  const std::string straight = work_.path() + "/straight", resumed = work_.path() + "/resumed";
  ASSERT_EQ(train_on(straight, data, 2).exit_code, 0);
  const int64_t u1 = updates_in(straight + "/checkpoint1.pt");
  auto first = train_on(resumed, data, 2, static_cast<int>(u1 + 3));
  ASSERT_EQ(first.exit_code, 0) << first.err;
  auto mid = cursor(resumed + "/checkpoint_last.pt");
  EXPECT_EQ(mid.at("epoch").toInt(), 2);
  EXPECT_EQ(mid.at("global_batches").toInt(), 3);
  EXPECT_EQ(mid.at("data_shard").toInt(), 1);
  auto rest = train_on(resumed, data, 2);
  ASSERT_EQ(rest.exit_code, 0) << rest.err;
  EXPECT_NE(rest.err.find(fmt::format("loaded {}/checkpoint_last.pt (epoch 2 @ {} updates)", resumed, u1 + 3)),
            std::string::npos)
      << rest.err;
  EXPECT_EQ(rest.err.find("[data] " + bin("bin") + " train"), std::string::npos) << "the resume read bin's train";
  EXPECT_EQ(updates_in(resumed + "/checkpoint_last.pt"), updates_in(straight + "/checkpoint_last.pt"));
  expect_equal_parameters(parameters(straight), parameters(resumed));

  // Another list of directories cannot continue this cursor: one line, exit 2.
  for (const std::string& other : {bin("bin"), data + ":" + bin("up")}) {
    auto refused = train_on(resumed, other, 3);
    EXPECT_EQ(refused.exit_code, 2) << refused.err;
    auto errors = error_lines(refused.err);
    ASSERT_EQ(errors.size(), 1u) << refused.err;
    EXPECT_NE(errors[0].find(fmt::format("{}/checkpoint_last.pt continues epoch 3 on data directory 1 of 2, but "
                                         "`task.data` {} lists {}; resume with the directories it was trained on, or "
                                         "start the data from epoch 1 with `checkpoint.reset_dataloader`.",
                                         resumed, other, other == bin("bin") ? 1 : 3)),
              std::string::npos)
        << errors[0];
  }
}

TEST_F(ShardedTraining, DirectoriesWithOtherDictionariesAreRefused) {
  const std::string odd = corpus_->path() + "/odd";
  write_corpus(corpus_->path() + "/odd", 50, 21);
  auto p = run({program("fairseq-cpp-preprocess"), "--source-lang", "src", "--target-lang", "tgt", "--trainpref", odd,
                "--destdir", odd + "-bin", "--joined-dictionary"});
  ASSERT_EQ(p.exit_code, 0) << p.err;
  auto r = train_on(work_.path() + "/odd", bin("bin") + ":" + odd + "-bin", 1);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  auto errors = error_lines(r.err);
  ASSERT_EQ(errors.size(), 1u) << r.err;
  EXPECT_NE(errors[0].find(odd + "-bin/dict.src.txt: "), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("every data directory must be binarized with the first one's dictionaries"),
            std::string::npos)
      << errors[0];
}

TEST_F(ShardedTraining, Train1IsConcatenatedAndUpsamplePrimaryRepeatsTrain) {
  // up: train (60 sentences) and train1 (40). With --upsample-primary 2 an epoch has 2 x 60 + 40
  // sentences, and it is the epoch of one train split holding them in that order (flat).
  auto sentences = [](const RunResult& r) {
    int64_t n = 0;
    for (const auto& [update, j] : inner_logs(r.err)) n += static_cast<int64_t>(j["bsz"].get<double>());
    return n;
  };
  const std::string up2 = work_.path() + "/up2", up1 = work_.path() + "/up1", flat = work_.path() + "/flat";
  auto r2 = train_on(up2, bin("up"), 1, 100000, {"--upsample-primary", "2"});
  ASSERT_EQ(r2.exit_code, 0) << r2.err;
  EXPECT_EQ(sentences(r2), 160);
  EXPECT_NE(r2.err.find("[data] " + bin("up") + " train1 src-tgt 40 examples"), std::string::npos) << r2.err;
  auto rf = train_on(flat, bin("flat"), 1);
  ASSERT_EQ(rf.exit_code, 0) << rf.err;
  EXPECT_EQ(sentences(rf), 160);
  expect_equal_parameters(parameters(up2), parameters(flat));
  // fairseq's default 1: train and train1 once each.
  auto r1 = train_on(up1, bin("up"), 1);
  ASSERT_EQ(r1.exit_code, 0) << r1.err;
  EXPECT_EQ(sentences(r1), 100);
  auto bad = train_on(work_.path() + "/bad", bin("up"), 1, 100000, {"task.upsample_primary=0"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("`task.upsample_primary` must be greater than or equal to 1, but is 0 instead."),
            std::string::npos)
      << bad.err;
}

}  // namespace
}  // namespace fairseq_cpp::testing
