// The programs as a user runs them: --help, --dump-config, bad configs and their exit codes.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "fairseq_cpp/config/config.h"
#include "fairseq_cpp/tasks/programs.h"
#include "tests/support/test_support.h"

namespace fairseq_cpp {
namespace {

using testing::program;
using testing::run;
using testing::source_dir;
using testing::TempDir;

const char* kPrograms[] = {"fairseq-cpp-train", "fairseq-cpp-preprocess", "fairseq-cpp-generate",
                           "fairseq-cpp-interactive", "fairseq-cpp-eval"};

TEST(Cli, EveryProgramAnswersHelp) {
  for (const char* name : kPrograms) {
    auto r = run({program(name), "--help"});
    EXPECT_EQ(r.exit_code, 0) << name << "\n" << r.err;
    EXPECT_EQ(r.out.rfind(std::string("usage: ") + name, 0), 0u) << name << "\n" << r.out;
    EXPECT_NE(r.out.find("--dump-config"), std::string::npos) << name;
  }
}

TEST(Cli, TrainHelpListsEveryKeyWithTypeDefaultAndDescription) {
  auto r = run({program("fairseq-cpp-train"), "--help"});
  ASSERT_EQ(r.exit_code, 0);
  config::Config defaults;
  int listed = 0;
  for (const auto& section : config::describe(defaults)) {
    for (const auto& f : section.fields()) {
      const bool shown = config::reads_key(tasks::train_spec(), "", section.name() + "." + f.name);
      std::string key = section.name() + "." + f.name + " (--" + f.flag_name();
      auto at = r.out.find("  " + key);
      if (!shown) {
        EXPECT_EQ(at, std::string::npos) << key << " is not a training key";
        continue;
      }
      ASSERT_NE(at, std::string::npos) << key << " missing from --help";
      std::string line = r.out.substr(at, r.out.find('\n', at) - at);
      EXPECT_NE(line.find(" " + f.type_name() + " "), std::string::npos) << line;
      EXPECT_NE(line.find(f.help), std::string::npos) << line;
      ++listed;
    }
  }
  EXPECT_GT(listed, 100);
  // Defaults as a fairseq user knows them.
  EXPECT_NE(r.out.find("optimization.lr (--lr)"), std::string::npos);
  EXPECT_NE(r.out.find("[0.25]"), std::string::npos);
  EXPECT_NE(r.out.find("checkpoint_last.pt"), std::string::npos);
}

// Every program (and each of eval's subcommands) lists in --help exactly the keys it reads, and
// refuses each other key on its command line with a line that names it and who reads it.
TEST(Cli, EveryProgramListsTheKeysItReadsAndRefusesTheOthers) {
  struct Case {
    const char* program;
    const config::ProgramSpec& spec;
    std::string subcommand;
  };
  const std::vector<Case> cases{{"fairseq-cpp-train", tasks::train_spec(), ""},
                                {"fairseq-cpp-preprocess", tasks::preprocess_spec(), ""},
                                {"fairseq-cpp-generate", tasks::generate_spec(), ""},
                                {"fairseq-cpp-interactive", tasks::interactive_spec(), ""},
                                {"fairseq-cpp-score", tasks::score_spec(), ""},
                                {"fairseq-cpp-eval", tasks::eval_spec(), "validate"},
                                {"fairseq-cpp-eval", tasks::eval_spec(), "score"},
                                {"fairseq-cpp-eval", tasks::eval_spec(), "average"}};
  config::Config defaults;
  const std::vector<config::Section> sections = config::describe(defaults);
  for (const Case& c : cases) {
    const std::string name = c.subcommand.empty() ? c.program : std::string(c.program) + " " + c.subcommand;
    auto help = run({program(c.program), "--help"});
    ASSERT_EQ(help.exit_code, 0) << name;
    std::vector<std::string> args;
    if (!c.subcommand.empty()) args.push_back(c.subcommand);
    size_t read = 0, unread = 0;
    for (const auto& section : sections) {
      for (const auto& f : section.fields()) {
        const std::string key = section.name() + "." + f.name;
        const bool listed = help.out.find("\n  " + key + " (--" + f.flag_name()) != std::string::npos;
        bool anywhere = config::reads_key(c.spec, c.subcommand, key);  // eval's --help lists every subcommand's
        for (const auto& sub : c.spec.subcommands) anywhere = anywhere || config::reads_key(c.spec, sub.name, key);
        EXPECT_EQ(listed, anywhere) << name << " --help and " << key;
        if (config::reads_key(c.spec, c.subcommand, key)) {
          ++read;
        } else {
          ++unread;
          args.push_back(key + "=1");
        }
      }
    }
    EXPECT_GT(read, 2u) << name;
    args.insert(args.end(), {"--dump-config"});
    std::vector<std::string> argv{program(c.program)};
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = run(argv);
    EXPECT_EQ(r.exit_code, 2) << name;
    size_t refused = 0;
    for (size_t at = 0; (at = r.err.find(name + " does not read `", at)) != std::string::npos; ++at) ++refused;
    EXPECT_EQ(refused, unread) << name << "\n" << r.err.substr(0, 2000);
  }
}

TEST(Cli, FairseqsOtherDdpBackendsAreRefusedWithTheReason) {
  const std::string preset = testing::source_dir() + "/configs/demo.yaml";
  auto fsdp = run({program("fairseq-cpp-train"), preset, "--ddp-backend", "fully_sharded", "--dump-config"});
  EXPECT_EQ(fsdp.exit_code, 2);
  EXPECT_NE(fsdp.err.find("but is fully_sharded instead: fully sharded data parallel (FSDP) is not implemented; "
                          "`distributed_training.zero_sharding: os` or `os_grad` shards the optimizer state"),
            std::string::npos)
      << fsdp.err;
  auto slowmo = run({program("fairseq-cpp-train"), preset, "--ddp-backend", "slowmo", "--dump-config"});
  EXPECT_EQ(slowmo.exit_code, 2);
  EXPECT_NE(slowmo.err.find("but is slowmo instead: SlowMo (fairscale's slow momentum"), std::string::npos)
      << slowmo.err;
}

TEST(Cli, FlagsOfOtherProgramsAreRefusedNamingWhoReadsThem) {
  auto score = run({program("fairseq-cpp-score"), "--fp16", "--max-update", "5", "--beam", "3"});
  EXPECT_EQ(score.exit_code, 2);
  EXPECT_NE(score.err.find("--fp16 true: fairseq-cpp-score does not read `common.fp16` (fairseq-cpp-train, "
                           "fairseq-cpp-generate, fairseq-cpp-interactive and fairseq-cpp-eval validate read it); "
                           "`fairseq-cpp-score --help` lists the keys it reads."),
            std::string::npos)
      << score.err;
  EXPECT_NE(score.err.find("--max-update 5: fairseq-cpp-score does not read `optimization.max_update` "
                           "(fairseq-cpp-train reads it)"),
            std::string::npos)
      << score.err;
  EXPECT_NE(score.err.find("--beam 3: fairseq-cpp-score does not read `generation.beam`"), std::string::npos)
      << score.err;
  auto generate = run({program("fairseq-cpp-generate"), "data", "--lr", "0.1", "--arch", "transformer", "--save-dir", "x"});
  EXPECT_EQ(generate.exit_code, 2);
  for (const char* key : {"optimization.lr", "model.arch", "checkpoint.save_dir"})
    EXPECT_NE(generate.err.find(std::string("fairseq-cpp-generate does not read `") + key + "`"), std::string::npos)
        << generate.err;
  // A config file may serve several programs: its keys for others are not refused.
  TempDir dir;
  const std::string both = dir.write("both.yaml", "optimization:\n  lr: [0.1]\ngeneration:\n  beam: 3\n");
  auto file = run({program("fairseq-cpp-score"), both, "--sys", "a", "--ref", "b", "--dump-config"});
  EXPECT_EQ(file.exit_code, 0) << file.err;
}

struct BadConfig {
  const char* name;
  const char* yaml;
  std::vector<std::string> expected;  // every line of stderr, after "fairseq-cpp-train: error: <file>"
};

void PrintTo(const BadConfig& c, std::ostream* os) { *os << c.name; }

class CliBadConfig : public ::testing::TestWithParam<BadConfig> {};

TEST_P(CliBadConfig, ExitsTwoWithEveryProblemOnItsOwnLine) {
  TempDir dir;
  std::string path = dir.write("train.yaml", GetParam().yaml);
  auto r = run({program("fairseq-cpp-train"), path});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  std::string expected;
  for (const auto& line : GetParam().expected) expected += "fairseq-cpp-train: error: " + path + line + "\n";
  EXPECT_EQ(r.err, expected);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, CliBadConfig,
    ::testing::Values(
        BadConfig{"UnknownKeyNearMiss",
                  "optimization:\n  max_updates: 5\n",
                  {":2:3: `optimization.max_updates` is not a key; did you mean `optimization.max_update`?"}},
        BadConfig{"WrongType",
                  "dataset:\n  max_tokens: 4k\n",
                  {":2:15: `dataset.max_tokens` must be an integer, but is \"4k\" instead."}},
        BadConfig{"OutOfRange",
                  "model:\n  dropout: 1.5\n",
                  {":2:12: `model.dropout` must be less than or equal to 1, but is 1.5 instead."}},
        BadConfig{"YamlSyntax",
                  "common:\n  seed: 1\n bad indentation: [\n",
                  {":3:2: YAML syntax error: end of map not found."}},
        BadConfig{
            "SeveralAtOnce",
            "optimization:\n  max_updates: 5\n  clip_norm: -1\ncommon:\n  log_format: xml\n",
            {":2:3: `optimization.max_updates` is not a key; did you mean `optimization.max_update`?",
             ":3:14: `optimization.clip_norm` must be greater than or equal to 0, but is -1 instead.",
             ":5:15: `common.log_format` must be one of \"\", tqdm, simple, json, none, but is \"xml\" instead."}}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(Cli, MissingConfigFile) {
  auto r = run({program("fairseq-cpp-train"), "/nonexistent/train.yaml"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "fairseq-cpp-train: error: config file `/nonexistent/train.yaml` does not exist.\n");
}

TEST(Cli, TrainingOnAPresetsPlaceholderDataIsAUserError) {
  const std::string preset = testing::source_dir() + "/configs/multi30k_transformer_small.yaml";
  auto r = run({program("fairseq-cpp-train"), preset, "--max-update", "1"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("fairseq-cpp-train: error: `task.data` must be a data-bin directory, but is the preset's "
                       "placeholder <a Multi30k en-de data-bin"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  // Replaced on the command line, by key or as the bare argument after the config file.
  for (const std::string& data : {std::string("task.data=/nonexistent/bin"), std::string("/nonexistent/bin")}) {
    r = run({program("fairseq-cpp-train"), preset, data, "--dump-config"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("  data: /nonexistent/bin\n"), std::string::npos) << r.out;
  }
}

TEST(Cli, BadOverridesAndFlags) {
  auto r = run({program("fairseq-cpp-train"), "optimization.lr=fast", "--max-tokenz", "10"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("fairseq-cpp-train: error: argument 2 `--max-tokenz`: `--max-tokenz` is not a flag; did you "
                       "mean `--max-tokens`?"),
            std::string::npos)
      << r.err;
  // A misspelt flag with its value: one line, the flag and its nearest name, not the value too.
  r = run({program("fairseq-cpp-generate"), "data-bin", "--path", "x.pt", "--beem", "5"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "fairseq-cpp-generate: error: argument 4 `--beem`: `--beem` is not a flag; did you mean `--beam`?\n");
  r = run({program("fairseq-cpp-train"), "optimization.lr=fast"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err,
            "fairseq-cpp-train: error: command line `optimization.lr=fast`: `optimization.lr` must be a list of "
            "numbers, but has the element \"fast\".\n");
  r = run({program("fairseq-cpp-eval"), "data-bin"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("needs a subcommand: one of validate, score, average."), std::string::npos);
}

TEST(Cli, MixedPrecisionThatCannotRunIsRefusedNotIgnored) {
  testing::TempDir dir;
  // bf16 and fp16 train (tests/trainer); generation runs in bf16 on a GPU, and on a CPU with
  // AVX512_BF16 (/proc/cpuinfo's flags, read here apart from the program's reading).
  auto r = run({program("fairseq-cpp-generate"), dir.path(), "--path", "x.pt", "--bf16", "--cpu"});
  EXPECT_EQ(r.exit_code, 2);
  const std::string flags = run({"/bin/sh", "-c", "grep -m1 '^flags' /proc/cpuinfo"}).out + " ";
  if (flags.find(" avx512_bf16 ") == std::string::npos) {
    EXPECT_NE(r.err.find("--bf16 on the CPU needs AVX512_BF16 (AMD Zen 4, Intel Cooper Lake or Sapphire Rapids and "
                         "later), and this CPU has none"),
              std::string::npos)
        << r.err;
  } else {
    EXPECT_NE(r.err.find("checkpoint x.pt does not exist (--path)"), std::string::npos) << r.err;  // --bf16 taken
  }
  r = run({program("fairseq-cpp-generate"), dir.path(), "--path", "x.pt", "--bf16", "--quantize", "int8", "--cpu"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--bf16 and --quantize int8 exclude each other"), std::string::npos) << r.err;
  r = run({program("fairseq-cpp-generate"), dir.path(), "--path", "x.pt", "--fp16"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--fp16 applies to training and fairseq-cpp-eval validate; generation runs in float32, or "
                       "bf16 with --bf16"),
            std::string::npos)
      << r.err;
  // fairseq's --memory-efficient-fp16 is a flag here too, refused in training with its reason.
  r = run({program("fairseq-cpp-train"), testing::source_dir() + "/configs/transformer_wmt_en_de.yaml",
           "task.data=" + dir.path(), "--memory-efficient-fp16"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err,
            "fairseq-cpp-train: error: `common.memory_efficient_fp16` is true, but float16 weights without a float32 "
            "copy are not implemented yet: common.fp16 keeps float32 weights; leave it at false.\n");
  r = run({program("fairseq-cpp-generate"), dir.path(), "--path", "x.pt", "--memory-efficient-bf16"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("fairseq-cpp-generate does not read `common.memory_efficient_bf16` (fairseq-cpp-train reads it)"),
            std::string::npos)
      << r.err;
}

TEST(Cli, DumpConfigPrintsTheResolvedConfigThatLoadsBack) {
  TempDir dir;
  std::string path = dir.write("train.yaml", "optimization:\n  lr: 0.0005\n  max_update: 952\n");
  auto r = run({program("fairseq-cpp-train"), path, "--max-tokens", "4096", "model.dropout=0.1", "--dump-config"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  config::Config cfg = config::load_config(dir.write("dumped.yaml", r.out));
  EXPECT_EQ(cfg.optimization.lr, std::vector<double>{0.0005});
  EXPECT_EQ(cfg.optimization.max_update, 952);
  EXPECT_EQ(cfg.dataset.max_tokens, 4096);
  EXPECT_EQ(cfg.model.dropout, 0.1);
}

TEST(Cli, DebugAddsAStackTrace) {
  auto r = run({program("fairseq-cpp-train"), "--debug", "common.cpu_threads=1"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("fairseq-cpp-train: error: `task.data` is not set: give the data-bin directory."),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("#0 "), std::string::npos) << r.err;
  r = run({program("fairseq-cpp-train"), "common.cpu_threads=1"});
  EXPECT_EQ(r.err.find("#0 "), std::string::npos) << r.err;
}

// LIBTORCH.md trap 1: the programs measure GEMM speed and name the fix when it is slow.
const char* kReferenceBlas = "/usr/lib/x86_64-linux-gnu/blas/libblas.so.3";

TEST(Cli, WarnsOnTheSlowReferenceBlas) {
  ASSERT_TRUE(std::filesystem::exists(kReferenceBlas)) << "tools/setup.sh installs libblas3 for this test";
  auto slow = run({program("fairseq-cpp-train"), "common.cpu_threads=1"}, {{"LD_PRELOAD", kReferenceBlas}});
  EXPECT_NE(slow.err.find("this is the slow reference BLAS"), std::string::npos) << slow.err;
  EXPECT_NE(slow.err.find("apt-get install libopenblas0-pthread"), std::string::npos) << slow.err;
  auto fast = run({program("fairseq-cpp-train"), "common.cpu_threads=1"});
  EXPECT_EQ(fast.err.find("slow reference BLAS"), std::string::npos) << fast.err;
  EXPECT_NE(fast.err.find("[runtime] 1 intra-op CPU threads, OMP_WAIT_POLICY=PASSIVE"), std::string::npos) << fast.err;
}

// Idle OpenMP and OpenBLAS threads must not spin against the busy ones: computing programs
// re-execute themselves with OMP_WAIT_POLICY=PASSIVE and OPENBLAS_THREAD_TIMEOUT=4 unless the user
// chose otherwise.
TEST(Cli, IdleThreadsWaitPassivelyUnlessTheUserSaysOtherwise) {
  auto r = run({program("fairseq-cpp-train"), "common.cpu_threads=1"},
               {{"OMP_WAIT_POLICY", ""}, {"OPENBLAS_THREAD_TIMEOUT", ""}});
  EXPECT_NE(r.err.find("OMP_WAIT_POLICY=PASSIVE, OPENBLAS_THREAD_TIMEOUT=4"), std::string::npos) << r.err;
  r = run({program("fairseq-cpp-train"), "common.cpu_threads=1"},
          {{"OMP_WAIT_POLICY", "ACTIVE"}, {"OPENBLAS_THREAD_TIMEOUT", "28"}});
  EXPECT_NE(r.err.find("OMP_WAIT_POLICY=ACTIVE, OPENBLAS_THREAD_TIMEOUT=28"), std::string::npos) << r.err;
}

// libgomp itself took the passive policy, not only the environment: with OMP_DISPLAY_ENV=VERBOSE
// it prints what it read when it loaded, and the passive policy means no spinning,
// GOMP_SPINCOUNT 0 (the default prints 300000, and OMP_WAIT_POLICY 'PASSIVE' as well, so that line
// proves nothing). And it loaded once: the launcher (cli/launch.cpp) sets the variables before the
// program and LibTorch start; a program that re-executed itself would print two blocks. (Setting
// the variables from a .preinit_array does not work: glibc's own initializer points `environ`
// back at the original block before the libraries' constructors read it.)
TEST(Cli, OpenMpRunsWithoutSpinningUnlessTheUserSaysOtherwise) {
  auto blocks = [](const std::string& text) {
    size_t count = 0;
    for (size_t at = text.find("OPENMP DISPLAY ENVIRONMENT BEGIN"); at != std::string::npos;
         at = text.find("OPENMP DISPLAY ENVIRONMENT BEGIN", at + 1))
      ++count;
    return count;
  };
  auto last_spin_count = [](const std::string& text) {
    const std::string key = "GOMP_SPINCOUNT = '";
    size_t at = text.rfind(key);
    if (at == std::string::npos) return std::string("none");
    at += key.size();
    return text.substr(at, text.find('\'', at) - at);
  };
  // Command lines that the launcher passes on (--help it answers itself) and the program then
  // refuses, after LibTorch and libgomp loaded: no data.
  const std::vector<std::vector<std::string>> calls{
      {"fairseq-cpp-train", "common.cpu_threads=1"},
      {"fairseq-cpp-generate", "/nonexistent", "--path", "/nonexistent.pt"},
      {"fairseq-cpp-interactive", "/nonexistent", "--path", "/nonexistent.pt"},
      {"fairseq-cpp-eval", "validate", "/nonexistent", "--path", "/nonexistent.pt"}};
  for (std::vector<std::string> call : calls) {
    const std::string name = call[0];
    call[0] = program(name);
    auto r = run(call, {{"OMP_WAIT_POLICY", ""}, {"OMP_DISPLAY_ENV", "VERBOSE"}});
    EXPECT_EQ(r.exit_code, 2) << name << ": " << r.err;
    EXPECT_EQ(last_spin_count(r.out + r.err), "0") << name << ": " << r.err;
    EXPECT_EQ(blocks(r.out + r.err), 1u) << name << " loaded libgomp other than once: " << r.err;
    r = run(call, {{"OMP_WAIT_POLICY", "ACTIVE"}, {"OMP_DISPLAY_ENV", "VERBOSE"}});
    EXPECT_NE(last_spin_count(r.out + r.err), "0") << name << ": " << r.err;
  }
}

// The launcher answers what needs no model itself, as the program would, without starting it:
// alone in a folder (no fairseq-cpp-PROGRAM.bin beside it), it answers --help and --dump-config,
// and refuses a bad command line or config with the program's own message and exit code; only
// work to do makes it start the program (here: cannot, exit 1).
TEST(Cli, LaunchersAnswerHelpDumpConfigAndRefusalsWithoutStartingTheProgram) {
  TempDir dir;
  const std::string preset = source_dir() + "/configs/multi30k_transformer_small.yaml";
  for (const char* name :
       {"fairseq-cpp-train", "fairseq-cpp-generate", "fairseq-cpp-interactive", "fairseq-cpp-eval"}) {
    const std::string alone = dir.path() + "/" + name;
    std::filesystem::copy_file(program(name), alone);
    std::filesystem::permissions(alone, std::filesystem::perms::owner_exec, std::filesystem::perm_options::add);
    auto help = run({alone, "--help"});
    EXPECT_EQ(help.exit_code, 0) << name << ": " << help.err;
    EXPECT_EQ(help.out, run({program(name), "--help"}).out) << name;
    EXPECT_EQ(help.out.rfind(std::string("usage: ") + name, 0), 0u) << name << ": " << help.out;

    const std::vector<std::string> bad{"--no-such-flag", "model.no_such_key=1"};
    auto refused = run({alone, bad[0], bad[1]});
    auto by_program = run({program(std::string(name) + ".bin"), bad[0], bad[1]});
    EXPECT_EQ(refused.exit_code, 2) << name << ": " << refused.err;
    EXPECT_EQ(refused.exit_code, by_program.exit_code) << name;
    EXPECT_EQ(refused.err, by_program.err) << name;
    EXPECT_TRUE(refused.err.find("no-such-flag") != std::string::npos ||
                refused.err.find("no_such_key") != std::string::npos)
        << name << ": " << refused.err;
  }
  const std::string alone = dir.path() + "/fairseq-cpp-train";
  auto dumped = run({alone, preset, "task.data=/data-bin", "--dump-config"});
  EXPECT_EQ(dumped.exit_code, 0) << dumped.err;
  EXPECT_EQ(dumped.out, run({program("fairseq-cpp-train"), preset, "task.data=/data-bin", "--dump-config"}).out);
  EXPECT_NE(dumped.out.find("/data-bin"), std::string::npos) << dumped.out;
  auto work = run({alone, preset, "task.data=/data-bin"});
  EXPECT_EQ(work.exit_code, 1) << work.err;
  EXPECT_NE(work.err.find("cannot start " + dir.path() + "/fairseq-cpp-train.bin"), std::string::npos) << work.err;
}

// The programs that run a model allocate through jemalloc with cli/allocator.cpp's settings
// (tools/setup.sh installs it; the build falls back to glibc only where it is missing).
TEST(Cli, ProgramsRunOnJemallocWithOneArenaAndNoDecay) {
  for (const char* name : {"fairseq-cpp-train", "fairseq-cpp-eval"}) {
    std::vector<std::string> argv{program(name)};
    if (std::string(name) == "fairseq-cpp-eval") argv = {program(name), "validate", "/nonexistent", "--path", "x"};
    else argv.push_back("common.cpu_threads=1");
    auto r = run(argv);
    EXPECT_NE(r.err.find("; jemalloc (narenas 1, dirty_decay_ms -1)"), std::string::npos) << name << ": " << r.err;
  }
}

}  // namespace
}  // namespace fairseq_cpp
