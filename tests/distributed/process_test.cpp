// Real processes over Gloo on localhost: our spawn, torchrun's environment, an explicit init
// method, and the failures (oversize payloads, ranks that never come or die, kill -9).
#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <regex>

#include <fmt/format.h>

#include "fairseq_cpp/distributed/topology.h"
#include "tests/support/test_support.h"

namespace fairseq_cpp::testing {
namespace {

std::string probe() { return program("tests/fsq_dist_probe"); }

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

std::map<std::string, std::string> torchrun_env(int rank, int world, int port) {
  return {{"MASTER_ADDR", "127.0.0.1"},          {"MASTER_PORT", std::to_string(port)},
          {"WORLD_SIZE", std::to_string(world)}, {"RANK", std::to_string(rank)},
          {"LOCAL_RANK", std::to_string(rank)},  {"LOCAL_WORLD_SIZE", std::to_string(world)}};
}

TEST(Processes, SpawnedTwoAndFourRanksPassTheSuite) {
  for (int n : {2, 4}) {
    auto r = run({probe(), "collectives", "--world-size", std::to_string(n)});
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    for (int rank = 0; rank < n; ++rank)
      EXPECT_EQ(count(r.out, fmt::format("rank {}/{}: collectives ok", rank, n)), 1) << r.out << r.err;
    EXPECT_NE(r.err.find(fmt::format("[launcher] starting {} worker processes (re-executed): mode=local-spawn", n)),
              std::string::npos)
        << r.err;
  }
}

TEST(Processes, PrefixedOutputNamesTheRank) {
  auto r = run({probe(), "collectives", "--world-size", "2", "--prefix"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count(r.out, "[rank 0] rank 0/2: collectives ok\n"), 1) << r.out;
  EXPECT_EQ(count(r.out, "[rank 1] rank 1/2: collectives ok\n"), 1) << r.out;
}

TEST(Processes, TorchrunEnvironment) {
  int port = distributed::pick_free_port();
  for (const char* init : {"", "env://"}) {
    std::vector<std::string> args{probe(), "collectives"};
    if (*init) args.insert(args.end(), {"--init-method", init});
    BackgroundProcess r0(args, torchrun_env(0, 2, port));
    BackgroundProcess r1(args, torchrun_env(1, 2, port));
    EXPECT_EQ(r0.wait(60), 0) << r0.out() << r0.err();
    EXPECT_EQ(r1.wait(60), 0) << r1.out() << r1.err();
    EXPECT_NE(r0.err().find("mode=torchrun rank=0/2 local=0/2"), std::string::npos) << r0.err();
    EXPECT_NE(r1.out().find("rank 1/2: collectives ok"), std::string::npos);
    port = distributed::pick_free_port();
  }
}

TEST(Processes, ExplicitInitMethod) {
  std::string init = fmt::format("tcp://127.0.0.1:{}", distributed::pick_free_port());
  BackgroundProcess r0({probe(), "collectives", "--init-method", init, "--world-size", "2", "--rank", "0"});
  BackgroundProcess r1({probe(), "collectives", "--init-method", init, "--world-size", "2", "--rank", "1"});
  EXPECT_EQ(r0.wait(60), 0) << r0.err();
  EXPECT_EQ(r1.wait(60), 0) << r1.err();
  EXPECT_NE(r1.err().find("mode=explicit rank=1/2"), std::string::npos) << r1.err();
}

TEST(Processes, OversizePayloadRaisesOnEveryRank) {
  double start = now();
  auto r = run({probe(), "oversize", "--world-size", "2"});
  EXPECT_LT(now() - start, 30.0);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  std::string message = "oversize error: all_gather_list: rank 1 sends 100005 bytes, more than max_size 16384";
  EXPECT_EQ(count(r.out, "rank 0: " + message), 1) << r.out;
  EXPECT_EQ(count(r.out, "rank 1: " + message), 1) << r.out;
}

TEST(Processes, RankThatNeverArrivesTimesOut) {
  double start = now();
  BackgroundProcess r0({probe(), "collectives", "--timeout", "3"}, torchrun_env(0, 2, distributed::pick_free_port()));
  int code = r0.wait(30);
  EXPECT_LT(now() - start, 20.0);
  EXPECT_EQ(code, 1) << r0.err();
  EXPECT_NE(r0.err().find("failed on rank 0 of 2"), std::string::npos) << r0.err();
}

TEST(Processes, RankDyingMidCollectiveFailsTheOthers) {
  int port = distributed::pick_free_port();
  BackgroundProcess r0({probe(), "exit-mid", "--timeout", "10"}, torchrun_env(0, 2, port));
  BackgroundProcess r1({probe(), "exit-mid", "--timeout", "10"}, torchrun_env(1, 2, port));
  EXPECT_EQ(r1.wait(60), 3);
  EXPECT_EQ(r0.wait(30), 4) << r0.out() << r0.err();
  std::smatch m;
  std::string out = r0.out();
  ASSERT_TRUE(std::regex_search(
      out, m, std::regex(R"(rank 0: GangError after ([0-9.]+) s: all_reduce\(sum\) failed on rank 0 of 2)")))
      << out;
  EXPECT_LE(std::stod(m[1]), 12.0);
}

// The pids of "rank R pid P ready" lines.
std::map<int, int> ready_pids(const std::string& out) {
  std::map<int, int> pids;
  std::regex line(R"(rank (\d+) pid (\d+) ready)");
  for (std::sregex_iterator it(out.begin(), out.end(), line), end; it != end; ++it)
    pids[std::stoi((*it)[1])] = std::stoi((*it)[2]);
  return pids;
}

bool alive(int pid) { return kill(pid, 0) == 0; }

TEST(Processes, KillNineOfOneChildEndsTheGroup) {
  BackgroundProcess parent({probe(), "hang", "--world-size", "2", "--timeout", "60"});
  ASSERT_TRUE(parent.wait_for_output("ready", 60, 2)) << parent.out() << parent.err();
  auto pids = ready_pids(parent.out());
  ASSERT_EQ(pids.size(), 2u);
  double start = now();
  kill(pids[1], SIGKILL);
  int code = parent.wait(15);
  EXPECT_LT(now() - start, 15.0);
  EXPECT_NE(code, 0);
  EXPECT_NE(code, -1) << "the launcher was still running 15 s after kill -9";
  EXPECT_NE(parent.err().find(fmt::format("rank 1 (pid {}) was killed by signal 9 (SIGKILL)", pids[1])),
            std::string::npos)
      << parent.err();
  EXPECT_FALSE(alive(pids[0])) << "rank 0 outlived the group";
}

TEST(Processes, SigtermIsForwardedToEveryChild) {
  BackgroundProcess parent({probe(), "hang", "--world-size", "2", "--timeout", "60"});
  ASSERT_TRUE(parent.wait_for_output("ready", 60, 2)) << parent.err();
  auto pids = ready_pids(parent.out());
  parent.signal(SIGTERM);
  int code = parent.wait(15);
  EXPECT_NE(code, 0);
  EXPECT_NE(code, -1);
  EXPECT_NE(parent.err().find("received signal 15 (SIGTERM); forwarding it to the workers"), std::string::npos)
      << parent.err();
  for (auto [rank, pid] : pids) EXPECT_FALSE(alive(pid)) << "rank " << rank;
}

TEST(TrainCli, DryRunDistributedPrintsTheTopology) {
  auto r = run({program("fairseq-cpp-train"), "--dry-run-distributed"}, torchrun_env(1, 2, 29511));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "mode=torchrun rank=1/2 local=1/2 master=127.0.0.1:29511 device=cpu\n");
  r = run({program("fairseq-cpp-train"), "--dry-run-distributed", "distributed_training.distributed_world_size=3",
           "distributed_training.distributed_port=23456"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "mode=local-spawn rank=0/3 local=0/3 master=127.0.0.1:23456 device=cpu spawn=3 (ranks 0-2)\n");
  std::map<std::string, std::string> slurm{{"SLURM_JOB_ID", "777"},
                                           {"SLURM_JOB_NODELIST", "node[01-02]"},
                                           {"SLURM_NNODES", "2"},
                                           {"SLURM_NTASKS", "4"},
                                           {"SLURM_NTASKS_PER_NODE", "2(x2)"},
                                           {"SLURM_NODEID", "1"},
                                           {"SLURM_PROCID", "3"},
                                           {"SLURM_LOCALID", "1"}};
  r = run({program("fairseq-cpp-train"), "--dry-run-distributed"}, slurm);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "mode=slurm-per-task rank=3/4 local=1/2 master=node01:15777 device=cpu\n");
}

TEST(TrainCli, HalfSetLauncherIsAUserError) {
  auto r = run({program("fairseq-cpp-train"), "--dry-run-distributed"}, {{"RANK", "1"}, {"WORLD_SIZE", "2"}});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("fairseq-cpp-train: error: the torchrun-style launch is half set up: WORLD_SIZE, RANK are set"),
            std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace fairseq_cpp::testing
