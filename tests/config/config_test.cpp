#include "fairseq_cpp/config/config.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "fairseq_cpp/core/errors.h"
#include "tests/support/test_support.h"

namespace fairseq_cpp::config {
namespace {

using testing::TempDir;

// The problems that loading reports, or an empty list when it succeeds.
std::vector<std::string> problems_of(const std::string& path, const std::vector<Assignment>& assignments = {}) {
  try {
    load_config(path, assignments);
  } catch (const ConfigError& e) {
    return e.problems();
  }
  return {};
}

TEST(Config, DefaultsAreFairseqs) {
  Config cfg = load_config("");
  EXPECT_EQ(cfg.common.seed, 1);
  EXPECT_EQ(cfg.common.log_interval, 100);
  EXPECT_EQ(cfg.optimization.lr, std::vector<double>{0.25});
  EXPECT_EQ(cfg.optimization.update_freq, std::vector<int64_t>{1});
  EXPECT_EQ(cfg.optimization.max_update, 0);
  EXPECT_EQ(cfg.checkpoint.save_dir, "checkpoints");
  EXPECT_EQ(cfg.checkpoint.restore_file, "checkpoint_last.pt");
  EXPECT_EQ(cfg.dataset.required_batch_size_multiple, 8);
  EXPECT_EQ(cfg.generation.beam, 5);
  EXPECT_FALSE(cfg.model.dropout.has_value());
}

TEST(Config, ReadsSectionsAndKeys) {
  TempDir dir;
  std::string path = dir.write("c.yaml", R"(
common:
  seed: 7
  log_format: json
dataset:
  max_tokens: 4096
optimization:
  lr: 0.0005          # a scalar for a list key, as fairseq allows
  update_freq: [2]
  clip_norm: 25
  max_update: 952
optimizer:
  _name: adam
  adam_betas: (0.9, 0.98)
lr_scheduler:
  _name: inverse_sqrt
  warmup_updates: 400
criterion:
  _name: label_smoothed_cross_entropy
  label_smoothing: 0.1
model:
  arch: transformer_iwslt_de_en
  dropout: 0.1
  share_all_embeddings: true
)");
  Config cfg = load_config(path);
  EXPECT_EQ(cfg.common.seed, 7);
  EXPECT_EQ(cfg.common.log_format, "json");
  EXPECT_EQ(cfg.dataset.max_tokens, 4096);
  EXPECT_EQ(cfg.optimization.lr, std::vector<double>{0.0005});
  EXPECT_EQ(cfg.optimization.update_freq, std::vector<int64_t>{2});
  EXPECT_DOUBLE_EQ(cfg.optimization.clip_norm, 25.0);
  EXPECT_EQ(cfg.optimization.max_update, 952);
  EXPECT_EQ(cfg.optimizer._name, "adam");
  EXPECT_EQ(cfg.optimizer.adam_betas, (std::vector<double>{0.9, 0.98}));
  EXPECT_EQ(cfg.lr_scheduler.warmup_updates.value_or(-1), 400);
  EXPECT_DOUBLE_EQ(cfg.criterion.label_smoothing, 0.1);
  EXPECT_EQ(cfg.model.arch, "transformer_iwslt_de_en");
  EXPECT_EQ(cfg.model.dropout, 0.1);
  EXPECT_EQ(cfg.model.share_all_embeddings, true);
}

TEST(Config, AssignmentsOverrideTheFileInOrder) {
  TempDir dir;
  std::string path = dir.write("c.yaml", "optimization:\n  lr: [0.1]\n  max_update: 5\n");
  Config cfg = load_config(path, {{"optimization.lr", "3e-4", "cli"},
                                  {"optimization.max_update", "10", "cli"},
                                  {"optimization.max_update", "20", "cli"},
                                  {"optimizer.adam_betas", "[0.9, 0.98]", "cli"},
                                  {"model.dropout", "0.2", "cli"},
                                  {"model.dropout", "", "cli"}});
  EXPECT_EQ(cfg.optimization.lr, std::vector<double>{3e-4});
  EXPECT_EQ(cfg.optimization.max_update, 20);
  EXPECT_EQ(cfg.optimizer.adam_betas, (std::vector<double>{0.9, 0.98}));
  EXPECT_FALSE(cfg.model.dropout.has_value()) << "an empty value resets an optional key";
}

TEST(Config, AliasesAreAccepted) {
  Config cfg = load_config("", {{"dataset.max_sentences", "64", "cli"}, {"model._name", "transformer_tiny", "cli"}});
  EXPECT_EQ(cfg.dataset.batch_size, 64);
  EXPECT_EQ(cfg.model.arch, "transformer_tiny");
}

TEST(Config, UnknownKeyNamesTheNearestKeyWithFileLineAndColumn) {
  TempDir dir;
  std::string path = dir.write("c.yaml", "optimization:\n  max_updates: 10\n");
  auto problems = problems_of(path);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0],
            path + ":2:3: `optimization.max_updates` is not a key; did you mean `optimization.max_update`?");
}

TEST(Config, KeyInTheWrongSectionPointsToItsSection) {
  auto problems = problems_of("", {{"optimization.max_tokens", "10", "command line `optimization.max_tokens=10`"}});
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0],
            "command line `optimization.max_tokens=10`: `optimization.max_tokens` is not a key; did you mean "
            "`dataset.max_tokens`?");
}

TEST(Config, UnknownSectionNamesTheNearestSection) {
  TempDir dir;
  std::string path = dir.write("c.yaml", "optimisation:\n  lr: 1\n");
  auto problems = problems_of(path);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0], path + ":1:1: `optimisation` is not a config section; did you mean `optimization`?");
}

TEST(Config, FarOffKeyGetsNoGuess) {
  auto problems = problems_of("", {{"dataset.zzzzqqqq", "1", "x"}});
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0], "x: `dataset.zzzzqqqq` is not a key; `--help` lists every key.");
}

TEST(Config, WrongTypeSaysWhatWasExpectedAndFound) {
  TempDir dir;
  std::string path = dir.write("c.yaml", "dataset:\n  max_tokens: many\ncommon:\n  fp16: maybe\n");
  auto problems = problems_of(path);
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_EQ(problems[0], path + ":2:15: `dataset.max_tokens` must be an integer, but is \"many\" instead.");
  EXPECT_EQ(problems[1], path + ":4:9: `common.fp16` must be a bool (true or false), but is \"maybe\" instead.");
}

TEST(Config, ListWhereScalarExpected) {
  auto problems = problems_of("", {{"generation.beam", "[1, 2]", "x"}});
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0], "x: `generation.beam` must be an integer, but is a list instead.");
}

TEST(Config, OutOfRangeSaysTheRule) {
  auto problems = problems_of("", {{"generation.beam", "0", "x"},
                                   {"criterion.label_smoothing", "1.5", "y"},
                                   {"optimization.update_freq", "[1, 0]", "z"}});
  ASSERT_EQ(problems.size(), 3u);
  EXPECT_EQ(problems[0], "x: `generation.beam` must be greater than 0, but is 0 instead.");
  EXPECT_EQ(problems[1], "y: `criterion.label_smoothing` must be less than or equal to 1, but is 1.5 instead.");
  EXPECT_EQ(problems[2], "z: `optimization.update_freq` must be greater than 0 in every element, but has 0 instead.");
}

TEST(Config, ChoiceListsTheAllowedValues) {
  auto problems = problems_of("", {{"common.log_format", "xml", "x"}});
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0],
            "x: `common.log_format` must be one of \"\", tqdm, simple, json, none, but is \"xml\" instead.");
}

TEST(Config, YamlSyntaxErrorGivesFileLineColumn) {
  TempDir dir;
  std::string path = dir.write("c.yaml", "common:\n  seed: 1\n  log_format: [json\n");
  auto problems = problems_of(path);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].rfind(path + ":", 0), 0u) << problems[0];
  EXPECT_NE(problems[0].find("YAML syntax error"), std::string::npos) << problems[0];
  // file:LINE:COLUMN with the line of the broken flow sequence or after it.
  int line = 0, column = 0;
  ASSERT_EQ(std::sscanf(problems[0].c_str() + path.size(), ":%d:%d:", &line, &column), 2) << problems[0];
  EXPECT_GE(line, 3);
  EXPECT_GE(column, 1);
}

TEST(Config, MissingFileIsNamed) {
  auto problems = problems_of("/nonexistent/train.yaml");
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0], "config file `/nonexistent/train.yaml` does not exist.");
}

TEST(Config, NotAMappingIsRejected) {
  TempDir dir;
  auto problems = problems_of(dir.write("c.yaml", "- a\n- b\n"));
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("the config must be a mapping of sections"), std::string::npos);
  problems = problems_of(dir.write("d.yaml", "dataset: 5\n"));
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("section `dataset` must be a mapping of keys, but is \"5\" instead."), std::string::npos);
}

// Found by fuzz_config: a section name or key that is not a word (empty, a list, a mapping)
// threw yaml-cpp's bad conversion out of load_config.
TEST(Config, NamesThatAreNotWordsAreProblems) {
  TempDir dir;
  auto problems = problems_of(dir.write("c.yaml", "? [a, b]\n: x\n~: y\n"));
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_NE(problems[0].find("c.yaml:1:3: a section name must be a word (common, dataset, ...), but is a list instead."),
            std::string::npos)
      << problems[0];
  EXPECT_NE(problems[1].find("but is empty instead."), std::string::npos) << problems[1];
  problems = problems_of(dir.write("d.yaml", "dataset:\n  {max_tokens: 3}: 4\n"));
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("a key of section `dataset` must be a word, but is a mapping instead."), std::string::npos)
      << problems[0];
}

TEST(Config, EveryErrorIsReportedAtOnce) {
  TempDir dir;
  std::string path = dir.write("c.yaml", R"(
optimization:
  max_updates: 10
  lr: fast
dataset:
  max_tokens: -5
generation:
  beam: 0
bogus:
  a: 1
)");
  auto problems = problems_of(path, {{"common.seed", "x", "cli"}, {"nosection", "1", "cli2"}});
  ASSERT_EQ(problems.size(), 7u);
  EXPECT_NE(problems[0].find("`optimization.max_updates` is not a key; did you mean `optimization.max_update`?"),
            std::string::npos);
  EXPECT_NE(problems[1].find("`optimization.lr` must be a list of numbers, but has the element \"fast\"."),
            std::string::npos);
  EXPECT_NE(problems[2].find("`dataset.max_tokens` must be greater than or equal to 0, but is -5 instead."),
            std::string::npos);
  EXPECT_NE(problems[3].find("`generation.beam` must be greater than 0, but is 0 instead."), std::string::npos);
  EXPECT_NE(problems[4].find("`bogus` is not a config section"), std::string::npos);
  EXPECT_EQ(problems[5], "cli: `common.seed` must be an integer, but is \"x\" instead.");
  EXPECT_EQ(problems[6], "cli2: `nosection` is not a key; keys are written section.key, e.g. optimization.lr.");
}

TEST(Config, CrossKeyRulesAreChecked) {
  auto problems = problems_of("", {{"lr_scheduler._name", "inverse_sqrt", "x"},
                                   {"lr_scheduler.warmup_updates", "0", "x"},
                                   {"common.fp16", "true", "x"},
                                   {"common.bf16", "true", "x"}});
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_NE(problems[0].find("`common.bf16` must be false when `common.fp16` is true"), std::string::npos);
  EXPECT_NE(problems[1].find("`lr_scheduler.warmup_updates` must be greater than 0"), std::string::npos);
  // fp16_fallback is a way out of fp16 only; its precisions are named.
  problems = problems_of("", {{"common.fp16_fallback", "bf16", "x"}});
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("`common.fp16` must be true when `common.fp16_fallback` is set (to bf16)"),
            std::string::npos);
  problems = problems_of("", {{"common.fp16", "true", "x"}, {"common.fp16_fallback", "fp16", "x"}});
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("`common.fp16_fallback` must be one of"), std::string::npos) << problems[0];
  EXPECT_TRUE(problems_of("", {{"common.fp16", "true", "x"}, {"common.fp16_fallback", "fp32", "x"}}).empty());
}

TEST(Config, WarmupUpdatesDefaultsAreFairseqsPerScheduler) {
  // fairseq: inverse_sqrt warms up for 4000 updates unless told otherwise; the other schedulers not at all.
  Config cfg = load_config("", {{"lr_scheduler._name", "inverse_sqrt", "x"}});
  EXPECT_EQ(cfg.lr_scheduler.warmup_updates.value_or(-1), 4000);
  EXPECT_NE(dump_config(cfg).find("warmup_updates: 4000"), std::string::npos);
  for (const char* name : {"fixed", "polynomial_decay", "cosine", "reduce_lr_on_plateau"})
    EXPECT_EQ(load_config("", {{"lr_scheduler._name", name, "x"}}).lr_scheduler.warmup_updates.value_or(-1), 0) << name;
  // A value given stands, whichever scheduler; the order of keys does not matter.
  cfg = load_config("", {{"lr_scheduler.warmup_updates", "7", "x"}, {"lr_scheduler._name", "inverse_sqrt", "x"}});
  EXPECT_EQ(cfg.lr_scheduler.warmup_updates.value_or(-1), 7);
  EXPECT_EQ(load_config("", {{"lr_scheduler.warmup_updates", "7", "x"}}).lr_scheduler.warmup_updates.value_or(-1), 7);
  // A config built in code leaves it unset: the scheduler's options take fairseq's default too.
  EXPECT_EQ(default_warmup_updates("inverse_sqrt"), 4000);
  EXPECT_EQ(default_warmup_updates("cosine"), 0);
}

TEST(Config, InvalidYamlInAnAssignment) {
  auto problems = problems_of("", {{"optimization.lr", "[0.1", "x"}});
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("x: the value of `optimization.lr` is not valid YAML"), std::string::npos);
}

TEST(Config, DumpRoundTrips) {
  Config cfg = load_config("", {{"optimization.lr", "[0.0005, 0.0001]", "x"},
                                {"checkpoint.save_dir", "'out dir/with: colon'", "x"},
                                {"model.dropout", "0.3", "x"},
                                {"optimizer.adam_betas", "(0.9, 0.98)", "x"},
                                {"common.log_format", "json", "x"}});
  std::string dumped = dump_config(cfg);
  TempDir dir;
  Config again = load_config(dir.write("dump.yaml", dumped));
  EXPECT_EQ(dump_config(again), dumped);
  EXPECT_EQ(again.optimization.lr, (std::vector<double>{0.0005, 0.0001}));
  EXPECT_EQ(again.checkpoint.save_dir, "out dir/with: colon");
  EXPECT_EQ(again.model.dropout, 0.3);
  EXPECT_FALSE(again.model.attention_dropout.has_value());
  EXPECT_NE(dumped.find("optimization:\n"), std::string::npos);
}

TEST(Config, EveryKeyHasHelpAndEveryFlagIsUnique) {
  Config cfg;
  std::set<std::string> flags;
  for (const auto& section : describe(cfg)) {
    EXPECT_FALSE(section.help().empty()) << section.name();
    for (const auto& f : section.fields()) {
      EXPECT_FALSE(f.help.empty()) << section.name() << "." << f.name;
      EXPECT_TRUE(flags.insert(f.flag_name()).second) << "flag --" << f.flag_name() << " sets two keys";
      EXPECT_EQ(key_for_flag(f.flag_name()), section.name() + "." + f.name);
      for (std::string alias : f.aliases) {
        if (alias.front() == '_') continue;
        std::replace(alias.begin(), alias.end(), '_', '-');
        EXPECT_TRUE(flags.insert(alias).second) << "alias flag --" << alias << " sets two keys";
        EXPECT_EQ(key_for_flag(alias), section.name() + "." + f.name);
      }
    }
  }
  EXPECT_GT(flags.size(), 100u);
}

TEST(Config, NearestUsesEditDistance) {
  EXPECT_EQ(nearest("max_updates", {"max_update", "max_epoch"}), "max_update");
  EXPECT_EQ(nearest("lr", {"lr_scheduler", "seed"}), "");
}

TEST(Config, PresetPlaceholderForTaskDataIsAUserErrorThatSaysWhatToPutThere) {
  const std::string preset = testing::source_dir() + "/configs/multi30k_transformer_small.yaml";
  auto problems = problems_of(preset, {});
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("`task.data` must be a data-bin directory, but is the preset's placeholder <"),
            std::string::npos)
      << problems[0];
  EXPECT_NE(problems[0].find("data-bin/multi30k.en-de"), std::string::npos) << problems[0];
  EXPECT_NE(problems[0].find("task.data=DIR"), std::string::npos) << problems[0];
  EXPECT_EQ(load_config(preset, {{"task.data", "data-bin/multi30k.en-de", "x"}}).task.data, "data-bin/multi30k.en-de");
  // Angle brackets are a placeholder only around the whole value.
  EXPECT_TRUE(problems_of("", {{"task.data", "data-bin/<x>/y", "x"}}).empty());
  EXPECT_EQ(problems_of("", {{"task.data", "<DATA_BIN>", "x"}}).size(), 1u);
}

}  // namespace
}  // namespace fairseq_cpp::config

namespace fairseq_cpp::config {
namespace {

// Every preset shipped in configs/ loads without a problem.
TEST(Config, ShippedConfigsLoad) {
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator(testing::source_dir() + "/configs")) {
    if (entry.path().extension() != ".yaml") continue;
    // task.data as a user gives it where a preset holds a placeholder.
    EXPECT_NO_THROW(load_config(entry.path().string(), {{"task.data", "data-bin/x", "test"}})) << entry.path();
    ++n;
  }
  EXPECT_GE(n, 3);
  Config iwslt = load_config(testing::source_dir() + "/configs/transformer_iwslt_de_en.yaml");
  EXPECT_EQ(iwslt.model.arch, "transformer_iwslt_de_en");
  EXPECT_EQ(iwslt.optimizer.adam_betas, (std::vector<double>{0.9, 0.98}));
  EXPECT_EQ(iwslt.task.eval_bleu_remove_bpe, "@@ ");
}

}  // namespace
}  // namespace fairseq_cpp::config
