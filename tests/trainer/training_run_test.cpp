// Whole runs of fairseq-cpp-train on a small generated corpus (real preprocess, real data-bin,
// real processes over Gloo): split invariance, bit-exact resume, and faults.
#include <gtest/gtest.h>
#include "tests/support/torch.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "fairseq_cpp/checkpoint/run_lock.h"
#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/trainer/training_state.h"
#include "tests/support/training_fixture.h"

namespace fairseq_cpp::testing {
namespace {
namespace fs = std::filesystem;

class TrainingRun : public TrainingFixture {};

TEST_F(TrainingRun, TwoWorkersEqualOneWorkerWithUpdateFreqTwo) {
  std::string a = work_.path() + "/a", b = work_.path() + "/b";
  auto ra = train(config(a, 2, 1, 20));
  ASSERT_EQ(ra.exit_code, 0) << ra.err;
  auto rb = train(config(b, 1, 2, 20));
  ASSERT_EQ(rb.exit_code, 0) << rb.err;
  EXPECT_EQ(updates_in(a + "/checkpoint_last.pt"), 20);
  EXPECT_EQ(updates_in(b + "/checkpoint_last.pt"), 20);
  EXPECT_LT(max_relative_difference(parameters(a), parameters(b)), 1e-5);
  // The same logged losses, update by update.
  auto la = inner_logs(ra.err), lb = inner_logs(rb.err);
  ASSERT_EQ(la.size(), 20u) << ra.err;
  for (auto& [n, j] : la) EXPECT_NEAR(j["loss"].get<double>(), lb[n]["loss"].get<double>(), 2e-3) << "update " << n;
}

TEST_F(TrainingRun, FourByOneEqualsTwoByTwoEqualsOneByFour) {
  std::string a = work_.path() + "/a", b = work_.path() + "/b", c = work_.path() + "/c";
  ASSERT_EQ(train(config(a, 4, 1, 10)).exit_code, 0);
  ASSERT_EQ(train(config(b, 2, 2, 10)).exit_code, 0);
  ASSERT_EQ(train(config(c, 1, 4, 10)).exit_code, 0);
  EXPECT_LT(max_relative_difference(parameters(a), parameters(b)), 1e-5);
  EXPECT_LT(max_relative_difference(parameters(b), parameters(c)), 1e-5);
}

TEST_F(TrainingRun, ForkedAndReExecutedWorkersTrainTheSameParametersToTheBit) {
  // On a machine without CUDA, the spawned workers are forks of the launching program, which runs
  // itself again in place (no second start of LibTorch); FSQ_SPAWN=exec re-executes them, as on
  // a GPU machine. With dropout, two intra-op threads a worker and each rank's output through the
  // launcher's pipes, the two runs end with the same bits.
  std::string forked = work_.path() + "/forked", executed = work_.path() + "/executed";
  const std::vector<std::string> settings{"common.cpu_threads=2", "common.log_all_ranks=true"};
  auto rf = train(config(forked, 2, 1, 8, "", 0.1), settings);
  ASSERT_EQ(rf.exit_code, 0) << rf.err;
  EXPECT_NE(rf.err.find("[launcher] starting 2 worker processes (forked): mode=local-spawn"), std::string::npos)
      << rf.err;
  EXPECT_NE(rf.err.find("[rank 1] "), std::string::npos) << rf.err;
  EXPECT_NE(rf.err.find("[runtime] 2 intra-op CPU threads"), std::string::npos) << rf.err;
  auto re = train(config(executed, 2, 1, 8, "", 0.1), settings, {{"FSQ_SPAWN", "exec"}});
  ASSERT_EQ(re.exit_code, 0) << re.err;
  EXPECT_NE(re.err.find("[launcher] starting 2 worker processes (re-executed): mode=local-spawn"), std::string::npos)
      << re.err;
  auto pf = parameters(forked), pe = parameters(executed);
  ASSERT_EQ(pf.size(), pe.size());
  for (const auto& item : pf) EXPECT_TRUE(torch::equal(item.value(), pe.at(item.key()))) << item.key();
  EXPECT_EQ(inner_logs(rf.err).size(), 8u);
}

TEST_F(TrainingRun, ResumeIsBitExact) {
  // With dropout, mid-epoch (14 batches an epoch): 40 straight vs 20, stop, resume, 20 more.
  std::string straight = work_.path() + "/straight", resumed = work_.path() + "/resumed";
  auto rs = train(config(straight, 1, 1, 40, "", 0.1));
  ASSERT_EQ(rs.exit_code, 0) << rs.err;
  auto r1 = train(config(resumed, 1, 1, 20, "", 0.1));
  ASSERT_EQ(r1.exit_code, 0) << r1.err;
  auto r2 = train(config(resumed, 1, 1, 40, "", 0.1));
  ASSERT_EQ(r2.exit_code, 0) << r2.err;
  EXPECT_NE(r2.err.find("loaded " + resumed + "/checkpoint_last.pt (epoch 2 @ 20 updates)"), std::string::npos)
      << r2.err;
  auto ps = parameters(straight), pr = parameters(resumed);
  for (const auto& item : ps) EXPECT_TRUE(torch::equal(item.value(), pr.at(item.key()))) << item.key();
  auto ls = inner_logs(rs.err), lr = inner_logs(r2.err);
  ASSERT_EQ(lr.size(), 20u);
  for (auto& [n, j] : lr) {
    EXPECT_EQ(j["loss"], ls[n]["loss"]) << "update " << n;
    EXPECT_EQ(j["gnorm"], ls[n]["gnorm"]) << "update " << n;
  }
}

TEST_F(TrainingRun, CheckpointedActivationsTrainTheSameParametersToTheBit) {
  // Two Gloo workers with dropout, in float32 and bf16: model.checkpoint_activations changes the
  // memory a step holds, not one bit of the run.
  for (const std::string precision : {"false", "true"}) {
    std::string plain = work_.path() + "/plain-" + precision, recomputed = work_.path() + "/recomputed-" + precision;
    auto rp = train(config(plain, 2, 1, 12, "", 0.1), {"common.bf16=" + precision});
    ASSERT_EQ(rp.exit_code, 0) << rp.err;
    auto rr = train(config(recomputed, 2, 1, 12, "", 0.1),
                    {"common.bf16=" + precision, "model.checkpoint_activations=true"});
    ASSERT_EQ(rr.exit_code, 0) << rr.err;
    auto pp = parameters(plain), pr = parameters(recomputed);
    for (const auto& item : pp) EXPECT_TRUE(torch::equal(item.value(), pr.at(item.key()))) << item.key();
    auto lp = inner_logs(rp.err), lr = inner_logs(rr.err);
    ASSERT_EQ(lr.size(), 12u) << rr.err;
    for (auto& [n, j] : lr) EXPECT_EQ(j["loss"], lp[n]["loss"]) << "bf16=" << precision << ", update " << n;
  }
}

// The optimizer's state of a checkpoint: each list of tensors by its key.
std::map<std::string, std::vector<at::Tensor>> optimizer_state(const std::string& save_dir) {
  std::map<std::string, std::vector<at::Tensor>> out;
  auto ckpt = checkpoint::load_file(save_dir + "/checkpoint_last.pt");
  for (const auto& entry : ckpt.at("optimizer").toGenericDict()) {
    if (!entry.value().isList()) continue;
    for (const c10::IValue& item : entry.value().toListRef())
      if (item.isTensor()) out[entry.key().toStringRef()].push_back(item.toTensor());
  }
  return out;
}

TEST_F(TrainingRun, ShardedStateTrainsTheUnshardedRunToTheBit) {
  // zero_sharding os with 2 and 3 Gloo workers, dropout and active clipping, in float32 and bf16:
  // each rank updates its slice with Adam's unsharded rule, so the weights, the logged losses and
  // norms and the checkpoint's (gathered) Adam state are the unsharded run's, bit for bit. The same
  // for os_grad (2 workers in float32, 3 in bf16): the gradients' buckets are the unsharded run's
  // and the norm is the slices' float64 sums of squares.
  for (int world : {2, 3}) {
    for (const std::string bf16 : {"false", "true"}) {
      const std::string tag = fmt::format("{}-{}", world, bf16);
      std::string plain = work_.path() + "/plain-" + tag;
      auto rp = train(config(plain, world, 1, 12, "", 0.1), {"common.bf16=" + bf16});
      ASSERT_EQ(rp.exit_code, 0) << rp.err;
      std::vector<std::string> modes{"os"};
      if ((world == 2) == (bf16 == "false")) modes.push_back("os_grad");
      for (const std::string& mode : modes) {
        SCOPED_TRACE(mode + " " + tag);
        std::string sharded = work_.path() + "/" + mode + "-" + tag;
        auto rs = train(config(sharded, world, 1, 12, "", 0.1),
                        {"common.bf16=" + bf16, "distributed_training.zero_sharding=" + mode});
        ASSERT_EQ(rs.exit_code, 0) << rs.err;
        const std::string kept = mode == "os" ? "adam's state of" : "adam's state and the gradient of";
        EXPECT_NE(rs.err.find(fmt::format("zero_sharding {}: each of {} workers keeps {}", mode, world, kept)),
                  std::string::npos)
            << rs.err;
        auto pp = parameters(plain), ps = parameters(sharded);
        for (const auto& item : pp) EXPECT_TRUE(torch::equal(item.value(), ps.at(item.key()))) << item.key();
        auto sp = optimizer_state(plain), ss = optimizer_state(sharded);
        ASSERT_EQ(sp.size(), 2u) << "exp_avg and exp_avg_sq";
        for (const auto& [key, tensors] : sp) {
          ASSERT_EQ(tensors.size(), ss.at(key).size()) << key;
          for (size_t i = 0; i < tensors.size(); ++i)
            EXPECT_TRUE(torch::equal(tensors[i], ss.at(key)[i])) << key << "[" << i << "]";
        }
        auto lp = inner_logs(rp.err), ls = inner_logs(rs.err);
        ASSERT_EQ(ls.size(), 12u) << rs.err;
        bool clipped = false;
        for (auto& [n, j] : ls) {
          EXPECT_EQ(j["loss"], lp[n]["loss"]) << "update " << n;
          EXPECT_EQ(j["gnorm"], lp[n]["gnorm"]) << "update " << n;
          clipped = clipped || j["gnorm"].get<double>() > 1.0;
        }
        EXPECT_TRUE(clipped) << "clip_norm 1.0 should have clipped some update";
      }
    }
  }
}

TEST_F(TrainingRun, ShardedCheckpointsResumeOnAnotherWorldSizeShardedOrNot) {
  // One worker x update_freq 2 straight, against: 10 updates sharded (os) over 2 workers, resumed by
  // one unsharded worker; and 10 updates of one worker, resumed sharded (os_grad) over 2 workers. The
  // checkpoint holds the whole optimizer state and the whole EMA either way (the EMA is sharded with
  // the optimizer's state).
  const std::vector<std::string> ema{"ema.store_ema=true", "ema.ema_decay=0.9"};
  const auto with = [&ema](std::vector<std::string> more) {
    more.insert(more.end(), ema.begin(), ema.end());
    return more;
  };
  std::string straight = work_.path() + "/straight", a = work_.path() + "/a", b = work_.path() + "/b";
  ASSERT_EQ(train(config(straight, 1, 2, 20), ema).exit_code, 0);
  auto a1 = train(config(a, 2, 1, 10), with({"distributed_training.zero_sharding=os"}));
  ASSERT_EQ(a1.exit_code, 0) << a1.err;
  EXPECT_NE(a1.err.find("keeps adam's state and the EMA of"), std::string::npos) << a1.err;
  auto a2 = train(config(a, 1, 2, 20), ema);
  ASSERT_EQ(a2.exit_code, 0) << a2.err;
  EXPECT_LT(max_relative_difference(parameters(straight), parameters(a)), 1e-5);
  EXPECT_LT(max_relative_difference(ema_weights(straight), ema_weights(a)), 1e-5);
  auto b1 = train(config(b, 1, 2, 10), ema);
  ASSERT_EQ(b1.exit_code, 0) << b1.err;
  auto b2 = train(config(b, 2, 1, 20), with({"distributed_training.zero_sharding=os_grad"}));
  ASSERT_EQ(b2.exit_code, 0) << b2.err;
  EXPECT_NE(b2.err.find("loaded " + b + "/checkpoint_last.pt"), std::string::npos) << b2.err;
  EXPECT_LT(max_relative_difference(parameters(straight), parameters(b)), 1e-5);
  EXPECT_LT(max_relative_difference(ema_weights(straight), ema_weights(b)), 1e-5);
}

TEST_F(TrainingRun, ShardingRefusesAnOptimizerWithoutIt) {
  auto r = train(config(work_.path() + "/sgd", 2, 1, 2),
                 {"distributed_training.zero_sharding=os", "optimizer._name=sgd", "lr_scheduler._name=fixed"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("`distributed_training.zero_sharding: os` shards adam's state"), std::string::npos) << r.err;
}

TEST_F(TrainingRun, TwoWorkersCheckpointResumesWithOneWorkerAtTheSameBatch) {
  std::string straight = work_.path() + "/straight", resumed = work_.path() + "/resumed";
  ASSERT_EQ(train(config(straight, 1, 2, 20)).exit_code, 0);
  auto r1 = train(config(resumed, 2, 1, 10));
  ASSERT_EQ(r1.exit_code, 0) << r1.err;
  auto r2 = train(config(resumed, 1, 2, 20));
  ASSERT_EQ(r2.exit_code, 0) << r2.err;
  EXPECT_LT(max_relative_difference(parameters(straight), parameters(resumed)), 1e-5);
}

TEST_F(TrainingRun, KeepGlobalBatchRaisesUpdateFreqForFewerWorkersAndSaysSo) {
  // A checkpoint of 2 workers x update_freq 1, resumed by 1 worker whose config still says update_freq
  // 1: with keep_global_batch the update frequency becomes 2 (one line says so) and the run ends as the
  // 1 x 2 run does; without it, a warning names the smaller batch.
  std::string straight = work_.path() + "/straight", kept = work_.path() + "/kept", shrunk = work_.path() + "/shrunk";
  ASSERT_EQ(train(config(straight, 1, 2, 20)).exit_code, 0);
  for (const std::string& dir : {kept, shrunk}) ASSERT_EQ(train(config(dir, 2, 1, 10)).exit_code, 0);
  auto r = train(config(kept, 1, 1, 20), {"distributed_training.keep_global_batch=true"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("keep_global_batch: " + kept + "/checkpoint_last.pt was written by a run of 2 workers; with 1 "
                       "workers, update_freq 1 becomes 2 (the same 2 batches per update)"),
            std::string::npos)
      << r.err;
  EXPECT_LT(max_relative_difference(parameters(straight), parameters(kept)), 1e-5);
  // The checkpoint keeps the run's first world size: back on 2 workers, update_freq is 1 again.
  auto back = train(config(kept, 2, 1, 24), {"distributed_training.keep_global_batch=true"});
  ASSERT_EQ(back.exit_code, 0) << back.err;
  EXPECT_EQ(back.err.find("keep_global_batch:"), std::string::npos) << back.err;
  EXPECT_EQ(back.err.find("batches per update"), std::string::npos) << back.err;
  ASSERT_EQ(train(config(straight, 1, 2, 24)).exit_code, 0);
  EXPECT_LT(max_relative_difference(parameters(straight), parameters(kept)), 1e-5);

  auto w = train(config(shrunk, 1, 1, 12));
  ASSERT_EQ(w.exit_code, 0) << w.err;
  EXPECT_NE(w.err.find(shrunk + "/checkpoint_last.pt was written with 2 batches per update; this run takes 1 (1 "
                       "workers x update_freq 1): set distributed_training.keep_global_batch=true to keep the run's "
                       "global batch"),
            std::string::npos)
      << w.err;
}

TEST(KeepGlobalBatch, ScalesEachEpochsUpdateFreqOrSaysWhyItCannot) {
  EXPECT_EQ(trainer::keep_global_batch({1}, 2, 1), (std::vector<int64_t>{2}));
  EXPECT_EQ(trainer::keep_global_batch({1, 2, 4}, 4, 2), (std::vector<int64_t>{2, 4, 8}));
  EXPECT_EQ(trainer::keep_global_batch({4, 2}, 1, 2), (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(trainer::keep_global_batch({3}, 2, 2), (std::vector<int64_t>{3}));
  try {
    trainer::keep_global_batch({2, 1}, 2, 4);
    FAIL() << "2 workers x update_freq 1 cannot be split over 4";
  } catch (const UserError& e) {
    EXPECT_STREQ(e.what(),
                 "`distributed_training.keep_global_batch`: the run's global batch is 2 workers x update_freq 1 = 2 "
                 "batches per update, which 4 workers cannot share evenly; run on a number of workers that divides 2, "
                 "or turn keep_global_batch off and set `optimization.update_freq`.");
  }
}

TEST_F(TrainingRun, CheckpointNamesAndRetentionFollowFairseq) {
  // Update checkpoints every 5 updates except at an epoch's end (that one is checkpoint1.pt);
  // keep_interval_updates=2 keeps the newest two; max_update 20 ends in epoch 2.
  std::string dir = work_.path() + "/kept";
  auto r = train(config(dir, 1, 1, 20, "  save_interval_updates: 5\n  keep_interval_updates: 2"),
                 {"checkpoint.no_epoch_checkpoints=false"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  int64_t epoch_updates = updates_in(dir + "/checkpoint1.pt");
  ASSERT_GT(epoch_updates, 5);
  ASSERT_LT(epoch_updates, 20);
  std::vector<std::string> update_checkpoints;
  for (int64_t u = 5; u <= 20; u += 5)
    if (u != epoch_updates)
      update_checkpoints.push_back(fmt::format("checkpoint_{}_{}.pt", u < epoch_updates ? 1 : 2, u));
  std::set<std::string> expected{"checkpoint1.pt", "checkpoint_best.pt", "checkpoint_last.pt"};
  expected.insert(update_checkpoints.end() - 2, update_checkpoints.end());
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.insert(entry.path().filename().string());
  EXPECT_EQ(names, expected);
  EXPECT_EQ(updates_in(dir + "/checkpoint_last.pt"), 20);
}

TEST_F(TrainingRun, KillNineStopsTheGroupAndTheLastCheckpointResumes) {
  std::string dir = work_.path() + "/killed";
  std::string cfg = config(dir, 2, 1, 100000, "  save_interval_updates: 5");
  BackgroundProcess parent({program("fairseq-cpp-train"), cfg});
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!fs::exists(dir + "/checkpoint_last.pt") && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_TRUE(fs::exists(dir + "/checkpoint_last.pt")) << parent.err();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  auto pids = children_of(parent.pid());
  ASSERT_EQ(pids.size(), 2u);
  auto killed_at = std::chrono::steady_clock::now();
  kill(pids[1], SIGKILL);
  int code = parent.wait(15);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count(), 15.0);
  EXPECT_NE(code, -1) << "still running 15 s after kill -9";
  EXPECT_NE(code, 0);
  EXPECT_NE(parent.err().find(fmt::format("rank 1 (pid {}) was killed by signal 9 (SIGKILL)", pids[1])),
            std::string::npos)
      << parent.err();
  EXPECT_NE(kill(pids[0], 0), 0) << "rank 0 outlived the group";
  // The last checkpoint is complete, and the same command resumes from it.
  int64_t saved = updates_in(dir + "/checkpoint_last.pt");
  EXPECT_GE(saved, 5);
  auto again = train(cfg, {fmt::format("optimization.max_update={}", saved + 3)});
  EXPECT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE(again.err.find(fmt::format("(epoch", saved)), std::string::npos);
  EXPECT_NE(again.err.find(fmt::format("@ {} updates)", saved)), std::string::npos) << again.err;
  EXPECT_EQ(updates_in(dir + "/checkpoint_last.pt"), saved + 3);
}

TEST_F(TrainingRun, SigtermSavesAndExitsWithTheRequeueCode) {
  std::string dir = work_.path() + "/stopped";
  BackgroundProcess p({program("fairseq-cpp-train"), config(dir, 2, 1, 100000)});
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (p.err().find("\"num_updates\": 3") == std::string::npos && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  p.signal(SIGTERM);
  int code = p.wait(60);
  EXPECT_EQ(code, 3) << p.err();
  EXPECT_NE(p.err().find("stop signal received: saving checkpoint_last"), std::string::npos) << p.err();
  EXPECT_GE(updates_in(dir + "/checkpoint_last.pt"), 3);
}

std::string read_file_or_empty(const std::string& path) { return fs::exists(path) ? read_file(path) : ""; }

TEST_F(TrainingRun, ASecondRunOnALiveRunsSaveDirIsRefusedButADeadRunsLockIsNot) {
  std::string dir = work_.path() + "/shared_dir";
  std::string cfg = config(dir, 1, 1, 100000);
  BackgroundProcess first({program("fairseq-cpp-train"), cfg});
  const std::string lock = dir + "/" + checkpoint::kRunLockName;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (read_file_or_empty(lock).empty() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_FALSE(read_file_or_empty(lock).empty()) << first.err();
  // The holder: the first run's rank 0 (the program itself, or its one worker).
  std::vector<pid_t> holders = children_of(first.pid());
  holders.push_back(first.pid());
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  auto second = train(cfg, {"optimization.max_update=2"});
  EXPECT_EQ(second.exit_code, 2) << second.err;
  EXPECT_NE(second.err.find("`checkpoint.save_dir` " + dir + " is in use by another training run"), std::string::npos)
      << second.err;
  EXPECT_NE(second.err.find(fmt::format("on host {}", host)), std::string::npos) << second.err;
  bool named = false;
  for (pid_t pid : holders) named = named || second.err.find(fmt::format("pid {} ", pid)) != std::string::npos;
  EXPECT_TRUE(named) << second.err;
  EXPECT_EQ(second.err.find("error:"), second.err.rfind("error:")) << second.err;  // one error line
  EXPECT_EQ(second.err.find('\n', second.err.find("error:")), second.err.size() - 1) << second.err;
  // A run killed with SIGKILL leaves its lock file behind, but not its lock.
  for (pid_t pid : holders) kill(pid, SIGKILL);
  first.wait(15);
  ASSERT_TRUE(fs::exists(lock));
  auto third = train(cfg, {"optimization.max_update=2"});
  EXPECT_EQ(third.exit_code, 0) << third.err;
  EXPECT_FALSE(fs::exists(lock)) << "a run that ends removes its lock file";
}

// The shell words of `argv`, single-quoted.
std::string shell_words(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) {
    std::string quoted = "'";
    for (char c : a) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
    out += (out.empty() ? "" : " ") + quoted + "'";
  }
  return out;
}

TEST_F(TrainingRun, AFullDiskStopsEveryRankAndKeepsThePreviousCheckpoints) {
  // save_dir on a 32 MiB tmpfs of its own (a private mount namespace, as root or as a mapped user):
  // a first run saves, the disk is filled to 256 KiB, the resumed run's next save cannot fit. What
  // the tmpfs holds is copied out before the namespace ends.
  std::string mnt = work_.path() + "/small_disk", out = work_.path() + "/out";
  fs::create_directories(mnt);
  fs::create_directories(out + "/before");
  fs::create_directories(out + "/after");
  std::string cfg = config(mnt + "/run", 2, 1, 6, "  save_interval_updates: 3");
  std::string train = shell_words({program("fairseq-cpp-train"), cfg});
  std::string script = fmt::format(
      R"sh(set -u
mount -t tmpfs -o size=32m fsq-small-disk '{mnt}' || exit 99
{train} >'{out}/first.log' 2>&1; echo $? >'{out}/first.code'
cp -a '{mnt}/run/.' '{out}/before/'
dd if=/dev/zero of='{mnt}/filler' bs=64k 2>/dev/null; truncate -s -256K '{mnt}/filler'
start=$(date +%s.%N)
{train} optimization.max_update=12 >'{out}/second.log' 2>&1; echo $? >'{out}/second.code'
awk -v a="$(date +%s.%N)" -v b="$start" 'BEGIN {{ print a - b }}' >'{out}/second.seconds'
ls -a '{mnt}/run' >'{out}/listing'
{train} optimization.max_update=12 checkpoint.no_save=true >'{out}/third.log' 2>&1; echo $? >'{out}/third.code'
cp -a '{mnt}/run/.' '{out}/after/'
)sh",
      fmt::arg("mnt", mnt), fmt::arg("out", out), fmt::arg("train", train));
  auto r = run({"/usr/bin/unshare", "--user", "--map-root-user", "--mount", "/bin/sh", "-c", script});
  ASSERT_EQ(r.exit_code, 0) << "cannot mount a tmpfs in a private mount namespace (unshare --user --mount): "
                            << r.err;
  auto code = [&](const std::string& name) { return std::stoi(read_file(out + "/" + name + ".code")); };
  ASSERT_EQ(code("first"), 0) << read_file(out + "/first.log");
  const std::string second = read_file(out + "/second.log");
  // Every rank stops with rank 0's one-line reason, well within the run's 60 s timeout.
  EXPECT_EQ(code("second"), 1) << second;
  EXPECT_LT(std::stod(read_file(out + "/second.seconds")), 60.0) << second;
  const std::string reason = "cannot save checkpoint " + mnt + "/run/checkpoint_";
  EXPECT_NE(second.find("error: " + reason), std::string::npos) << second;
  EXPECT_NE(second.find("error: rank 0 stopped the run: " + reason), std::string::npos) << second;
  EXPECT_NE(second.find("No space left on device ("), std::string::npos) << second;
  EXPECT_NE(second.find(" MiB of 32.0 MiB free in " + mnt + "/run"), std::string::npos) << second;
  EXPECT_EQ(second.find("terminate called"), std::string::npos) << second;
  // No unfinished file is left, and the previous checkpoints are unchanged and load.
  EXPECT_EQ(read_file(out + "/listing").find(".tmp."), std::string::npos) << read_file(out + "/listing");
  for (const char* name : {"checkpoint_last.pt", "checkpoint_best.pt"}) {
    ASSERT_TRUE(fs::exists(out + "/after/" + name)) << name;
    EXPECT_EQ(read_file(out + "/after/" + name), read_file(out + "/before/" + name)) << name;
  }
  EXPECT_EQ(updates_in(out + "/after/checkpoint_last.pt"), 6);
  // With checkpoint.no_save the full disk is not in the way.
  const std::string third = read_file(out + "/third.log");
  EXPECT_EQ(code("third"), 0) << third;
  EXPECT_NE(third.find("done training"), std::string::npos) << third;
  EXPECT_NE(third.find("(12 updates)"), std::string::npos) << third;
}

TEST_F(TrainingRun, AveragedCheckpointsEqualAHandAverageInPythonAndLoad) {
  // Update checkpoints at 2, 4, 6 and 8 updates; the upper bound 6 leaves 6, 4 and 2.
  std::string dir = work_.path() + "/averaged";
  auto r = train(config(dir, 1, 1, 8, "  save_interval_updates: 2"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string out = work_.path() + "/average.pt";
  auto avg = run({program("fairseq-cpp-eval"), "average", "--inputs", dir, "--num-update-checkpoints", "3",
                  "--checkpoint-upper-bound", "6", "--output", out});
  ASSERT_EQ(avg.exit_code, 0) << avg.err;
  EXPECT_NE(avg.err.find("averaging 3 checkpoints: checkpoint_1_6.pt, checkpoint_1_4.pt, checkpoint_1_2.pt"),
            std::string::npos)
      << avg.err;
  // The reference: PyTorch in Python sums in float64 (integers in int64) and divides, entry by entry.
  const char* script = R"py(
import sys, torch
out, paths = sys.argv[1], sys.argv[2:]
models = [torch.load(p, map_location="cpu")["model"] for p in paths]
averaged = torch.load(out, map_location="cpu")
first = torch.load(paths[0], map_location="cpu")
differ = [k for k, v in models[0].items() if not torch.equal(averaged["model"][k],
          (sum(m[k].double() for m in models) / len(models)).to(v.dtype) if v.is_floating_point()
          else torch.div(sum(m[k].long() for m in models), len(models), rounding_mode="floor").to(v.dtype))]
moved = len([k for k, v in models[0].items() if not torch.equal(averaged["model"][k], v)]) > len(models[0]) // 2
same_rest = averaged["cfg"] == first["cfg"] and averaged["extra_state"]["num_updates"] == first["extra_state"]["num_updates"]
print(len(models[0]), "entries", len(differ), "differ", "moved", moved, "rest", same_rest, differ[:3])
)py";
  auto py = run({python_executable(), "-c", script, out, dir + "/checkpoint_1_6.pt", dir + "/checkpoint_1_4.pt",
                 dir + "/checkpoint_1_2.pt"});
  ASSERT_EQ(py.exit_code, 0) << py.err;
  EXPECT_NE(py.out.find(" entries 0 differ "), std::string::npos) << py.out;
  EXPECT_NE(py.out.find("moved True"), std::string::npos) << "most entries are the first checkpoint's: " << py.out;
  EXPECT_NE(py.out.find("rest True"), std::string::npos) << py.out;
  // Every program loads it: validation gives a loss.
  auto valid = run({program("fairseq-cpp-eval"), "validate", corpus_->path() + "/bin", "--path", out,
                    "--max-tokens", "500"});
  EXPECT_EQ(valid.exit_code, 0) << valid.err;
  EXPECT_NE((valid.out + valid.err).find("| loss "), std::string::npos) << valid.out << valid.err;
  // One-line refusals (exit 2): too few, a directory without a count, checkpoints of two models.
  auto few = run({program("fairseq-cpp-eval"), "average", "--inputs", dir, "--num-update-checkpoints", "5",
                  "--output", out});
  EXPECT_EQ(few.exit_code, 2);
  EXPECT_NE(few.err.find(dir + " holds 4 update checkpoints (checkpoint_EPOCH_UPDATES.pt), but 5 are to be averaged"),
            std::string::npos)
      << few.err;
  auto bare = run({program("fairseq-cpp-eval"), "average", "--inputs", dir, "--output", out});
  EXPECT_EQ(bare.exit_code, 2);
  EXPECT_NE(bare.err.find(dir + " is a directory: give --num-epoch-checkpoints N, --num-update-checkpoints N or --num-best-checkpoints N"),
            std::string::npos)
      << bare.err;
  std::string other = work_.path() + "/other";
  ASSERT_EQ(train(config(other, 1, 1, 1), {"model.encoder_layers=1"}).exit_code, 0);
  auto mixed = run({program("fairseq-cpp-eval"), "average", "--inputs", dir + "/checkpoint_1_2.pt",
                    other + "/checkpoint_last.pt", "--output", out});
  EXPECT_EQ(mixed.exit_code, 2);
  EXPECT_NE(mixed.err.find("only checkpoints of one model can be averaged"), std::string::npos) << mixed.err;
}

}  // namespace
}  // namespace fairseq_cpp::testing
