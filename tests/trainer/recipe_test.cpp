// What fairseq recipes use every day (issue 21), through whole runs of the programs on the small
// generated corpus: BLEU during validation and the checkpoints it selects, the validation
// schedule, curriculum, checkpoints without optimizer state, fairseq's IWSLT'14 and WMT'16 command
// lines as written, --score-reference and sharded generation.
#include <gtest/gtest.h>
#include "tests/support/torch.h"

#include <cmath>
#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tests/support/training_fixture.h"

namespace fairseq_cpp::testing {
namespace {
namespace fs = std::filesystem;

class Recipes : public TrainingFixture {
 protected:
  // The JSON summaries of a run's log with tag `tag` ("valid", "train"), in order.
  static std::vector<nlohmann::json> summaries(const std::string& log, const std::string& tag) {
    std::vector<nlohmann::json> out;
    std::istringstream in(log);
    const std::string marker = "[" + tag + "] {";
    for (std::string line; std::getline(in, line);) {
      auto at = line.find(marker);
      if (at != std::string::npos) out.push_back(nlohmann::json::parse(line.substr(at + marker.size() - 1)));
    }
    return out;
  }

  static c10::impl::GenericDict extra_state(const std::string& path) {
    return checkpoint::load_file(path).at("extra_state").toGenericDict();
  }

  // fairseq-cpp-generate's lines that start with `prefix` ("H-", "T-", "P-"), by sentence id.
  static std::map<int64_t, std::string> lines_by_id(const std::string& out, const std::string& prefix) {
    std::map<int64_t, std::string> found;
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);) {
      if (line.rfind(prefix, 0) != 0) continue;
      auto tab = line.find('\t');
      found[std::stoll(line.substr(prefix.size(), tab - prefix.size()))] = line.substr(tab + 1);
    }
    return found;
  }
};

TEST_F(Recipes, BleuIsSummedAcrossRanksAndPicksTheBestCheckpoints) {
  const std::string two = work_.path() + "/two", one = work_.path() + "/one";
  const std::vector<std::string> bleu_flags{"--eval-bleu", "--validate-interval-updates", "8", "--keep-best-checkpoints",
                                            "2", "--best-checkpoint-metric", "bleu",
                                            "--maximize-best-checkpoint-metric"};
  auto r2 = train(config(two, 2, 1, 40), bleu_flags);
  ASSERT_EQ(r2.exit_code, 0) << r2.err;
  auto r1 = train(config(one, 1, 2, 40), bleu_flags);
  ASSERT_EQ(r1.exit_code, 0) << r1.err;

  auto v2 = summaries(r2.err, "valid"), v1 = summaries(r1.err, "valid");
  ASSERT_GE(v2.size(), 4u) << r2.err;
  ASSERT_EQ(v1.size(), v2.size());
  std::vector<double> bleu;
  for (size_t i = 0; i < v2.size(); ++i) {
    ASSERT_TRUE(v2[i].contains("valid_bleu")) << v2[i].dump();
    bleu.push_back(v2[i]["valid_bleu"].get<double>());
    // Two ranks' statistics summed give the BLEU of the whole set: that of one rank with all of it.
    EXPECT_NEAR(bleu.back(), v1[i]["valid_bleu"].get<double>(), 0.011) << "validation " << i;
  }
  EXPECT_GT(*std::max_element(bleu.begin(), bleu.end()), 0.0) << "BLEU stayed 0: the check below would be vacuous";

  // checkpoint.best_bleu_<3 decimals><tie digit>.pt, the two best only, as fairseq names them.
  std::vector<double> kept;
  std::regex name(R"(checkpoint\.best_bleu_(\d+\.\d{3})\d\.pt)");
  for (const auto& entry : fs::directory_iterator(two)) {
    std::smatch m;
    std::string file = entry.path().filename().string();
    if (std::regex_match(file, m, name)) kept.push_back(std::stod(m[1]));
  }
  std::sort(kept.rbegin(), kept.rend());
  std::vector<double> best(bleu);
  std::sort(best.rbegin(), best.rend());
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_NEAR(kept[0], best[0], 0.0051);
  EXPECT_NEAR(kept[1], best[1], 0.0051);
  // checkpoint_best holds the best BLEU, and the valid lines say it.
  EXPECT_NEAR(extra_state(two + "/checkpoint_best.pt").at("best").toDouble(), best[0], 0.0051);
  EXPECT_NEAR(v2.back()["valid_best_bleu"].get<double>(), best[0], 0.0051);

  // The last validation's BLEU is sacreBLEU's BLEU of fairseq-cpp-generate's output for the same
  // checkpoint (beam 5, generation's defaults: --eval-bleu-args was not given).
  auto g = run({program("fairseq-cpp-generate"), corpus_->path() + "/bin", "--path", one + "/checkpoint_last.pt",
                "--gen-subset", "valid", "--source-lang", "src", "--target-lang", "tgt", "--sacrebleu", "--quiet"});
  ASSERT_EQ(g.exit_code, 0) << g.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(g.out, m, std::regex(R"(BLEU\|[^=]*= ([0-9.]+))"))) << g.out;
  EXPECT_NEAR(std::stod(m[1]), v1.back()["valid_bleu"].get<double>(), 0.011) << g.out;

  // --num-best-checkpoints 2 averages the two kept files: their mean, parameter by parameter.
  const std::string averaged = work_.path() + "/best2.pt";
  auto a = run({program("fairseq-cpp-eval"), "average", "--inputs", two, "--num-best-checkpoints", "2", "--output",
                averaged});
  ASSERT_EQ(a.exit_code, 0) << a.err;
  std::vector<checkpoint::TensorDict> kept_models;
  for (const auto& entry : fs::directory_iterator(two)) {
    std::string file = entry.path().filename().string();
    if (std::regex_match(file, name)) kept_models.push_back(checkpoint::model_entry(checkpoint::load_file(entry.path()), file));
  }
  ASSERT_EQ(kept_models.size(), 2u);
  auto mean = checkpoint::model_entry(checkpoint::load_file(averaged), averaged);
  for (const auto& item : mean) {
    at::Tensor expected = (kept_models[0].at(item.key()).to(at::kDouble) + kept_models[1].at(item.key()).to(at::kDouble)) / 2;
    EXPECT_TRUE(torch::allclose(item.value().to(at::kDouble), expected, 1e-6, 1e-7)) << item.key();
  }
  auto three = run({program("fairseq-cpp-eval"), "average", "--inputs", two, "--num-best-checkpoints", "3", "--output",
                    averaged});
  EXPECT_EQ(three.exit_code, 2);
  EXPECT_NE(three.err.find("holds 2 best checkpoints (checkpoint.best_bleu_VALUE.pt), but 3 are to be averaged"),
            std::string::npos)
      << three.err;
}

TEST_F(Recipes, ValidateAfterUpdatesCurriculumAndCheckpointsWithoutOptimizerState) {
  const std::string dir = work_.path() + "/schedule";
  auto r = train(config(dir, 1, 1, 20, "  save_interval_updates: 5\n  no_save_optimizer_state: true"),
                 {"dataset.validate_interval_updates=5", "dataset.validate_after_updates=12", "dataset.curriculum=1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto valid = summaries(r.err, "valid");
  ASSERT_FALSE(valid.empty()) << r.err;
  for (const auto& v : valid) EXPECT_GE(v["valid_num_updates"].get<int64_t>(), 12) << v.dump();
  // Epoch 1 (curriculum 1) keeps the batches in length order; epoch 2 shuffles.
  auto early = extra_state(dir + "/checkpoint_1_5.pt").at("train_iterator").toGenericDict();
  EXPECT_FALSE(early.at("shuffle").toBool());
  auto last = extra_state(dir + "/checkpoint_last.pt").at("train_iterator").toGenericDict();
  EXPECT_EQ(last.at("epoch").toInt(), 2);
  EXPECT_TRUE(last.at("shuffle").toBool());
  // No optimizer state in the files; a resume starts the optimizer afresh and says so.
  EXPECT_FALSE(checkpoint::load_file(dir + "/checkpoint_last.pt").contains("optimizer"));
  auto resumed = train(config(dir, 1, 1, 24));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("holds no optimizer state (saved with --no-save-optimizer-state)"), std::string::npos)
      << resumed.err;
  EXPECT_TRUE(checkpoint::load_file(dir + "/checkpoint_last.pt").contains("optimizer"));
  EXPECT_EQ(updates_in(dir + "/checkpoint_last.pt"), 24);
}

// fairseq's examples/translation IWSLT'14 recipe, flag for flag, with only what small data needs
// added (where to save, when to stop, the languages of the generated corpus).
TEST_F(Recipes, FairseqsIwsltRecipeRunsAsWritten) {
  const std::string bin = corpus_->path() + "/bin", save = work_.path() + "/iwslt";
  const std::vector<std::string> recipe{
      bin, "--arch", "transformer_iwslt_de_en", "--share-decoder-input-output-embed", "--optimizer", "adam",
      "--adam-betas", "(0.9, 0.98)", "--clip-norm", "0.0", "--lr", "5e-4", "--lr-scheduler", "inverse_sqrt",
      "--warmup-updates", "4000", "--dropout", "0.3", "--weight-decay", "0.0001", "--criterion",
      "label_smoothed_cross_entropy", "--label-smoothing", "0.1", "--max-tokens", "4096", "--eval-bleu",
      "--eval-bleu-args", R"({"beam": 5, "max_len_a": 1.2, "max_len_b": 10})", "--eval-bleu-detok", "moses",
      "--eval-bleu-remove-bpe", "--eval-bleu-print-samples", "--best-checkpoint-metric", "bleu",
      "--maximize-best-checkpoint-metric"};
  std::vector<std::string> argv{program("fairseq-cpp-train")};
  argv.insert(argv.end(), recipe.begin(), recipe.end());
  for (const char* extra : {"--save-dir", "", "--max-epoch", "1", "--source-lang", "src", "--target-lang", "tgt",
                            "--ddp-backend=no_c10d", "--cpu-threads", "1"})
    argv.push_back(std::string(extra).empty() ? save : extra);
  auto r = run(argv);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("example hypothesis: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("example reference: t"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("| bleu "), std::string::npos) << r.err;
  EXPECT_TRUE(fs::exists(save + "/checkpoint_best.pt"));
  // Its fairseq-generate line, and the WMT'16 one (beam 4, lenpen 0.6), with the validation's length limit.
  for (const auto& search : std::vector<std::vector<std::string>>{{"--batch-size", "128", "--beam", "5"},
                                                                   {"--beam", "4", "--lenpen", "0.6"}}) {
    std::vector<std::string> gen{program("fairseq-cpp-generate"), bin, "--path", save + "/checkpoint_best.pt"};
    gen.insert(gen.end(), search.begin(), search.end());
    // A model of one small epoch writes up to the length limit (200 tokens); the eval-bleu line's limit keeps it short.
    for (const char* extra : {"--remove-bpe", "--gen-subset", "valid", "--max-len-a", "1.2", "--max-len-b", "10"})
      gen.push_back(extra);
    auto g = run(gen);
    ASSERT_EQ(g.exit_code, 0) << g.err;
    EXPECT_NE(g.out.find("| Generate valid with beam=" + search[search[0] == "--beam" ? 1 : 3] + ": BLEU4 = "),
              std::string::npos)
        << g.out;
  }
  // The WMT'16 "scaling NMT" training line, --fp16 included: every flag is taken (the big model
  // would take long to train here: its resolved config is checked).
  std::vector<std::string> dump{program("fairseq-cpp-train"), bin, "--arch", "transformer_vaswani_wmt_en_de_big",
                                "--share-all-embeddings", "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)",
                                "--clip-norm", "0.0", "--lr", "0.0005", "--lr-scheduler", "inverse_sqrt",
                                "--warmup-updates", "4000", "--warmup-init-lr", "1e-07", "--dropout", "0.3",
                                "--weight-decay", "0.0", "--criterion", "label_smoothed_cross_entropy",
                                "--label-smoothing", "0.1", "--max-tokens", "3584", "--fp16", "--dump-config"};
  auto d = run(dump);
  ASSERT_EQ(d.exit_code, 0) << d.err;
  EXPECT_NE(d.out.find("fp16: true"), std::string::npos) << d.out;
  EXPECT_NE(d.out.find("warmup_init_lr: 1e-07"), std::string::npos) << d.out;
}

TEST_F(Recipes, ScoreReferenceScoresTheTargetsAndShardsSplitTheSet) {
  const std::string dir = work_.path() + "/model";
  ASSERT_EQ(train(config(dir, 1, 1, 20)).exit_code, 0);
  const std::vector<std::string> base{program("fairseq-cpp-generate"), corpus_->path() + "/bin", "--path",
                                      dir + "/checkpoint_last.pt", "--gen-subset", "valid", "--source-lang", "src",
                                      "--target-lang", "tgt"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> argv(base);
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto r = run(argv);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r;
  };
  // --score-reference: each H- line is the reference, scored by the mean of its P- values.
  auto s = with({"--score-reference"});
  auto hyps = lines_by_id(s.out, "H-"), refs = lines_by_id(s.out, "T-"), pos = lines_by_id(s.out, "P-");
  ASSERT_EQ(hyps.size(), 40u) << s.out;
  double nll_sum = 0;
  int64_t tokens = 0;
  for (const auto& [id, h] : hyps) {
    auto tab = h.find('\t');
    EXPECT_EQ(h.substr(tab + 1), refs.at(id)) << id;
    std::istringstream in(pos.at(id));
    double sum = 0;
    int n = 0;
    for (double p; in >> p; ++n) sum += p;
    EXPECT_NEAR(std::stod(h.substr(0, tab)), sum / n, 1e-3) << id;
    nll_sum -= sum;
    tokens += n;
  }
  // Independently: the criterion's nll_loss over the same split (fairseq-cpp-eval validate, base 2).
  auto v = run({program("fairseq-cpp-eval"), "validate", corpus_->path() + "/bin", "--path", dir + "/checkpoint_last.pt",
                "--valid-subset", "valid", "--source-lang", "src", "--target-lang", "tgt", "--max-tokens", "4096"});
  ASSERT_EQ(v.exit_code, 0) << v.err;
  std::smatch m;
  std::string text = v.out + v.err;
  ASSERT_TRUE(std::regex_search(text, m, std::regex(R"(nll_loss[" :=|]+([0-9.]+))"))) << text;
  EXPECT_NEAR(nll_sum / static_cast<double>(tokens) / std::log(2.0), std::stod(m[1]), 2e-3) << text;

  // --num-shards 2: the two shards translate disjoint halves that together are the whole set, each
  // sentence as the unsharded run does.
  auto whole = lines_by_id(with({"--batch-size", "8"}).out, "H-");
  auto first = lines_by_id(with({"--batch-size", "8", "--num-shards", "2", "--shard-id", "0"}).out, "H-");
  auto second = lines_by_id(with({"--batch-size", "8", "--num-shards", "2", "--shard-id", "1"}).out, "H-");
  ASSERT_EQ(whole.size(), 40u);
  EXPECT_EQ(first.size(), 24u);  // batches 0, 2, 4 of five of 8 sentences
  EXPECT_EQ(second.size(), 16u);
  EXPECT_EQ(first.size() + second.size(), whole.size());
  for (const auto& [id, h] : first) {
    EXPECT_EQ(second.count(id), 0u) << id;
    EXPECT_EQ(h, whole.at(id)) << id;
  }
  for (const auto& [id, h] : second) EXPECT_EQ(h, whole.at(id)) << id;
  auto bad = run({base[0], base[1], base[2], base[3], "--num-shards", "2", "--shard-id", "2"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("`dataset.shard_id` must be less than `dataset.num_shards` (2), but is 2 instead."),
            std::string::npos)
      << bad.err;
}

TEST_F(Recipes, EnsemblesAverageTheModelsProbabilities) {
  const std::string dir = work_.path() + "/models";
  ASSERT_EQ(train(config(dir, 1, 1, 20, "  save_interval_updates: 10\n  keep_interval_updates: -1")).exit_code, 0);
  const std::string a = dir + "/checkpoint_1_10.pt", b = dir + "/checkpoint_last.pt";
  auto generate = [&](const std::string& path, std::vector<std::string> extra) {
    std::vector<std::string> argv{program("fairseq-cpp-generate"), corpus_->path() + "/bin", "--path", path,
                                  "--gen-subset", "valid", "--source-lang", "src", "--target-lang", "tgt"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto r = run(argv);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.out;
  };
  // A model with itself: the same translations and scores as the model alone.
  auto alone = lines_by_id(generate(b, {}), "H-"), twice = lines_by_id(generate(b + ":" + b, {}), "H-");
  ASSERT_EQ(alone.size(), 40u);
  for (const auto& [id, h] : alone) {
    const std::string& e = twice.at(id);
    EXPECT_EQ(h.substr(h.find('\t')), e.substr(e.find('\t'))) << id;
    EXPECT_NEAR(std::stod(h), std::stod(e), 1e-5) << id;
  }
  // Two models: each reference token's log-probability is log((p_a + p_b) / 2), computed here from
  // each model's own --score-reference output.
  auto pa = lines_by_id(generate(a, {"--score-reference"}), "P-");
  auto pb = lines_by_id(generate(b, {"--score-reference"}), "P-");
  auto pab = lines_by_id(generate(a + ":" + b, {"--score-reference"}), "P-");
  ASSERT_EQ(pab.size(), 40u);
  size_t tokens = 0;
  for (const auto& [id, line] : pab) {
    std::istringstream ia(pa.at(id)), ib(pb.at(id)), iab(line);
    for (double x, y, z; iab >> z;) {
      ASSERT_TRUE(ia >> x);
      ASSERT_TRUE(ib >> y);
      EXPECT_NEAR(z, std::log((std::exp(x) + std::exp(y)) / 2), 2e-4) << id;
      ++tokens;
    }
  }
  EXPECT_GT(tokens, 200u);
  // fairseq scales each model's logits by the temperature before averaging; refused, not ignored.
  auto r = run({program("fairseq-cpp-generate"), corpus_->path() + "/bin", "--path", a + ":" + b, "--source-lang", "src",
                "--target-lang", "tgt", "--gen-subset", "valid", "--temperature", "0.5"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("with an ensemble of 2 models is not supported yet"), std::string::npos) << r.err;
}

#ifdef FSQ_REQUIREMENTS_PYTHON
// common.tensorboard_logdir: the real tensorboard package reads what a run logged, under fairseq's
// tags (train_inner, train, valid) and names, at step num_updates.
TEST_F(Recipes, TensorboardReadsTheRunsScalars) {
  const std::string dir = work_.path() + "/tb", logdir = work_.path() + "/tb-logs";
  auto r = train(config(dir, 2, 1, 16), {"--tensorboard-logdir", logdir, "dataset.validate_interval_updates=8"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string script = work_.write("read_tb.py", R"(import json, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
out = {}
for tag in ("train_inner", "train", "valid"):
    acc = EventAccumulator(sys.argv[1] + "/" + tag)
    acc.Reload()
    out[tag] = {name: [[e.step, e.value] for e in acc.Scalars(name)] for name in acc.Tags()["scalars"]}
print(json.dumps(out))
)");
  auto py = run({FSQ_REQUIREMENTS_PYTHON, script, logdir});
  ASSERT_EQ(py.exit_code, 0) << py.err;
  auto tb = nlohmann::json::parse(py.out);
  // Every valid summary's loss is there at its update, as float32.
  auto valid = summaries(r.err, "valid");
  ASSERT_FALSE(valid.empty());
  ASSERT_TRUE(tb["valid"].contains("loss")) << py.out;
  std::map<int64_t, double> tb_valid;
  for (const auto& e : tb["valid"]["loss"]) tb_valid[e[0].get<int64_t>()] = e[1].get<double>();
  for (const auto& v : valid) {
    int64_t step = v["valid_num_updates"].get<int64_t>();
    ASSERT_EQ(tb_valid.count(step), 1u) << step << " " << py.out;
    EXPECT_NEAR(tb_valid[step], v["valid_loss"].get<double>(), 1e-3);
  }
  // train_inner: one loss per logged update (log_interval 1), steps 1..16.
  ASSERT_EQ(tb["train_inner"]["loss"].size(), 16u) << py.out;
  EXPECT_EQ(tb["train_inner"]["loss"][0][0].get<int64_t>(), 1);
  EXPECT_EQ(tb["train_inner"]["loss"][15][0].get<int64_t>(), 16);
  for (const char* name : {"nll_loss", "ppl", "wps", "lr", "gnorm"}) EXPECT_TRUE(tb["train_inner"].contains(name)) << name;
  EXPECT_FALSE(tb["train_inner"].contains("num_updates"));  // the step, not a scalar (fairseq's rule)
}
#endif


// fairseq's EMA (issue 18): the shadow is saved as extra_state.ema and resumes exactly (its update
// counter too), validation uses it with ema.validate_with_ema, the evaluation programs load it with
// --use-ema, and ema_seed_model starts a run from another run's EMA.
TEST_F(Recipes, EmaResumesExactlyAndValidationAndEvaluationUseIt) {
  const std::string ema = "ema:\n  store_ema: true\n  ema_decay: 0.9\n  ema_update_freq: 3\n  validate_with_ema: true\n";
  const std::string straight = work_.path() + "/straight", resumed = work_.path() + "/resumed";
  auto rs = train(config(straight, 1, 1, 30, ema, 0.1));
  ASSERT_EQ(rs.exit_code, 0) << rs.err;
  EXPECT_NE(rs.err.find("EMA of the weights: decay 0.9, from update 0, every 3 update(s); validation uses it"),
            std::string::npos)
      << rs.err;
  ASSERT_EQ(train(config(resumed, 1, 1, 17, ema, 0.1)).exit_code, 0);
  EXPECT_EQ(extra_state(resumed + "/checkpoint_last.pt").at("ema_update_counter").toInt(), 2);  // steps at 15, then 16, 17
  auto r2 = train(config(resumed, 1, 1, 30, ema, 0.1));
  ASSERT_EQ(r2.exit_code, 0) << r2.err;
  const std::string last = straight + "/checkpoint_last.pt";
  const auto s_ckpt = checkpoint::load_file(last), r_ckpt = checkpoint::load_file(resumed + "/checkpoint_last.pt");
  const auto s_ema = checkpoint::ema_entry(s_ckpt, "straight"), r_ema = checkpoint::ema_entry(r_ckpt, "resumed");
  const auto s_model = checkpoint::model_entry(s_ckpt, "straight");
  ASSERT_EQ(s_ema.size(), s_model.size());
  double moved = 0;
  for (const auto& item : s_ema) {
    EXPECT_TRUE(torch::equal(item.value(), r_ema.at(item.key()))) << item.key();
    EXPECT_TRUE(torch::equal(s_model.at(item.key()), checkpoint::model_entry(r_ckpt, "resumed").at(item.key())))
        << item.key();
    moved = std::max(moved, (item.value() - s_model.at(item.key())).abs().max().item<double>());
  }
  EXPECT_GT(moved, 1e-3);  // the EMA is not the model

  // The last validation (at update 30, of the saved weights) used the EMA: fairseq-cpp-eval
  // validate --use-ema gives its loss, without --use-ema another one.
  auto valid = summaries(rs.err, "valid");
  ASSERT_FALSE(valid.empty()) << rs.err;
  ASSERT_EQ(valid.back()["valid_num_updates"].get<double>(), 30);
  const double logged = valid.back()["valid_loss"].get<double>();
  auto eval_loss = [&](const std::string& path, bool use_ema) {
    std::vector<std::string> argv{program("fairseq-cpp-eval"), "validate", corpus_->path() + "/bin", "--path", path,
                                  "--valid-subset", "valid", "--source-lang", "src", "--target-lang", "tgt",
                                  "--max-tokens", "4096"};
    if (use_ema) argv.push_back("--use-ema");
    auto v = run(argv);
    EXPECT_EQ(v.exit_code, 0) << v.err;
    std::smatch m;
    const std::string text = v.out;
    EXPECT_TRUE(std::regex_search(text, m, std::regex(R"(\| loss ([0-9.]+))"))) << text;
    return m.empty() ? -1.0 : std::stod(m[1]);
  };
  EXPECT_NEAR(eval_loss(last, true), logged, 1e-3);
  const double own = eval_loss(last, false);
  EXPECT_GT(std::abs(own - logged), 5e-3) << own << " " << logged;

  // generate --use-ema translates with the EMA; a checkpoint without one is refused (exit 2).
  const std::vector<std::string> gen{program("fairseq-cpp-generate"), corpus_->path() + "/bin", "--path", last,
                                     "--gen-subset", "valid", "--source-lang", "src", "--target-lang", "tgt",
                                     "--use-ema", "--quiet"};
  auto g = run(gen);
  ASSERT_EQ(g.exit_code, 0) << g.err;
  EXPECT_NE(g.err.find("its EMA weights"), std::string::npos) << g.err;
  const std::string plain = work_.path() + "/plain";
  ASSERT_EQ(train(config(plain, 1, 1, 1)).exit_code, 0);
  std::vector<std::string> plain_gen = gen;
  plain_gen[3] = plain + "/checkpoint_last.pt";
  auto no_ema = run(plain_gen);
  EXPECT_EQ(no_ema.exit_code, 2) << no_ema.err;
  EXPECT_NE(no_ema.err.find(plain_gen[3] + " holds no EMA weights (extra_state.ema)"), std::string::npos) << no_ema.err;

  // ema_seed_model: with decay 1 the EMA stays the seed's exactly.
  const std::string seeded = work_.path() + "/seeded";
  auto rseed = train(config(seeded, 1, 1, 2, "ema:\n  store_ema: true\n  ema_decay: 1.0\n  ema_seed_model: " + last + "\n"));
  ASSERT_EQ(rseed.exit_code, 0) << rseed.err;
  const auto seeded_ema = checkpoint::ema_entry(checkpoint::load_file(seeded + "/checkpoint_last.pt"), "seeded");
  for (const auto& item : s_ema) EXPECT_TRUE(torch::equal(item.value(), seeded_ema.at(item.key()))) << item.key();
  auto missing = train(config(work_.path() + "/x", 1, 1, 2), {"ema.ema_seed_model=" + last});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("`ema.store_ema` must be true when `ema.ema_seed_model` is set"), std::string::npos)
      << missing.err;
}


// common.bf16 (issue 18): a whole run under autocast keeps float32 weights in its checkpoints,
// validates within 2% of the float32 run's loss, fairseq-cpp-eval validate --bf16 repeats its
// validation, and a 2-worker run resumed mid-epoch ends as the uninterrupted one.
TEST_F(Recipes, Bf16TrainsAndValidatesCloseToFloat32) {
  const std::string fp32 = work_.path() + "/fp32", bf16 = work_.path() + "/bf16";
  auto a = train(config(fp32, 1, 1, 30));
  ASSERT_EQ(a.exit_code, 0) << a.err;
  auto b = train(config(bf16, 1, 1, 30), {"--bf16"});
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_NE(b.err.find("precision bf16 (autocast; float32 weights, gradients and optimizer state)"), std::string::npos)
      << b.err;
  const auto pa = parameters(fp32), pb = parameters(bf16);
  for (const auto& item : pb) EXPECT_EQ(item.value().scalar_type(), at::kFloat) << item.key();
  auto va = summaries(a.err, "valid"), vb = summaries(b.err, "valid");
  ASSERT_FALSE(va.empty());
  ASSERT_EQ(va.size(), vb.size());
  const double la = va.back()["valid_loss"].get<double>(), lb = vb.back()["valid_loss"].get<double>();
  EXPECT_NEAR(lb, la, 0.02 * la);
  // The runs differ: some updates' training losses (logged to 3 decimals, as fairseq; 10 of 30 on
  // an AVX2 EPYC), and every linear layer's weights by about 1% of their largest value (0.5-1.4%
  // there), where two float32 runs agree to the bit.
  auto ia = inner_logs(a.err), ib = inner_logs(b.err);
  ASSERT_EQ(ia.size(), 30u);
  int differ = 0;
  for (auto& [n, j] : ia) differ += j["loss"] != ib[n]["loss"];
  EXPECT_GT(differ, 0) << "bf16 changed no loss";
  int linear_weights = 0;
  for (const auto& item : pa) {
    const std::string& key = item.key();
    const bool linear = key.find("_proj.weight") != std::string::npos || key.find(".fc1.weight") != std::string::npos ||
                        key.find(".fc2.weight") != std::string::npos;
    if (!linear) continue;
    ++linear_weights;
    const double moved = (item.value() - pb.at(key)).abs().max().item<double>();
    EXPECT_GT(moved, 1e-3 * item.value().abs().max().item<double>()) << key << ": bf16 changed nothing";
  }
  EXPECT_GT(linear_weights, 0);
  auto eval = [&](const std::string& dir, bool use_bf16) {
    std::vector<std::string> argv{program("fairseq-cpp-eval"), "validate", corpus_->path() + "/bin", "--path",
                                  dir + "/checkpoint_last.pt", "--valid-subset", "valid", "--source-lang", "src",
                                  "--target-lang", "tgt", "--max-tokens", "200"};
    if (use_bf16) argv.push_back("--bf16");
    auto v = run(argv);
    EXPECT_EQ(v.exit_code, 0) << v.err;
    std::smatch m;
    EXPECT_TRUE(std::regex_search(v.out, m, std::regex(R"(\| loss ([0-9.]+))"))) << v.out;
    return m.empty() ? -1.0 : std::stod(m[1]);
  };
  EXPECT_NEAR(eval(bf16, true), lb, 1e-3);
  EXPECT_NEAR(eval(fp32, false), la, 1e-3);

  // Two workers with dropout, stopped mid-epoch and resumed: the uninterrupted run's parameters.
  const std::string straight = work_.path() + "/straight", resumed = work_.path() + "/resumed";
  ASSERT_EQ(train(config(straight, 2, 1, 16, "", 0.1), {"--bf16"}).exit_code, 0);
  ASSERT_EQ(train(config(resumed, 2, 1, 9, "", 0.1), {"--bf16"}).exit_code, 0);
  auto r2 = train(config(resumed, 2, 1, 16, "", 0.1), {"--bf16"});
  ASSERT_EQ(r2.exit_code, 0) << r2.err;
  EXPECT_NE(r2.err.find("@ 9 updates)"), std::string::npos) << r2.err;
  auto ps = parameters(straight), pr = parameters(resumed);
  for (const auto& item : ps) EXPECT_TRUE(torch::equal(item.value(), pr.at(item.key()))) << item.key();
}


// common.fp16 (issue 18) on the CPU: fairseq's loss scaler over a whole run, in the log
// (loss_scale) and in the checkpoint, so that a resume mid-epoch continues exactly; the float32
// arithmetic with power-of-2 scales gives the float32 run's parameters.
TEST_F(Recipes, Fp16LossScalerResumesExactly) {
  const std::vector<std::string> fp16{"--fp16", "--fp16-init-scale", "8", "--fp16-scale-window", "4"};
  const std::string straight = work_.path() + "/straight", resumed = work_.path() + "/resumed",
                    fp32 = work_.path() + "/fp32";
  auto rs = train(config(straight, 1, 1, 20, "", 0.1), fp16);
  ASSERT_EQ(rs.exit_code, 0) << rs.err;
  EXPECT_NE(rs.err.find("precision fp16 (dynamic loss scaler; the CPU computes in float32)"), std::string::npos)
      << rs.err;
  EXPECT_NE(rs.err.find("loss scaler: scale 8, window 4, tolerance 0, minimum 0.0001"), std::string::npos) << rs.err;
  auto logs = inner_logs(rs.err);
  ASSERT_EQ(logs.size(), 20u);
  // The scale doubles after updates 4, 8, 12, 16 and 20 (iters 3, 7, ...: (iter + 1) % 4 == 0).
  for (auto& [n, j] : logs) EXPECT_EQ(j["loss_scale"].get<double>(), 8 * std::pow(2, n / 4)) << "update " << n;
  ASSERT_EQ(train(config(resumed, 1, 1, 10, "", 0.1), fp16).exit_code, 0);
  auto r2 = train(config(resumed, 1, 1, 20, "", 0.1), fp16);
  ASSERT_EQ(r2.exit_code, 0) << r2.err;
  auto ps = parameters(straight), pr = parameters(resumed);
  for (const auto& item : ps) EXPECT_TRUE(torch::equal(item.value(), pr.at(item.key()))) << item.key();
  auto ss = extra_state(straight + "/checkpoint_last.pt").at("loss_scaler").toGenericDict();
  auto sr = extra_state(resumed + "/checkpoint_last.pt").at("loss_scaler").toGenericDict();
  EXPECT_EQ(ss.at("loss_scale").toDouble(), 256.0);
  for (const char* key : {"iter", "last_overflow_iter", "last_rescale_iter", "overflows_since_rescale"})
    EXPECT_EQ(ss.at(key).toInt(), sr.at(key).toInt()) << key;
  EXPECT_EQ(ss.at("iter").toInt(), 20);
  auto lr = inner_logs(r2.err);
  for (auto& [n, j] : lr) EXPECT_EQ(j["loss_scale"], logs[n]["loss_scale"]) << "update " << n;
  ASSERT_EQ(train(config(fp32, 1, 1, 20, "", 0.1)).exit_code, 0);
  for (const auto& item : parameters(fp32)) EXPECT_TRUE(torch::equal(item.value(), ps.at(item.key()))) << item.key();
}

}  // namespace
}  // namespace fairseq_cpp::testing
