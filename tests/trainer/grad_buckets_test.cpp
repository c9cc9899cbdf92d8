// Sharded gradient buckets (zero_sharding: os_grad) when every rank's backward runs on one thread,
// as on CUDA, where the autograd engine runs the backward of every thread of the process on its one
// thread for the device (ranks as threads, in the device-parameterized tests). The first H200 run
// hung there: a hook that waited for its peers' buckets waited for a backward queued behind itself.
// On the CPU, backward runs on the thread that calls it, so two ranks' backward calls one after the
// other on one thread make the same order of events with real Gloo ranks.
#include "fairseq_cpp/trainer/grad_buckets.h"

#include <gtest/gtest.h>
#include "tests/support/torch.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/distributed/process_group_gang.h"
#include "fairseq_cpp/distributed/topology.h"
#include "tests/support/gloo_ranks.h"

namespace fairseq_cpp::trainer {
namespace {

constexpr int kRanks = 2;
constexpr int64_t kParams = 6, kScalars = 1000;  // one bucket per parameter: more than kInFlight

// Two Gloo ranks of this process (joined on two threads, used on any); a rank that cannot join
// fails the test.
std::vector<std::shared_ptr<distributed::Gang>> two_gangs(double timeout) {
  const int port = distributed::pick_free_port();
  std::vector<std::shared_ptr<distributed::Gang>> gangs(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r)
    threads.emplace_back([&, r] {
      try {
        gangs[static_cast<size_t>(r)] =
            distributed::make_process_group_gang(testing::gloo_options(port, r, kRanks, timeout, at::kCPU));
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << r << ": " << e.what();
      }
    });
  for (auto& t : threads) t.join();
  return gangs;
}

struct Rank {
  std::vector<at::Tensor> params;
  std::vector<at::Tensor> weights;  // d loss / d params[i]
  at::Tensor slice_sum;             // float64, this rank's slice of the flat order
  std::unique_ptr<GradBuckets> buckets;
};

Rank make_rank(int r, bool wait_in_hooks) {
  Rank k;
  torch::manual_seed(static_cast<uint64_t>(11 + r));
  for (int64_t i = 0; i < kParams; ++i) {
    k.params.push_back(torch::randn({kScalars}).requires_grad_());
    k.weights.push_back(torch::randn({kScalars}));
  }
  const int64_t total = kParams * kScalars, per_rank = total / kRanks;
  k.slice_sum = torch::zeros({per_rank}, torch::kDouble);
  k.buckets = std::make_unique<GradBuckets>(k.params, kScalars, r * per_rank, (r + 1) * per_rank, wait_in_hooks);
  return k;
}

void backward(Rank& k) {
  at::Tensor loss = torch::zeros({});
  for (int64_t i = 0; i < kParams; ++i)
    loss = loss + (k.params[static_cast<size_t>(i)] * k.weights[static_cast<size_t>(i)]).sum();
  loss.backward();
}

TEST(GradBuckets, ShardedHooksThatNeverWaitLetEveryRanksBackwardRunOnOneThread) {
  auto gangs = two_gangs(20);
  ASSERT_TRUE(gangs[0] && gangs[1]);
  std::vector<Rank> ranks;
  for (int r = 0; r < kRanks; ++r) ranks.push_back(make_rank(r, /*wait_in_hooks=*/false));
  ASSERT_GT(ranks[0].buckets->size(), GradBuckets::kInFlight + 1);
  for (int r = 0; r < kRanks; ++r)
    ranks[static_cast<size_t>(r)].buckets->arm(ranks[static_cast<size_t>(r)].slice_sum, *gangs[static_cast<size_t>(r)],
                                               1);
  for (Rank& k : ranks) backward(k);  // rank 0's whole backward, then rank 1's, on this thread
  for (Rank& k : ranks) k.buckets->finish();
  // The sum of both ranks' gradients in the flat order (the parameters' order), in float64.
  std::vector<at::Tensor> flat;
  for (int64_t i = 0; i < kParams; ++i)
    flat.push_back(ranks[0].weights[static_cast<size_t>(i)].to(torch::kDouble) +
                   ranks[1].weights[static_cast<size_t>(i)].to(torch::kDouble));
  const at::Tensor expected = torch::cat(flat);
  for (int r = 0; r < kRanks; ++r) {
    const Rank& k = ranks[static_cast<size_t>(r)];
    EXPECT_EQ(k.buckets->started_by_backward(), k.buckets->size()) << "rank " << r;
    EXPECT_TRUE(torch::equal(k.slice_sum, expected.narrow(0, r * k.slice_sum.numel(), k.slice_sum.numel())))
        << "rank " << r;
    for (const at::Tensor& p : k.params) EXPECT_FALSE(p.grad().defined()) << "rank " << r << ": a gradient kept";
  }
}

// The hooks that wait (the CPU's: backward on each rank's own thread) cannot run that way: rank 0's
// backward waits for a bucket that rank 1 starts only after it, and fails at the gang's timeout.
TEST(GradBuckets, ShardedHooksThatWaitCannotRunEveryRanksBackwardOnOneThread) {
  auto gangs = two_gangs(3);
  ASSERT_TRUE(gangs[0] && gangs[1]);
  Rank k0 = make_rank(0, /*wait_in_hooks=*/true);
  k0.buckets->arm(k0.slice_sum, *gangs[0], 1);
  EXPECT_THROW(backward(k0), std::exception);
}

}  // namespace
}  // namespace fairseq_cpp::trainer
