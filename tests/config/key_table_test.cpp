// No key is accepted and then ignored (issue 21): every declared key is read by code outside
// config/, or refused until it is (Field::not_yet), or declared alike for every value with a reason
// (Field::same_for_every_value). A key that is none of these is one a fairseq recipe could set to
// no effect.
#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>
#include <map>
#include <regex>
#include <set>

#include "fairseq_cpp/config/command_line.h"
#include "fairseq_cpp/config/config.h"
#include "fairseq_cpp/core/errors.h"
#include "tests/support/test_support.h"

namespace fairseq_cpp::config {
namespace {
namespace fs = std::filesystem;

// "lr_scheduler" -> "LrScheduler": the struct a section binds.
std::string struct_prefix(const std::string& section) {
  std::string out;
  bool upper = true;
  for (char c : section) {
    if (c == '_') {
      upper = true;
      continue;
    }
    out += upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
    upper = false;
  }
  return out;
}

// What the sources outside config/ read of the configuration: every `a.b` member access, and in
// each file the names that stand for a section (`const CheckpointConfig& ckpt_cfg`, `const auto& task
// = cfg.task`), resolved to "section.key". A name declared in a header (a class's member, `o_`)
// stands for its section in the .cpp of the same name too.
class Reads {
 public:
  explicit Reads(const std::vector<Section>& sections) {
    std::map<std::string, std::vector<std::string>> texts;  // path without extension -> its .h and .cpp
    for (const auto& dir : {"fairseq_cpp", "cli"}) {
      for (const auto& entry : fs::recursive_directory_iterator(fs::path(testing::source_dir()) / dir)) {
        std::string path = entry.path().string();
        if (!entry.is_regular_file() || path.find("/fairseq_cpp/config/") != std::string::npos) continue;
        if (entry.path().extension() != ".cpp" && entry.path().extension() != ".h") continue;
        texts[(entry.path().parent_path() / entry.path().stem()).string()].push_back(testing::read_file(path));
      }
    }
    for (const auto& [stem, files] : texts) {
      std::map<std::string, std::string> alias;  // a name in these files -> the section it stands for
      for (const auto& text : files) add_aliases(text, sections, alias);
      for (const auto& text : files) add_file(text, alias);
    }
  }
  bool has(const std::string& section, const std::string& key) const { return reads_.count(section + "." + key) > 0; }
  size_t files() const { return files_; }

 private:
  static void add_aliases(const std::string& text, const std::vector<Section>& sections,
                          std::map<std::string, std::string>& alias) {
    for (const auto& section : sections) {
      alias[section.name()] = section.name();
      std::regex typed(struct_prefix(section.name()) + R"(Config&\s+(\w+))");
      for (std::sregex_iterator it(text.begin(), text.end(), typed), end; it != end; ++it) alias[(*it)[1]] = section.name();
      std::regex bound(R"(auto&\s+(\w+)\s*=\s*[\w.]*\b)" + section.name() + R"(\s*;)");
      for (std::sregex_iterator it(text.begin(), text.end(), bound), end; it != end; ++it) alias[(*it)[1]] = section.name();
    }
  }

  void add_file(const std::string& text, const std::map<std::string, std::string>& alias) {
    ++files_;
    // Every `a.b` of a chain `cfg.dataset.max_tokens`: (cfg, dataset) and (dataset, max_tokens).
    auto word_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
    std::string previous;
    for (size_t i = 0; i < text.size();) {
      if (!word_char(text[i])) {
        if (text[i] != '.') previous.clear();
        ++i;
        continue;
      }
      size_t end = i;
      while (end < text.size() && word_char(text[end])) ++end;
      std::string word = text.substr(i, end - i);
      if (!previous.empty() && i > 0 && text[i - 1] == '.') {
        auto found = alias.find(previous);
        if (found != alias.end()) reads_.insert(found->second + "." + word);
      }
      previous = word;
      i = end;
    }
  }

  std::set<std::string> reads_;
  size_t files_ = 0;
};

// Whether setting `section.key` to some value other than its default is refused with a line that names it.
bool refused(const std::string& section, const Field& field) {
  for (const char* value : {"true", "false", "1", "2", "0.5", "0", "x"}) {
    try {
      load_config("", {{section + "." + field.name, value, "test"}});
    } catch (const ConfigError& e) {
      for (const auto& problem : e.problems())
        if (problem.rfind("`" + section + "." + field.name + "` is ", 0) == 0 &&
            problem.find(field.refusal) != std::string::npos)
          return true;
    }
  }
  return false;
}

TEST(KeyTable, EveryKeyIsReadRefusedOrDeclaredAlikeForEveryValue) {
  Config cfg;
  std::vector<Section> sections = describe(cfg);
  Reads reads(sections);
  ASSERT_GT(reads.files(), 50u) << "the sources were not found under " << testing::source_dir();
  std::vector<std::string> ignored;
  size_t keys = 0;
  for (const auto& section : sections) {
    for (const auto& field : section.fields()) {
      ++keys;
      std::string key = section.name() + "." + field.name;
      if (!field.refusal.empty()) {
        EXPECT_TRUE(refused(section.name(), field)) << key << " is declared not implemented but is not refused";
        EXPECT_FALSE(reads.has(section.name(), field.name))
            << key << " is read by the code: remove its not_yet() if it works";
        continue;
      }
      if (!field.no_effect.empty() || field.choices.size() == 1) continue;  // one choice: nothing to ignore
      if (!reads.has(section.name(), field.name)) ignored.push_back(key);
    }
  }
  EXPECT_GT(keys, 150u);
  std::string list;
  for (const auto& key : ignored) list += "\n  " + key;
  EXPECT_TRUE(ignored.empty()) << "keys that no code outside config/ reads (implement them, or refuse them with "
                                  "not_yet(reason)):"
                               << list;
}

// The walk would pass vacuously if it found reads everywhere: a key only config/ mentions is caught.
TEST(KeyTable, TheWalkSeesAKeyNothingReads) {
  Config cfg;
  std::vector<Section> sections = describe(cfg);
  Reads reads(sections);
  EXPECT_TRUE(reads.has("optimization", "max_update"));
  EXPECT_TRUE(reads.has("checkpoint", "save_dir"));  // through `const auto& ckpt_cfg = cfg.checkpoint;`
  EXPECT_FALSE(reads.has("checkpoint", "no_such_key"));
  EXPECT_FALSE(reads.has("common", "memory_efficient_fp16"));  // declared, refused, read nowhere yet
  EXPECT_TRUE(reads.has("common", "fp16_init_scale"));         // through `const auto& common = cfg.common;`
}

TEST(KeyTable, FlagsOutsideFairseqCppAreRefusedWithTheirReason) {
  ProgramSpec spec;
  spec.name = "fairseq-cpp-train";
  try {
    parse_command_line(spec, {"--user-dir", "my_plugins", "--max-tokens", "64"});
    FAIL() << "--user-dir was accepted";
  } catch (const ConfigError& e) {
    ASSERT_EQ(e.problems().size(), 1u);  // its value went with it: no second line about `my_plugins`
    EXPECT_NE(e.problems()[0].find("fairseq's `--user-dir` is outside fairseq-cpp: its plugins are Python modules"),
              std::string::npos)
        << e.problems()[0];
  }
}

// The flags of fairseq's IWSLT'14 recipe that fairseq-cpp once refused as unknown.
TEST(KeyTable, TheRecipesFlagsAreAccepted) {
  ProgramSpec spec;
  spec.name = "fairseq-cpp-train";
  auto cl = parse_command_line(spec, {"--ddp-backend=no_c10d", "--eval-bleu", "--eval-bleu-args",
                                      R"({"beam": 5, "max_len_a": 1.2, "max_len_b": 10})", "--eval-bleu-detok", "moses",
                                      "--eval-bleu-remove-bpe", "--eval-bleu-print-samples", "--tensorboard-logdir",
                                      "tb", "--best-checkpoint-metric", "bleu", "--maximize-best-checkpoint-metric"});
  Config cfg = load_config("", cl.assignments);
  EXPECT_EQ(cfg.distributed_training.ddp_backend, "no_c10d");
  EXPECT_TRUE(cfg.task.eval_bleu);
  EXPECT_EQ(cfg.task.eval_bleu_detok, "moses");
  EXPECT_EQ(cfg.task.eval_bleu_remove_bpe, "@@ ");  // alone: fairseq's const
  EXPECT_TRUE(cfg.task.eval_bleu_print_samples);
  EXPECT_EQ(cfg.common.tensorboard_logdir, "tb");
  EXPECT_EQ(cfg.checkpoint.best_checkpoint_metric, "bleu");
  GenerationConfig g = eval_bleu_generation(cfg.task.eval_bleu_args);
  EXPECT_EQ(g.beam, 5);
  EXPECT_DOUBLE_EQ(g.max_len_a, 1.2);
  EXPECT_EQ(g.max_len_b, 10);
  EXPECT_DOUBLE_EQ(g.lenpen, 1.0);  // the rest are generation's defaults, as fairseq's Namespace(**args)
  EXPECT_EQ(eval_bleu_detok_language(cfg.task.eval_bleu_detok_args), "en");  // fairseq's MosesTokenizerConfig default
  // A value after the flag is taken: `--remove-bpe sentencepiece`; alone before another flag, the const.
  cl = parse_command_line(spec, {"--remove-bpe", "--beam", "4", "--eval-bleu-remove-bpe", "sentencepiece"});
  cfg = load_config("", cl.assignments);
  EXPECT_EQ(cfg.common_eval.post_process, "subword_nmt");
  EXPECT_EQ(cfg.generation.beam, 4);
  EXPECT_EQ(cfg.task.eval_bleu_remove_bpe, "sentencepiece");
}

TEST(KeyTable, EvalBleuArgsAreCheckedWhenTheConfigLoads) {
  auto problems_of = [](const std::string& key, const std::string& json) {
    try {
      load_config("", {{key, "'" + json + "'", "test"}});
    } catch (const ConfigError& e) {
      return e.problems();
    }
    return std::vector<std::string>{};
  };
  auto p = problems_of("task.eval_bleu_args", R"({"beem": 5})");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0], "`task.eval_bleu_args` names `beem`, which is not a generation option; did you mean `beam`?");
  p = problems_of("task.eval_bleu_args", R"({"beam": 0})");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0], "`task.eval_bleu_args`: `beam` must be greater than 0, but is 0 instead.");
  p = problems_of("task.eval_bleu_args", R"([5])");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_NE(p[0].find("`task.eval_bleu_args` must be a JSON object of generation options"), std::string::npos);
  p = problems_of("task.eval_bleu_detok_args", R"({"target_lang": "de"})");
  EXPECT_TRUE(p.empty());
  Config cfg = load_config("", {{"task.eval_bleu_detok_args", R"('{"target_lang": "de"}')", "test"}});
  EXPECT_EQ(eval_bleu_detok_language(cfg.task.eval_bleu_detok_args), "de");
}

}  // namespace
}  // namespace fairseq_cpp::config
