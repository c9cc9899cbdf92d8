// fairseq-cpp-train under PyTorch 2.x's real torchrun (the wheel lane's, FSQ_TORCHRUN), on CPU over
// Gloo: a standalone job, an elastic restart after a worker is killed, and two agents that meet
// through the c10d rendezvous as two nodes would. The commands are those of
// examples/distributed/torchrun.sh and the README.
#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "fairseq_cpp/distributed/topology.h"
#include "tests/support/training_fixture.h"

namespace fairseq_cpp::testing {
namespace {
namespace fs = std::filesystem;

class Torchrun : public TrainingFixture {
 protected:
  // torchrun's arguments, then the program, its config and overrides.
  std::vector<std::string> torchrun(const std::vector<std::string>& placement, const std::string& cfg,
                                    const std::vector<std::string>& overrides = {}) {
    std::vector<std::string> argv{FSQ_TORCHRUN};
    argv.insert(argv.end(), placement.begin(), placement.end());
    argv.insert(argv.end(), {"--no-python", program("fairseq-cpp-train"), cfg});
    argv.insert(argv.end(), overrides.begin(), overrides.end());
    return argv;
  }
};

// The child of `parent` whose environment has `name`=`value`, or -1.
int child_with_env(int parent, const std::string& name, const std::string& value) {
  for (int pid : children_of(parent)) {
    std::ifstream in(fmt::format("/proc/{}/environ", pid), std::ios::binary);
    for (std::string entry; std::getline(in, entry, '\0');)
      if (entry == name + "=" + value) return pid;
  }
  return -1;
}

TEST_F(Torchrun, StandaloneTwoWorkersTrainAsOneWorkerWithUpdateFreqTwo) {
  std::string a = work_.path() + "/torchrun", b = work_.path() + "/single";
  auto ra = run(torchrun({"--standalone", "--nproc-per-node=2"}, config(a, 2, 1, 20)));
  ASSERT_EQ(ra.exit_code, 0) << ra.out << ra.err;
  EXPECT_NE(ra.err.find("mode=torchrun rank=0/2 local=0/2"), std::string::npos) << ra.err;
  EXPECT_NE(ra.err.find("rendezvous in the launcher's store"), std::string::npos) << ra.err;
  auto rb = train(config(b, 1, 2, 20));
  ASSERT_EQ(rb.exit_code, 0) << rb.err;
  EXPECT_EQ(updates_in(a + "/checkpoint_last.pt"), 20);
  EXPECT_LT(max_relative_difference(parameters(a), parameters(b)), 1e-5);
}

TEST_F(Torchrun, ElasticRestartAfterKillNineResumesAndEndsBitExact) {
  // 120 updates of 2 workers, a checkpoint every 10. The interrupted job loses rank 1 to SIGKILL
  // once its first checkpoint exists; torchrun (--max-restarts=1) starts the group again, which
  // resumes from checkpoint_last.pt. Dropout is on, so the resume must restore its seeding too.
  const std::string every10 = "  save_interval_updates: 10";
  std::string straight = work_.path() + "/straight", elastic = work_.path() + "/elastic";
  auto rs = run(torchrun({"--standalone", "--nproc-per-node=2"}, config(straight, 2, 1, 120, every10, 0.1)));
  ASSERT_EQ(rs.exit_code, 0) << rs.err;

  BackgroundProcess job(
      torchrun({"--standalone", "--nproc-per-node=2", "--max-restarts=1"}, config(elastic, 2, 1, 120, every10, 0.1)));
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!fs::exists(elastic + "/checkpoint_last.pt") && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(fs::exists(elastic + "/checkpoint_last.pt")) << job.err();
  int rank1 = child_with_env(job.pid(), "RANK", "1");
  ASSERT_GT(rank1, 0) << "no worker with RANK=1 under torchrun (pid " << job.pid() << ")";
  ASSERT_EQ(kill(rank1, SIGKILL), 0);
  int64_t saved_before_kill = updates_in(elastic + "/checkpoint_last.pt");
  ASSERT_LT(saved_before_kill, 120) << "the job ended before the kill";

  int code = job.wait(300);
  ASSERT_EQ(code, 0) << job.err();
  EXPECT_NE(job.err().find("start 2 of this job"), std::string::npos) << job.err();
  EXPECT_NE(job.err().find("loaded " + elastic + "/checkpoint_last.pt"), std::string::npos) << job.err();
  EXPECT_EQ(updates_in(elastic + "/checkpoint_last.pt"), 120);
  auto ps = parameters(straight), pe = parameters(elastic);
  ASSERT_EQ(ps.size(), pe.size());
  for (const auto& item : ps) EXPECT_TRUE(torch::equal(item.value(), pe.at(item.key()))) << item.key();
}

TEST_F(Torchrun, TwoAgentsMeetThroughTheC10dRendezvousAsTwoNodes) {
  // The multi-node form on one host: two agents, one worker each, --rdzv-backend=c10d.
  std::string a = work_.path() + "/nodes", b = work_.path() + "/single";
  std::string cfg = config(a, 2, 1, 20);
  std::string endpoint = fmt::format("127.0.0.1:{}", distributed::pick_free_port());
  std::vector<std::string> placement{"--nnodes=2", "--nproc-per-node=1", "--rdzv-backend=c10d",
                                     "--rdzv-endpoint=" + endpoint, "--rdzv-id=fsq-two-agents",
                                     "--rdzv-conf=join_timeout=60"};
  BackgroundProcess node0(torchrun(placement, cfg, {"--log-all-ranks"}));
  BackgroundProcess node1(torchrun(placement, cfg, {"--log-all-ranks"}));
  int c0 = node0.wait(240), c1 = node1.wait(240);
  ASSERT_EQ(c0, 0) << node0.err();
  ASSERT_EQ(c1, 0) << node1.err();
  std::string both = node0.err() + node1.err();
  EXPECT_NE(both.find("mode=torchrun rank=0/2 local=0/1"), std::string::npos) << both;
  EXPECT_NE(both.find("mode=torchrun rank=1/2 local=0/1"), std::string::npos) << both;
  auto rb = train(config(b, 1, 2, 20));
  ASSERT_EQ(rb.exit_code, 0) << rb.err;
  EXPECT_EQ(updates_in(a + "/checkpoint_last.pt"), 20);
  EXPECT_LT(max_relative_difference(parameters(a), parameters(b)), 1e-5);
}

}  // namespace
}  // namespace fairseq_cpp::testing
