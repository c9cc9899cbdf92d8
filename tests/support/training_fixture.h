#pragma once
// Whole runs of fairseq-cpp-train on a small generated corpus (real preprocess, real data-bin): the
// fixture of the training-run suites (tests/trainer/training_run_test.cpp, and the torchrun suite).
#include <gtest/gtest.h>
#include "tests/support/torch.h"

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "fairseq_cpp/checkpoint/checkpoint.h"
#include "tests/support/test_support.h"

namespace fairseq_cpp::testing {

// A corpus where the target is the source reversed with every word renamed: learnable by a tiny model.
inline void write_corpus(const std::string& prefix, int lines, uint32_t seed) {
  std::mt19937 rng(seed);
  std::ofstream src(prefix + ".src"), tgt(prefix + ".tgt");
  for (int i = 0; i < lines; ++i) {
    int len = 3 + static_cast<int>(rng() % 10);
    std::vector<int> words(len);
    for (int& w : words) w = static_cast<int>(rng() % 30);
    for (int j = 0; j < len; ++j) src << (j ? " " : "") << "s" << words[j];
    for (int j = len - 1; j >= 0; --j) tgt << (j == len - 1 ? "" : " ") << "t" << (words[j] * 7 % 30);
    src << "\n";
    tgt << "\n";
  }
}

class TrainingFixture : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    corpus_ = new TempDir();
    write_corpus(corpus_->path() + "/train", 300, 1);
    write_corpus(corpus_->path() + "/valid", 40, 2);
    auto r = run({program("fairseq-cpp-preprocess"), "--source-lang", "src", "--target-lang", "tgt", "--trainpref",
                  corpus_->path() + "/train", "--validpref", corpus_->path() + "/valid", "--destdir",
                  corpus_->path() + "/bin", "--joined-dictionary"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  static void TearDownTestSuite() {
    delete corpus_;
    corpus_ = nullptr;
  }

  // A config for the corpus, saving into `save_dir`; `extra` lines are appended to their sections.
  std::string config(const std::string& save_dir, int world, int update_freq, int max_update,
                     const std::string& extra_checkpoint = "", double dropout = 0.0) {
    std::string yaml =
        fmt::format(R"(task:
  data: {data}
  source_lang: src
  target_lang: tgt
model:
  arch: transformer_tiny
  dropout: {dropout}
  share_all_embeddings: true
criterion:
  _name: label_smoothed_cross_entropy
  label_smoothing: 0.1
optimizer:
  _name: adam
  adam_betas: (0.9, 0.98)
lr_scheduler:
  _name: inverse_sqrt
  warmup_updates: 10
optimization:
  lr: 0.002
  max_update: {max_update}
  update_freq: [{update_freq}]
  clip_norm: 1.0
dataset:
  max_tokens: 200
  required_batch_size_multiple: 1
common:
  seed: 3
  cpu_threads: 1
  log_format: json
  log_interval: 1
distributed_training:
  distributed_world_size: {world}
  timeout: 60
checkpoint:
  save_dir: {save_dir}
  no_epoch_checkpoints: true
{extra_checkpoint}
)",
                    fmt::arg("data", corpus_->path() + "/bin"), fmt::arg("dropout", dropout),
                    fmt::arg("max_update", max_update), fmt::arg("update_freq", update_freq), fmt::arg("world", world),
                    fmt::arg("save_dir", save_dir), fmt::arg("extra_checkpoint", extra_checkpoint));
    return work_.write(fmt::format("cfg-{}.yaml", counter_++), yaml);
  }

  RunResult train(const std::string& cfg, std::vector<std::string> overrides = {},
                  const std::map<std::string, std::string>& env = {}) {
    std::vector<std::string> argv{program("fairseq-cpp-train"), cfg};
    argv.insert(argv.end(), overrides.begin(), overrides.end());
    return run(argv, env);
  }

  static checkpoint::TensorDict parameters(const std::string& save_dir) {
    std::string path = save_dir + "/checkpoint_last.pt";
    return checkpoint::model_entry(checkpoint::load_file(path), path);
  }

  // The EMA weights of a run's last checkpoint (ema.store_ema).
  static checkpoint::TensorDict ema_weights(const std::string& save_dir) {
    std::string path = save_dir + "/checkpoint_last.pt";
    return checkpoint::ema_entry(checkpoint::load_file(path), path);
  }

  static int64_t updates_in(const std::string& path) {
    auto ckpt = checkpoint::load_file(path);
    return ckpt.at("extra_state").toGenericDict().at("num_updates").toInt();
  }

  // Largest relative difference between two checkpoints' parameters.
  static double max_relative_difference(const checkpoint::TensorDict& a, const checkpoint::TensorDict& b) {
    double worst = 0;
    EXPECT_EQ(a.size(), b.size());
    for (const auto& item : a) {
      at::Tensor x = item.value().to(at::kDouble);
      at::Tensor y = b.at(item.key()).to(at::kDouble);
      double diff = (x - y).abs().max().item<double>() / std::max(1e-3, x.abs().max().item<double>());
      worst = std::max(worst, diff);
    }
    return worst;
  }

  // The train_inner JSON lines of a run's log, by num_updates.
  static std::map<int64_t, nlohmann::json> inner_logs(const std::string& log) {
    std::map<int64_t, nlohmann::json> out;
    std::istringstream in(log);
    std::string line;
    while (std::getline(in, line)) {
      auto at = line.find("[train_inner] {");
      if (at == std::string::npos) continue;
      auto j = nlohmann::json::parse(line.substr(at + 14));
      out[j["num_updates"].get<int64_t>()] = j;
    }
    return out;
  }

  inline static TempDir* corpus_ = nullptr;
  TempDir work_;
  int counter_ = 0;
};

// The worker pids of a spawning launcher, in rank order.
inline std::vector<int> children_of(int pid) {
  std::ifstream in(fmt::format("/proc/{}/task/{}/children", pid, pid));
  std::vector<int> pids;
  for (int p; in >> p;) pids.push_back(p);
  return pids;
}

}  // namespace fairseq_cpp::testing
