#include "fairseq_cpp/config/command_line.h"
#include "fairseq_cpp/config/config.h"

#include <gtest/gtest.h>

#include "fairseq_cpp/core/errors.h"

namespace fairseq_cpp::config {
namespace {

ProgramSpec spec_with(std::string positional = "", std::vector<Subcommand> subcommands = {}) {
  ProgramSpec spec;
  spec.name = "prog";
  spec.usage = "prog [CONFIG.yaml]";
  spec.positional_key = std::move(positional);
  spec.switches = {{"dry-run-distributed", "print the topology"}};
  spec.subcommands = std::move(subcommands);
  return spec;
}

std::vector<std::string> problems_of(const ProgramSpec& spec, const std::vector<std::string>& args) {
  try {
    parse_command_line(spec, args);
  } catch (const ConfigError& e) {
    return e.problems();
  }
  return {};
}

TEST(CommandLine, ConfigFileOverridesAndFlags) {
  auto cl = parse_command_line(spec_with(), {"configs/demo.yaml", "optimization.lr=3e-4", "--max-tokens", "4096",
                                             "--no-save", "--update-freq=2", "--keep-last-epochs", "-1", "--debug"});
  EXPECT_EQ(cl.config_file, "configs/demo.yaml");
  EXPECT_TRUE(cl.debug);
  ASSERT_EQ(cl.assignments.size(), 5u);
  EXPECT_EQ(cl.assignments[0].key, "optimization.lr");
  EXPECT_EQ(cl.assignments[0].value, "3e-4");
  EXPECT_EQ(cl.assignments[1].key, "dataset.max_tokens");
  EXPECT_EQ(cl.assignments[1].value, "4096");
  EXPECT_EQ(cl.assignments[2].key, "checkpoint.no_save");
  EXPECT_EQ(cl.assignments[2].value, "true");
  EXPECT_EQ(cl.assignments[3].key, "optimization.update_freq");
  EXPECT_EQ(cl.assignments[3].value, "2");
  EXPECT_EQ(cl.assignments[4].key, "checkpoint.keep_last_epochs");
  EXPECT_EQ(cl.assignments[4].value, "-1");
  Config cfg = load_config("", cl.assignments);
  EXPECT_EQ(cfg.dataset.max_tokens, 4096);
  EXPECT_TRUE(cfg.checkpoint.no_save);
  EXPECT_EQ(cfg.checkpoint.keep_last_epochs, -1);
}

TEST(CommandLine, FairseqRegistryFlags) {
  auto cl = parse_command_line(
      spec_with(), {"--arch", "transformer_iwslt_de_en", "--optimizer", "adam", "--lr-scheduler", "inverse_sqrt",
                    "--warmup-updates", "400", "--criterion", "label_smoothed_cross_entropy", "--task", "translation"});
  Config cfg = load_config("", cl.assignments);
  EXPECT_EQ(cfg.model.arch, "transformer_iwslt_de_en");
  EXPECT_EQ(cfg.optimizer._name, "adam");
  EXPECT_EQ(cfg.criterion._name, "label_smoothed_cross_entropy");
  EXPECT_EQ(cfg.task._name, "translation");
  EXPECT_EQ(cl.assignments[2].key, "lr_scheduler._name");
}

TEST(CommandLine, ListFlagsTakeSeveralValuesAsArgparsesNargs) {
  // `--ref a.de b.de` and fairseq's `--lr 0.25 0.1`: values up to the next flag, config file or
  // assignment; one value stays a scalar (a list key takes a scalar too).
  auto cl = parse_command_line(spec_with("", {{"score", "", {}}}),
                               {"score", "--ref", "a.de", "b \"x\".de", "--lr", "0.25", "0.1", "c.yaml", "--sys", "-",
                                "--update-freq", "4", "dataset.max_tokens=9"});
  Config cfg = load_config("", cl.assignments);
  EXPECT_EQ(cfg.scoring.ref, (std::vector<std::string>{"a.de", "b \"x\".de"}));
  EXPECT_EQ(cfg.optimization.lr, (std::vector<double>{0.25, 0.1}));
  EXPECT_EQ(cl.config_file, "c.yaml");
  EXPECT_EQ(cfg.scoring.sys, std::vector<std::string>{"-"});
  EXPECT_EQ(cfg.optimization.update_freq, (std::vector<int64_t>{4}));
  EXPECT_EQ(cfg.dataset.max_tokens, 9);
}

TEST(CommandLine, AliasesAreFlagsToo) {
  auto cl = parse_command_line(spec_with(), {"--remove-bpe", "sentencepiece", "--max-sentences", "64"});
  ASSERT_EQ(cl.assignments.size(), 2u);
  EXPECT_EQ(cl.assignments[0].key, "common_eval.post_process");
  EXPECT_EQ(cl.assignments[1].key, "dataset.batch_size");
}

TEST(CommandLine, LocalRankAsTorchLaunchersPassIt) {
  // torch.distributed.launch passes `--local_rank=N` (PyTorch < 2.0) or `--local-rank=N`; fairseq's
  // argparse alias is `--local_rank`. Every spelling sets distributed_training.device_id.
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{{"--local_rank=3"},
                                                                                    {"--local_rank", "3"},
                                                                                    {"--local-rank=3"},
                                                                                    {"--local-rank", "3"},
                                                                                    {"--device-id", "3"}}) {
    auto cl = parse_command_line(spec_with(), args);
    ASSERT_EQ(cl.assignments.size(), 1u) << args[0];
    EXPECT_EQ(cl.assignments[0].key, "distributed_training.device_id") << args[0];
    EXPECT_EQ(load_config("", cl.assignments).distributed_training.device_id, 3) << args[0];
  }
  // Only the spelling that launchers use: other keys keep their dashed flags.
  EXPECT_FALSE(problems_of(spec_with(), {"--max_tokens", "9"}).empty());
  EXPECT_FALSE(problems_of(spec_with(), {"--device_id", "3"}).empty());
}

TEST(CommandLine, SwitchesPositionalAndSubcommand) {
  auto cl = parse_command_line(spec_with("task.data", {{"validate", "", {}}, {"score", "", {}}}),
                               {"validate", "data-bin/multi30k", "--dry-run-distributed", "--path", "ckpt.pt"});
  EXPECT_EQ(cl.subcommand, "validate");
  EXPECT_TRUE(cl.switches.count("dry-run-distributed"));
  ASSERT_EQ(cl.assignments.size(), 2u);
  EXPECT_EQ(cl.assignments[0].key, "task.data");
  EXPECT_EQ(cl.assignments[0].value, "data-bin/multi30k");
  EXPECT_EQ(cl.assignments[1].key, "common_eval.path");
}

TEST(CommandLine, PathWithEqualsIsNotAnAssignment) {
  auto cl = parse_command_line(spec_with("task.data"), {"data/a.b=c"});
  ASSERT_EQ(cl.assignments.size(), 1u);
  EXPECT_EQ(cl.assignments[0].key, "task.data");
}

TEST(CommandLine, HelpNeedsNothingElse) {
  auto cl = parse_command_line(spec_with("", {{"validate", "", {}}}), {"--help"});
  EXPECT_TRUE(cl.help);
  EXPECT_TRUE(parse_command_line(spec_with(), {"-h"}).help);
  EXPECT_TRUE(parse_command_line(spec_with(), {"--dump-config"}).dump_config);
}

TEST(CommandLine, EveryBadArgumentIsReported) {
  // The misspelt flag's value goes with it: `5` is not blamed as a stray argument of its own.
  auto problems = problems_of(spec_with(), {"a.yaml", "b.yml", "--max-token", "5", "stray", "--seed"});
  ASSERT_EQ(problems.size(), 4u);
  EXPECT_EQ(problems[0],
            "argument 2 `b.yml`: a second config file; `a.yaml` was given already (use overrides instead).");
  EXPECT_EQ(problems[1], "argument 3 `--max-token`: `--max-token` is not a flag; did you mean `--max-tokens`?");
  EXPECT_EQ(problems[2], "argument 5 `stray`: unexpected argument; expected prog [CONFIG.yaml].");
  EXPECT_EQ(problems[3], "argument 6 `--seed`: `--seed` needs a value (it sets `common.seed`).");
}

TEST(CommandLine, AMisspeltSwitchLeavesTheNextArgumentAlone) {
  // `--no-progres-bar` means the switch `--no-progress-bar`, which takes no value: `stray` is blamed.
  auto problems = problems_of(spec_with(), {"--no-progres-bar", "stray"});
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_EQ(problems[0],
            "argument 1 `--no-progres-bar`: `--no-progres-bar` is not a flag; did you mean "
            "`--no-progress-bar`?");
  EXPECT_EQ(problems[1], "argument 2 `stray`: unexpected argument; expected prog [CONFIG.yaml].");
  // A flag with no near name says nothing of the next argument's meaning either.
  auto far = problems_of(spec_with(), {"--zzzzzzzzzzzz", "5"});
  ASSERT_EQ(far.size(), 2u);
  EXPECT_EQ(far[1], "argument 2 `5`: unexpected argument; expected prog [CONFIG.yaml].");
}

TEST(CommandLine, SwitchTakesNoValueAndSubcommandIsRequired) {
  auto problems = problems_of(spec_with("", {{"validate", "", {}}, {"score", "", {}}}), {"--dry-run-distributed=1"});
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_EQ(problems[0], "argument 1 `--dry-run-distributed=1`: `--dry-run-distributed` takes no value.");
  EXPECT_EQ(problems[1], "prog needs a subcommand: one of validate, score.");
}

TEST(CommandLine, HelpTextListsEveryKeyOfItsSections) {
  ProgramSpec spec = spec_with();
  spec.keys = {"generation", "common_eval.post_process"};
  std::string help = help_text(spec);
  EXPECT_NE(help.find("usage: prog [CONFIG.yaml]"), std::string::npos);
  EXPECT_NE(help.find("--dry-run-distributed"), std::string::npos);
  EXPECT_NE(help.find("generation.beam (--beam)"), std::string::npos);
  EXPECT_EQ(help.find("optimization.lr"), std::string::npos);
  EXPECT_EQ(help.find("common_eval.path"), std::string::npos);  // one key of a section, not its others
  EXPECT_NE(help.find("common_eval.post_process (--post-process, --remove-bpe)"), std::string::npos) << help;
}

}  // namespace
}  // namespace fairseq_cpp::config
