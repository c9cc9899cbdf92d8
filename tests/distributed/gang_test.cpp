// The Gang on FakeGang and on real Gloo process groups with ranks as threads in this process, with
// tensors on each device of testing::test_devices() (Gloo carries CUDA tensors too); the NCCL gang
// is tests/gpu's.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "fairseq_cpp/distributed/distributed_utils.h"
#include "fairseq_cpp/distributed/process_group_gang.h"
#include "fairseq_cpp/distributed/topology.h"
#include "tests/distributed/collective_suite.h"
#include "tests/support/devices.h"
#include "tests/support/gloo_ranks.h"

namespace fairseq_cpp::distributed {
namespace {

std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

// A test that runs on each device (`.../cpu`, `.../cuda`: the CPU and cuda:0).
class OnDevice : public ::testing::TestWithParam<std::string> {
 protected:
  c10::Device device() const { return c10::Device(GetParam()); }
};

class FakeGangOnDevice : public OnDevice {};

TEST_P(FakeGangOnDevice, SizeOnePassesTheSuite) {
  FakeGang gang(1, 0, device());
  EXPECT_EQ(joined(testing::run_collective_suite(gang, true)), "");
}

TEST_P(FakeGangOnDevice, SimulatedSizePassesTheSuiteOnEveryRank) {
  for (int rank = 0; rank < 3; ++rank) {
    FakeGang gang(3, rank, device());
    EXPECT_EQ(joined(testing::run_collective_suite(gang, true)), "") << "rank " << rank;
  }
}

TEST_P(FakeGangOnDevice, SumMultipliesBySize) {
  FakeGang gang(4, 0, device());
  at::Tensor t = at::full({2}, 1.5, at::TensorOptions().device(device()));
  all_sum(gang, t);
  EXPECT_EQ(t.device(), device());
  EXPECT_TRUE(at::equal(t.to(at::kCPU), at::full({2}, 6.0)));
}

INSTANTIATE_TEST_SUITE_P(Devices, FakeGangOnDevice, ::testing::ValuesIn(testing::test_devices()), testing::device_name);

TEST(FakeGang, BadArguments) {
  EXPECT_THROW(FakeGang(2, 2), UserError);
  FakeGang gang(3);
  EXPECT_THROW(gang.create_gang({}), UserError);
  EXPECT_THROW(gang.create_gang({0, 3}), UserError);
  EXPECT_THROW(gang.create_gang({1, 0}), UserError);
  at::Tensor t = at::zeros({1});
  EXPECT_THROW(gang.broadcast(t, 5), UserError);
}

// Runs the suite with `n` ranks as threads over one TCPStore, tensors on `device`; returns every failure.
std::string run_threads(int n, c10::Device device) {
  int port = pick_free_port();
  std::vector<std::string> failures(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto gang = make_process_group_gang(testing::gloo_options(port, r, n, 60, device));
        EXPECT_EQ(gang->device(), device);
        EXPECT_EQ(gang->rank(), r);
        EXPECT_EQ(gang->size(), n);
        failures[r] = joined(testing::run_collective_suite(*gang, false));
      } catch (const std::exception& e) {
        failures[r] = fmt::format("rank {} threw: {}\n", r, e.what());
      }
    });
  }
  for (auto& t : threads) t.join();
  std::string all;
  for (const auto& f : failures) all += f;
  return all;
}

class GlooGang : public OnDevice {};

TEST_P(GlooGang, TwoRanksPassTheSuite) { EXPECT_EQ(run_threads(2, device()), ""); }
TEST_P(GlooGang, FourRanksPassTheSuite) { EXPECT_EQ(run_threads(4, device()), ""); }

// A collective that a rank never joins names what it was for and where training stood, from the
// scopes it was started in (innermost first), within the gang's timeout.
TEST_P(GlooGang, ATimedOutCollectiveNamesItsScopes) {
  const int port = distributed::pick_free_port();
  std::string error;
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      auto gang = distributed::make_process_group_gang(testing::gloo_options(port, r, 2, 2, device()));
      if (r == 1) {
        std::this_thread::sleep_for(std::chrono::seconds(4));  // never votes
        return;
      }
      distributed::CollectiveScope at("update 12 of epoch 3");
      try {
        distributed::CollectiveScope vote("the stop vote");
        distributed::any_flag(*gang, false);
      } catch (const distributed::GangError& e) {
        error = e.what();
      }
      EXPECT_EQ(distributed::CollectiveScope::describe(), " (update 12 of epoch 3)");
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_NE(error.find("(the stop vote; update 12 of epoch 3) failed on rank 0 of 2 (group `default`): "),
            std::string::npos)
      << error;
  // Rank 1 is alive, and its beacon says it never started the vote.
  EXPECT_NE(error.find("; rank 1 did not arrive (it answers; its last collective, 1 of this rank's 2, was "
                       "all_gather(peer beacons))"),
            std::string::npos)
      << error;
  EXPECT_EQ(distributed::CollectiveScope::describe(), "");
}

// Gangs of one process may start collectives on several threads at once (ranks as threads here;
// the bucket hooks on the autograd engine's thread). Each process group's first collective adds it
// to c10d's process-wide flight recorder, which LibTorch 2.11 does outside its lock
// (pytorch/pytorch#179313). Without the gangs' own lock around starting a collective, this test
// crashed in that map in 1 run of 4 on a 2-core machine (and the trainer's 2-rank overlap test in 1
// of 10): 2 threads start the first all_reduce of 100 sub-gangs each together, 8 times over. On
// LibTorch 1.13 (no flight recorder) it checks the sums only.
TEST(GlooGang, ManyGangsStartTheirFirstCollectivesAtOnce) {
  constexpr int kThreads = 2, kGangs = 100;
  for (int round = 0; round < 8; ++round) {
    std::atomic<int> ready{0};
    std::vector<std::string> failures(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        try {
          auto root = make_process_group_gang(testing::gloo_options(pick_free_port(), 0, 1, 60, at::kCPU));
          std::vector<std::shared_ptr<Gang>> gangs;  // process groups of their own over the root's store
          for (int g = 0; g < kGangs; ++g) gangs.push_back(root->create_gang({0}));
          ++ready;
          while (ready.load() < kThreads) std::this_thread::yield();
          std::vector<at::Tensor> sums;
          std::vector<std::unique_ptr<PendingCollective>> pending;
          for (auto& gang : gangs) {
            sums.push_back(at::full({3}, t + 1.0, at::kDouble));
            pending.push_back(gang->start_all_sum(sums.back(), "a first collective"));
          }
          for (auto& p : pending) p->wait();
          for (const auto& s : sums)
            if (!at::equal(s, at::full({3}, t + 1.0, at::kDouble))) failures[t] += "a wrong sum\n";
        } catch (const std::exception& e) {
          failures[t] = fmt::format("thread {} threw: {}\n", t, e.what());
        }
      });
    }
    for (auto& th : threads) th.join();
    for (const auto& f : failures) EXPECT_EQ(f, "");
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, GlooGang, ::testing::ValuesIn(testing::test_devices()), testing::device_name);

class DistributedInitOnDevice : public OnDevice {};

// A torchrun topology on the device joins a process group (on CUDA through Gloo: NCCL refuses two
// ranks on one device).
TEST_P(DistributedInitOnDevice, JoinsAProcessGroupForAMultiProcessTopology) {
  int port = pick_free_port();
  std::vector<int> sums(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      Topology t;
      t.mode = LaunchMode::torchrun;
      t.rank = r;
      t.world_size = 2;
      t.master_port = port;
      t.device = device().str();
      auto gang = distributed_init(t, 30, device().is_cuda() ? "gloo" : "");
      EXPECT_EQ(gang->device(), device());
      at::Tensor x = at::full({1}, r + 1.0, at::TensorOptions().device(device()));
      all_reduce(*gang, x);
      sums[r] = static_cast<int>(x.item<double>());
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(sums, (std::vector<int>{3, 3}));
}

INSTANTIATE_TEST_SUITE_P(Devices, DistributedInitOnDevice, ::testing::ValuesIn(testing::test_devices()),
                         testing::device_name);

TEST(ProcessGroupGang, BadOptionsAreUserErrors) {
  ProcessGroupOptions o;
  o.master_port = 1234;
  o.rank = 2;
  o.world_size = 2;
  EXPECT_THROW(make_process_group_gang(o), UserError);
  o.rank = 0;
  o.master_port = 70000;
  EXPECT_THROW(make_process_group_gang(o), UserError);
  o.master_port = 1234;
  o.backend = "nccl";
  try {
    make_process_group_gang(o);
    FAIL();
  } catch (const UserError& e) {
    EXPECT_STREQ(e.what(), "backend nccl cannot run on cpu: use gloo for the CPU (gloo or nccl for CUDA).");
  }
}

TEST(DistributedInit, SingleProcessGetsAFakeGangOfOne) {
  Topology t = infer_init_method(TopologyInputs{});
  auto gang = distributed_init(t, 10);
  EXPECT_EQ(gang->size(), 1);
  EXPECT_EQ(gang->rank(), 0);
  EXPECT_TRUE(is_master(*gang));
  t.spawn = 2;
  EXPECT_THROW(distributed_init(t, 10), OperationalError);
}

}  // namespace
}  // namespace fairseq_cpp::distributed
