// Hostile machines (issue 23), on Multi30k (the reference fairseq's data-bin in ../shared/fixtures):
// SIGKILL inside a checkpoint save, twenty times; and the soak, a 2-worker run killed at random
// moments (a random rank or the launcher) and restarted with the same command until it ends with
// the parameters of a run never interrupted. Real processes, real files, real Gloo over TCP.
//
// The soak kills FSQ_SOAK_KILLS times (4 here; tools/soak.sh runs 20) and prints a table of its
// trials; FSQ_SOAK_SEED picks the moments and targets (default 23).
#include <gtest/gtest.h>
#include "tests/support/torch.h"

#include <poll.h>
#include <signal.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "tests/support/training_fixture.h"

namespace fairseq_cpp::testing {
namespace {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Whether `pid` runs (a zombie does not: nobody may reap an orphan inside a container).
bool alive(int pid) {
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z';
}

class Faults : public TrainingFixture {
 protected:
  // The fairseq-cpp-train command of the fixture's config (transformer_tiny, one intra-op thread
  // per worker) with dropout, moved to Multi30k en-de, then `more` overrides.
  std::vector<std::string> multi30k(const std::string& save_dir, int world, const std::string& extra_checkpoint,
                                    const std::vector<std::string>& more = {}) {
    std::vector<std::string> argv{program("fairseq-cpp-train"),
                                  config(save_dir, world, 1, 100000, extra_checkpoint, 0.1),
                                  "task.data=" + shared_dir() + "/fixtures/fairseq-v0.9/data-bin",
                                  "task.source_lang=en",
                                  "task.target_lang=de",
                                  "model.share_all_embeddings=false",
                                  "model.share_decoder_input_output_embed=true",
                                  "dataset.max_tokens=600",
                                  "dataset.disable_validation=true",
                                  "common.log_interval=10",
                                  fmt::format("distributed_training.timeout={}", kTimeout)};
    argv.insert(argv.end(), more.begin(), more.end());
    return argv;
  }

  // Kills the run and its workers with SIGKILL, and waits until all are gone (at most the run's
  // timeout); returns the seconds that took, or -1 when something still runs.
  static double kill_all(BackgroundProcess& run, const std::vector<int>& victims) {
    auto start = Clock::now();
    std::vector<int> all = children_of(run.pid());
    all.push_back(run.pid());
    for (int pid : victims) kill(pid, SIGKILL);
    if (run.wait(kTimeout) == -1) return -1;
    for (int pid : all)
      while (alive(pid) && seconds_since(start) < kTimeout) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    for (int pid : all)
      if (alive(pid)) return -1;
    return seconds_since(start);
  }

  static std::vector<std::string> unfinished_files(const std::string& dir) {
    std::vector<std::string> out;
    for (const auto& entry : fs::directory_iterator(dir))
      if (entry.path().filename().string().find(".tmp.") != std::string::npos)
        out.push_back(entry.path().filename().string());
    return out;
  }

  static constexpr int kTimeout = 30;  // distributed_training.timeout: no stop may take longer
};

// Waits for a file named `prefix`* to be created in the directory `watch` watches; false after `timeout` s.
bool wait_for_creation(int watch, const std::string& prefix, double timeout) {
  auto start = Clock::now();
  alignas(inotify_event) char buffer[4096];
  while (seconds_since(start) < timeout) {
    pollfd p{watch, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    ssize_t n = read(watch, buffer, sizeof(buffer));
    for (ssize_t at = 0; at < n;) {
      auto* event = reinterpret_cast<inotify_event*>(buffer + at);
      if (event->len > 0 && std::string(event->name).rfind(prefix, 0) == 0) return true;
      at += static_cast<ssize_t>(sizeof(inotify_event) + event->len);
    }
  }
  return false;
}

TEST_F(Faults, TwentyKillsInsideASaveAlwaysLeaveACompleteLastCheckpoint) {
  // A save every update (14 MB: model and Adam state). Each trial starts the same command, waits
  // until the save of checkpoint_last.pt has created its temporary file, waits 0-40 ms more and
  // kills the process; a trial counts when the unfinished file is still there (the save did not
  // reach its rename). After every kill checkpoint_last.pt loads (every CRC and the digest).
  std::string dir = work_.path() + "/killed_in_save";
  const std::string extra = "  save_interval_updates: 1\n  keep_interval_updates: 1";
  const std::vector<std::string> command = multi30k(dir, 1, extra);
  auto first = run(multi30k(dir, 1, extra, {"optimization.max_update=1"}));
  ASSERT_EQ(first.exit_code, 0) << first.err;
  int watch = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  ASSERT_GE(watch, 0);
  ASSERT_GE(inotify_add_watch(watch, dir.c_str(), IN_CREATE), 0);
  std::mt19937 rng(2311);
  int64_t saved = updates_in(dir + "/checkpoint_last.pt");
  int inside = 0, trials = 0;
  while (inside < 20 && trials < 60) {
    ++trials;
    BackgroundProcess job(command);
    ASSERT_TRUE(wait_for_creation(watch, ".checkpoint_last.pt.tmp.", 60)) << job.err();
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 40000));
    std::vector<int> victims = children_of(job.pid());
    victims.push_back(job.pid());
    ASSERT_GE(kill_all(job, victims), 0) << "still running after SIGKILL";
    if (!unfinished_files(dir).empty()) ++inside;
    int64_t now = 0;
    ASSERT_NO_THROW(now = updates_in(dir + "/checkpoint_last.pt")) << "trial " << trials;
    ASSERT_NO_THROW(parameters(dir)) << "trial " << trials;
    EXPECT_GE(now, saved) << "trial " << trials;
    saved = now;
  }
  close(watch);
  fmt::print("kills inside a save of checkpoint_last.pt: {} of {} trials; it loaded after every one\n", inside, trials);
  EXPECT_EQ(inside, 20) << "only " << inside << " of " << trials << " kills landed inside a save";
  // The same command removes what the last killed save left, resumes and ends.
  ASSERT_FALSE(unfinished_files(dir).empty());
  auto last = run(multi30k(dir, 1, extra, {fmt::format("optimization.max_update={}", saved + 2)}));
  EXPECT_EQ(last.exit_code, 0) << last.err;
  EXPECT_NE(last.err.find("removed 1 unfinished checkpoint file(s) of an interrupted save"), std::string::npos)
      << last.err;
  EXPECT_NE(last.err.find(fmt::format("@ {} updates)", saved)), std::string::npos) << last.err;
  EXPECT_TRUE(unfinished_files(dir).empty());
  EXPECT_EQ(updates_in(dir + "/checkpoint_last.pt"), saved + 2);
}

TEST_F(Faults, RandomKillsOfARankOrTheLauncherEndWithTheParametersOfAnUninterruptedRun) {
  const char* kills_env = std::getenv("FSQ_SOAK_KILLS");
  const char* seed_env = std::getenv("FSQ_SOAK_SEED");
  const int kills = kills_env ? std::atoi(kills_env) : 4;
  std::mt19937 rng(seed_env ? static_cast<uint32_t>(std::atol(seed_env)) : 23u);
  // A checkpoint every 3 updates; enough updates that every restart has work left.
  const int max_update = 30 + 12 * kills;
  const std::string extra = "  save_interval_updates: 3\n  keep_interval_updates: 1";
  std::string straight = work_.path() + "/straight", soaked = work_.path() + "/soaked";
  auto reference = run(multi30k(straight, 2, extra, {fmt::format("optimization.max_update={}", max_update)}));
  ASSERT_EQ(reference.exit_code, 0) << reference.err;

  const std::vector<std::string> command =
      multi30k(soaked, 2, extra, {fmt::format("optimization.max_update={}", max_update)});
  fmt::print("\nsoak: {} kills, {} updates, 2 workers, Multi30k, transformer_tiny with dropout\n", kills, max_update);
  fmt::print("{:>5}  {:<9} {:>9}  {:>16}  {:>9}  {}\n", "trial", "killed", "after (s)", "checkpoint after",
             "stop (s)", "outcome");
  int64_t saved = 0;
  for (int trial = 1; trial <= kills; ++trial) {
    BackgroundProcess job(command);
    const double delay = 0.3 + std::uniform_real_distribution<double>(0.0, 3.0)(rng);
    const int target = static_cast<int>(rng() % 3);  // 0: the launcher, 1: rank 0, 2: rank 1
    auto start = Clock::now();
    int exited = -1;
    while (seconds_since(start) < delay && (exited = job.wait(0)) == -1)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ASSERT_EQ(exited, -1) << "the run ended before its kill at " << delay << " s (too few updates):\n" << job.err();
    std::vector<int> workers = children_of(job.pid());
    std::string named = "launcher";
    int victim = job.pid();
    if (target > 0 && workers.size() == 2) {
      victim = workers[target - 1];
      named = fmt::format("rank {}", target - 1);
    }
    const double killed_after = seconds_since(start);
    const double stop = kill_all(job, {victim});
    std::string after = fs::exists(soaked + "/checkpoint_last.pt")
                             ? fmt::format("{} updates", updates_in(soaked + "/checkpoint_last.pt"))
                             : "none";
    fmt::print("{:>5}  {:<9} {:>9.2f}  {:>16}  {:>9.2f}  {}\n", trial, named, killed_after, after,
               stop, stop < 0 ? "HUNG" : "restarted");
    std::fflush(stdout);
    ASSERT_GE(stop, 0) << "trial " << trial << ": the run still ran " << kTimeout << " s after the kill of "
                       << named << ":\n"
                       << job.err();
    if (fs::exists(soaked + "/checkpoint_last.pt")) {
      int64_t now = updates_in(soaked + "/checkpoint_last.pt");
      EXPECT_GE(now, saved) << "trial " << trial;
      saved = now;
    }
  }
  auto last = run(command);
  fmt::print("{:>5}  {:<9} {:>9}  {:>16}  {:>9}  exit {}\n", "end", "-", "-", fmt::format("{} updates", saved), "-",
             last.exit_code);
  ASSERT_EQ(last.exit_code, 0) << last.err;
  EXPECT_EQ(updates_in(soaked + "/checkpoint_last.pt"), max_update);
  auto expected = parameters(straight), got = parameters(soaked);
  ASSERT_EQ(expected.size(), got.size());
  for (const auto& item : expected) EXPECT_TRUE(torch::equal(item.value(), got.at(item.key()))) << item.key();
}

}  // namespace
}  // namespace fairseq_cpp::testing
