// Two hosts for real (issue 20): network namespaces made by tools/netns/hosts.sh, each with its own
// hostname, hosts file and veth interface on one bridge; real c10d groups over TCP between them.
// The interface each rank binds, explicit tcp:// training on 2 hosts x 1 and 2 hosts x 2 workers
// against one process with the same global batch, and torchrun with one agent per host (the wheel
// lane's torchrun). Needs root: CI runs as root.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>
#include <sstream>

#include <signal.h>
#include <unistd.h>

#include <memory>

#include <fmt/format.h>

#include "tests/support/training_fixture.h"

namespace fairseq_cpp::testing {
namespace {

const int kHosts = 2;
const std::string kSubnet = "10.213.77";  // tools/netns/hosts.sh's default
const int kStorePort = 29511;             // free in a fresh namespace
const int kElasticUpdates = 120;          // a host leaves at update 20, comes back about 10 updates later

std::string hosts_tool() { return source_dir() + "/tools/netns/hosts.sh"; }
std::string host_name(int i) { return fmt::format("fsqh{}", i); }
std::string veth(int i) { return fmt::format("fsqv{}", i); }
std::string address(int i) { return fmt::format("{}.{}", kSubnet, i + 1); }

// `argv` on test host `i`, under its own hostname (`hostname` to pretend another one).
std::vector<std::string> on_host(int i, const std::vector<std::string>& argv, const std::string& hostname = "") {
  std::vector<std::string> out;
  if (hostname.empty()) {
    out = {hosts_tool(), "exec", host_name(i)};
  } else {
    out = {
        "/usr/bin/ip", "netns", "exec", host_name(i), "unshare", "--uts", "sh", "-c", "hostname \"$0\" && exec \"$@\"",
        hostname};
  }
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

// `log` without its per-update lines (for failure messages of long runs).
[[maybe_unused]] std::string without_updates(const std::string& log) {
  std::istringstream in(log);
  std::string out;
  for (std::string line; std::getline(in, line);)
    if (line.find("[train_inner]") == std::string::npos && line.find("| [train] {") == std::string::npos &&
        line.find("| [valid] ") == std::string::npos && line.find("| [checkpoint] saved") == std::string::npos)
      out += line + "\n";
  return out;
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

class Multinode : public TrainingFixture {
 protected:
  static void SetUpTestSuite() {
    if (geteuid() != 0) {
      setup_error_ = "the multinode tests make network namespaces and need root (CI runs as root)";
      return;
    }
    auto r = run({hosts_tool(), "up", std::to_string(kHosts)});
    if (r.exit_code != 0) {
      setup_error_ = fmt::format("tools/netns/hosts.sh up {} failed ({}): {}{}", kHosts, r.exit_code, r.out, r.err);
      return;
    }
    TrainingFixture::SetUpTestSuite();
  }
  static void TearDownTestSuite() {
    // Also after failures: kills whatever still runs in the namespaces and removes them.
    if (geteuid() == 0) run({hosts_tool(), "down"});
    TrainingFixture::TearDownTestSuite();
  }
  void SetUp() override { ASSERT_TRUE(setup_error_.empty()) << setup_error_; }

  // One fairseq-cpp-train per rank, `per_host` ranks on each host, explicit tcp:// init to host 0.
  std::vector<std::unique_ptr<BackgroundProcess>> explicit_ranks(const std::string& cfg, int per_host,
                                                                 const std::vector<std::string>& overrides = {}) {
    std::vector<std::unique_ptr<BackgroundProcess>> ranks;
    for (int rank = 0; rank < kHosts * per_host; ++rank) {
      std::vector<std::string> argv{
          program("fairseq-cpp-train"), cfg,
          fmt::format("distributed_training.distributed_init_method=tcp://{}:{}", host_name(0), kStorePort),
          fmt::format("distributed_training.distributed_rank={}", rank), "common.log_all_ranks=true"};
      argv.insert(argv.end(), overrides.begin(), overrides.end());
      ranks.push_back(std::make_unique<BackgroundProcess>(on_host(rank / per_host, argv)));
    }
    return ranks;
  }

  // 2 hosts x `per_host` workers, then one process with update_freq 2 x per_host: same parameters.
  void train_across_hosts_and_compare(int per_host) {
    const int world = kHosts * per_host, updates = 12;
    std::string across = work_.path() + "/across", alone = work_.path() + "/alone";
    auto ranks = explicit_ranks(config(across, world, 1, updates), per_host);
    for (int rank = 0; rank < world; ++rank) {
      auto& p = *ranks[rank];
      ASSERT_EQ(p.wait(300), 0) << "rank " << rank << ":\n" << p.err();
      int host = rank / per_host;
      // The start-up line names the host's veth interface, the one that routes to the master.
      std::string line = fmt::format(
          "mode=explicit rank={}/{} local=0/1 master={}:{} device=cpu interface={} ({}, "
          "the route to the master {} {})",
          rank, world, host_name(0), kStorePort, veth(host), address(host), host_name(0), address(0));
      EXPECT_EQ(count(p.err(), line), 1) << line << "\n" << p.err();
      EXPECT_EQ(count(p.err(), "interface=lo"), 0) << p.err();
    }
    auto single = train(config(alone, 1, world, updates));
    ASSERT_EQ(single.exit_code, 0) << single.err;
    EXPECT_EQ(updates_in(across + "/checkpoint_last.pt"), updates);
    EXPECT_EQ(updates_in(alone + "/checkpoint_last.pt"), updates);
    EXPECT_LT(max_relative_difference(parameters(across), parameters(alone)), 1e-5);
  }

  // Waits until rank 0 has logged `updates` updates; false when it ends first or after two minutes.
  static bool wait_for_updates(const BackgroundProcess& rank0, int updates) {
    for (int i = 0; i < 6000; ++i) {
      if (count(rank0.err(), "[train_inner]") >= updates) return true;
      if (i % 10 == 0 && kill(rank0.pid(), 0) != 0) return false;
      usleep(20000);
    }
    return false;
  }

  // Waits until `path` holds at least `updates` updates; false after two minutes.
  static bool wait_for_checkpoint(const std::string& path, int64_t updates) {
    for (int i = 0; i < 1200; ++i) {
      if (std::filesystem::exists(path) && updates_in(path) >= updates) return true;
      usleep(100000);
    }
    return false;
  }

  // Waits until `text` is in `p`'s stderr; false after `seconds`.
  static bool in_err(const BackgroundProcess& p, const std::string& text, double seconds) {
    for (double waited = 0; waited < seconds; waited += 0.05) {
      if (p.err().find(text) != std::string::npos) return true;
      usleep(50000);
    }
    return false;
  }

  // A checkpoint's resume cursor: {epoch, global batches of the epoch consumed}.
  static std::pair<int64_t, int64_t> cursor_in(const std::string& path) {
    auto itr = checkpoint::load_file(path).at("extra_state").toGenericDict().at("train_iterator").toGenericDict();
    return {itr.at("epoch").toInt(), itr.at("global_batches").toInt()};
  }

  // Waits for every rank of `ranks` to end well.
  static void expect_all_succeed(std::vector<std::unique_ptr<BackgroundProcess>>& ranks) {
    for (size_t rank = 0; rank < ranks.size(); ++rank)
      ASSERT_EQ(ranks[rank]->wait(300), 0) << "rank " << rank << ":\n" << ranks[rank]->err();
  }

  // What still runs in test host `i`'s namespace.
  static std::string processes_on(int i) { return run({"/usr/bin/ip", "netns", "pids", host_name(i)}).out; }

  inline static std::string setup_error_;
};

TEST_F(Multinode, TheHostsToolRefusesASubnetInUseAndIsIdempotent) {
  // 127.0.0.0/8 is loopback's: refused before anything is touched.
  auto taken = run({hosts_tool(), "up", "2"}, {{"FSQ_NETNS_SUBNET", "127.0.0"}});
  EXPECT_EQ(taken.exit_code, 1);
  EXPECT_EQ(taken.err,
            "hosts.sh: the test subnet 127.0.0.0/24 overlaps 127.0.0.1/8, used on this machine; pick another with "
            "FSQ_NETNS_SUBNET=A.B.C\n");
  EXPECT_EQ(run({hosts_tool(), "up", "0"}).exit_code, 2);
  EXPECT_NE(run({"/usr/bin/ip", "netns", "list"}).out.find(host_name(1)), std::string::npos)
      << "a refused up removed the hosts";
  // up again: the same hosts, each reaching the other.
  auto again = run({hosts_tool(), "up", "2"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(again.out,
            fmt::format("hosts.sh: fsqh0 fsqv0 {}/24\nhosts.sh: fsqh1 fsqv1 {}/24\n", address(0), address(1)));
  EXPECT_EQ(read_file("/etc/netns/fsqh1/hosts"),
            fmt::format("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n{}\tfsqh0\n{}\tfsqh1\n",
                        address(0), address(1)));
  auto hostname = run(on_host(1, {"/bin/hostname"}));
  EXPECT_EQ(hostname.out, "fsqh1\n") << hostname.err;
}

TEST_F(Multinode, EachHostRoutesToTheMasterOverItsVeth) {
  std::string probe = program("tests/fsq_dist_probe");
  for (int i = 0; i < kHosts; ++i) {
    auto r = run(on_host(i, {probe, "route", host_name(0)}));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, fmt::format("interface={} ({}, the route to the master {} {})\n", veth(i), address(i),
                                 host_name(0), address(0)));
    // Loopback stays loopback inside a namespace too.
    auto lo = run(on_host(i, {probe, "route", "127.0.0.1"}));
    EXPECT_EQ(lo.out, "interface=lo (127.0.0.1, the route to the master 127.0.0.1)\n") << lo.err;
  }
  // A cut link leaves no route: a one-line operational error, before any rendezvous.
  ASSERT_EQ(run({"/usr/bin/ip", "-n", host_name(1), "link", "set", veth(1), "down"}).exit_code, 0);
  auto cut = run(on_host(1, {probe, "route", host_name(0)}));
  ASSERT_EQ(run({"/usr/bin/ip", "-n", host_name(1), "link", "set", veth(1), "up"}).exit_code, 0);
  EXPECT_EQ(cut.exit_code, 1) << cut.out << cut.err;
  EXPECT_NE(cut.err.find(fmt::format("no route from this host to the master `{}` ({}): Network is unreachable",
                                     host_name(0), address(0))),
            std::string::npos)
      << cut.err;
}

TEST_F(Multinode, CollectivesAcrossHostsWhateverTheHostnameResolvesTo) {
  // Every host calls itself `localhost`, which resolves to 127.0.0.1: binding "my hostname" (Gloo's
  // default device) would put both ranks on loopback, where they cannot reach each other. The route
  // to the master does not care. Host 0 names its interface with the config key, host 1 with
  // GLOO_SOCKET_IFNAME, host 1 of a second run by the route.
  std::string probe = program("tests/fsq_dist_probe");
  std::string init = fmt::format("tcp://{}:{}", address(0), kStorePort);
  auto args = [&](int rank) {
    return std::vector<std::string>{probe, "collectives", "--init-method",      init,        "--world-size",
                                    "2",   "--rank",      std::to_string(rank), "--timeout", "30"};
  };
  auto a0 = args(0);
  a0.insert(a0.end(), {"--socket-ifname", veth(0)});
  BackgroundProcess r0(on_host(0, a0, "localhost"));
  BackgroundProcess r1(on_host(1, args(1), "localhost"), {{"GLOO_SOCKET_IFNAME", veth(1)}});
  ASSERT_EQ(r0.wait(120), 0) << r0.out() << r0.err();
  ASSERT_EQ(r1.wait(120), 0) << r1.out() << r1.err();
  EXPECT_EQ(count(r0.out(), "rank 0/2: collectives ok"), 1) << r0.out();
  EXPECT_EQ(count(r1.out(), "rank 1/2: collectives ok"), 1) << r1.out();
  EXPECT_EQ(count(r0.err(), fmt::format("device=cpu interface={} (distributed_training.socket_ifname)", veth(0))), 1)
      << r0.err();
  EXPECT_EQ(count(r1.err(), fmt::format("device=cpu interface={} (GLOO_SOCKET_IFNAME)", veth(1))), 1) << r1.err();

  BackgroundProcess s0(on_host(0, args(0), "localhost"));
  BackgroundProcess s1(on_host(1, args(1), "localhost"));
  ASSERT_EQ(s0.wait(120), 0) << s0.out() << s0.err();
  ASSERT_EQ(s1.wait(120), 0) << s1.out() << s1.err();
  EXPECT_EQ(count(s1.err(), fmt::format("device=cpu interface={} ({}, the route to the master {})", veth(1), address(1),
                                        address(0))),
            1)
      << s1.err();
}

TEST_F(Multinode, LoopbackOnBothHostsCannotFormTheGroup) {
  // Told to bind loopback, the ranks cannot reach each other: an error naming the interface, not a
  // hang and not a group (so the tests above show the interface choice, not luck).
  std::string probe = program("tests/fsq_dist_probe");
  std::string init = fmt::format("tcp://{}:{}", address(0), kStorePort);
  std::vector<std::unique_ptr<BackgroundProcess>> ranks;
  for (int rank = 0; rank < 2; ++rank)
    ranks.push_back(std::make_unique<BackgroundProcess>(
        on_host(rank, {probe, "collectives", "--init-method", init, "--world-size", "2", "--rank", std::to_string(rank),
                       "--timeout", "4", "--socket-ifname", "lo"})));
  for (int rank = 0; rank < 2; ++rank) {
    // Whichever rank waits for the other to connect gives up at the timeout + 2 s ("no connection to
    // every rank within 6 s"), where Gloo alone would retry for about 22 s; the other finds nothing at
    // its peer's loopback address at once, or after Gloo's own retries.
    int code = ranks[rank]->wait(4 + 15);
    ASSERT_NE(code, -1) << "rank " << rank << " still runs 19 s after a 4 s timeout";
    EXPECT_EQ(code, 1) << ranks[rank]->out() << ranks[rank]->err();
    EXPECT_EQ(count(ranks[rank]->out(), "collectives ok"), 0) << ranks[rank]->out();
    EXPECT_EQ(count(ranks[rank]->err(),
                    fmt::format("joining process group `default` failed on rank {} of 2 (Gloo on interface=lo "
                                "(distributed_training.socket_ifname)): ",
                                rank)),
              1)
        << ranks[rank]->err();
  }
}

TEST_F(Multinode, ExplicitTcpTwoHostsOneWorkerEachTrainAsOneWorkerWithUpdateFreqTwo) {
  train_across_hosts_and_compare(1);
}

TEST_F(Multinode, ExplicitTcpTwoHostsTwoWorkersEachTrainAsOneWorkerWithUpdateFreqFour) {
  train_across_hosts_and_compare(2);
}

TEST_F(Multinode, AHostKilledMidTrainingStopsTheOtherHostNamingTheLostRanks) {
  // 2 hosts x 2 workers; once training runs, every process of host 1 gets SIGKILL. Host 0's ranks
  // must exit within distributed_training.timeout + 15 s, name ranks 2 and 3, and leave nothing.
  const int timeout = 10;
  std::string dir = work_.path() + "/killed";
  auto ranks = explicit_ranks(config(dir, 4, 1, 100000), 2, {fmt::format("distributed_training.timeout={}", timeout)});
  ASSERT_TRUE(wait_for_updates(*ranks[0], 3)) << ranks[0]->err();
  auto killed = run({"/bin/sh", "-c", "ip netns pids " + host_name(1) + " | xargs -r kill -9"});
  ASSERT_EQ(killed.exit_code, 0) << killed.err;
  for (int rank = 0; rank < 2; ++rank) {
    int code = ranks[rank]->wait(timeout + 15);
    ASSERT_NE(code, -1) << "rank " << rank << " still runs " << timeout + 15 << " s after host 1 died:\n"
                        << ranks[rank]->err();
    EXPECT_EQ(code, 1) << ranks[rank]->err();
    std::string err = ranks[rank]->err();
    EXPECT_NE(err.find(fmt::format("failed on rank {} of 4 (group `default`): ", rank)), std::string::npos) << err;
    EXPECT_NE(err.find(fmt::format("; ranks 2, 3 are gone ({} refused the connection)\n", address(1))),
              std::string::npos)
        << err;
  }
  for (int rank = 2; rank < 4; ++rank) EXPECT_EQ(ranks[rank]->wait(5), 128 + SIGKILL);
  EXPECT_EQ(processes_on(0), "") << "orphans on host 0";
  EXPECT_EQ(processes_on(1), "") << "orphans on host 1";
}

TEST_F(Multinode, AStoppedRankIsNamedAsAliveButAbsent) {
  // Rank 1 on host 1 gets SIGSTOP mid-training: its host and process are there, but it never
  // arrives. Rank 0 exits within the timeout + 15 s and says so; nothing waits longer.
  const int timeout = 5;
  std::string dir = work_.path() + "/stopped";
  auto ranks = explicit_ranks(config(dir, 2, 1, 100000), 1, {fmt::format("distributed_training.timeout={}", timeout)});
  ASSERT_TRUE(wait_for_updates(*ranks[0], 3)) << ranks[0]->err();
  ranks[1]->signal(SIGSTOP);
  int code = ranks[0]->wait(timeout + 15);
  ranks[1]->signal(SIGKILL);
  ASSERT_NE(code, -1) << "rank 0 still runs " << timeout + 15 << " s after rank 1 stopped:\n" << ranks[0]->err();
  EXPECT_EQ(code, 1) << ranks[0]->err();
  const std::string err = ranks[0]->err();
  EXPECT_NE(err.find("failed on rank 0 of 2 (group `default`): "), std::string::npos) << err;
  EXPECT_NE(err.find("; rank 1 did not arrive (its process accepts connections but says nothing within 1 s: stopped "
                     "or hung)\n"),
            std::string::npos)
      << err;
  std::smatch line;
  if (std::regex_search(err, line, std::regex("fairseq-cpp-train: error: [^\n]*"))) std::cout << line[0] << "\n";
  EXPECT_EQ(ranks[1]->wait(5), 128 + SIGKILL);
}

TEST_F(Multinode, ACutLinkStopsEveryRankWithinTheTimeoutAndTheSameCommandResumes) {
  // 2 hosts x 1 worker, a checkpoint every 5 updates. Host 1's link goes down mid-training: both
  // ranks exit within distributed_training.timeout + 15 s, checkpoint_last.pt is a complete one;
  // with the link back up, the same commands resume and end with the uninterrupted run's parameters.
  const int timeout = 10, updates = 60;
  std::string cut = work_.path() + "/cut", alone = work_.path() + "/alone";
  std::string cfg = config(cut, 2, 1, updates, "  save_interval_updates: 5");
  std::vector<std::string> overrides{fmt::format("distributed_training.timeout={}", timeout)};
  {
    auto ranks = explicit_ranks(cfg, 1, overrides);
    ASSERT_TRUE(wait_for_updates(*ranks[0], 12)) << ranks[0]->err();
    ASSERT_EQ(run({"/usr/bin/ip", "-n", host_name(1), "link", "set", veth(1), "down"}).exit_code, 0);
    for (int rank = 0; rank < 2; ++rank) {
      int code = ranks[rank]->wait(timeout + 15);
      ASSERT_NE(code, -1) << "rank " << rank << " still runs " << timeout + 15 << " s after the link went down:\n"
                          << ranks[rank]->err();
      EXPECT_EQ(code, 1) << ranks[rank]->err();
      EXPECT_NE(ranks[rank]->err().find(fmt::format("failed on rank {} of 2 (group `default`): ", rank)),
                std::string::npos)
          << ranks[rank]->err();
      // Each says which collective of which update it was ...
      const std::string err = ranks[rank]->err();
      EXPECT_TRUE(std::regex_search(err, std::regex(R"(\(.*(update [0-9]+ of epoch [0-9]+|end of epoch [0-9]+ at update [0-9]+)\) failed on rank )"))) << err;
      std::smatch line;
      if (std::regex_search(err, line, std::regex("fairseq-cpp-train: error: [^\n]*"))) std::cout << line[0] << "\n";
      // ... and names the other, which it cannot reach.
      EXPECT_NE(ranks[rank]->err().find(fmt::format("; rank {} is unreachable (no answer from {} within 1 s)\n",
                                                    1 - rank, address(1 - rank))),
                std::string::npos)
          << ranks[rank]->err();
    }
  }
  // The last complete save: every 5 updates, or at an epoch's end (7 updates on 2 workers); one whose
  // outcome vote the cut interrupted was still written whole, by rename.
  int64_t saved = updates_in(cut + "/checkpoint_last.pt");
  EXPECT_TRUE(saved % 5 == 0 || saved % 7 == 0) << saved;
  EXPECT_GE(saved, 10);
  EXPECT_LT(saved, updates) << "the run ended before the link went down";
  ASSERT_EQ(run({"/usr/bin/ip", "-n", host_name(1), "link", "set", veth(1), "up"}).exit_code, 0);
  auto ranks = explicit_ranks(cfg, 1, overrides);
  for (int rank = 0; rank < 2; ++rank) ASSERT_EQ(ranks[rank]->wait(300), 0) << ranks[rank]->err();
  EXPECT_NE(ranks[0]->err().find("loaded " + cut + "/checkpoint_last.pt"), std::string::npos) << ranks[0]->err();
  auto single = train(config(alone, 1, 2, updates, "  save_interval_updates: 5"));
  ASSERT_EQ(single.exit_code, 0) << single.err;
  EXPECT_EQ(updates_in(cut + "/checkpoint_last.pt"), updates);
  EXPECT_LT(max_relative_difference(parameters(cut), parameters(alone)), 1e-5);
}

TEST_F(Multinode, ACheckpointOfTwoHostsResumesOnOneHostWithTwoWorkersOrOneWorker) {
  // Resume on another layout: 2 hosts x 1 worker stop at update 10, in the middle of an epoch. Copies
  // of their directory resume on host 0 alone, with 2 local workers, and with 1 worker whose
  // update_freq keep_global_batch raises to 2. Each continues at the same batch of the same epoch and
  // ends with the parameters of the uninterrupted 2 x 1 run across the hosts.
  const int stop = 10, updates = 24;
  std::string across = work_.path() + "/across", two = work_.path() + "/two", one = work_.path() + "/one",
              straight = work_.path() + "/straight";
  auto first = explicit_ranks(config(across, 2, 1, stop), 1);
  expect_all_succeed(first);
  auto [epoch, batches] = cursor_in(across + "/checkpoint_last.pt");
  ASSERT_GT(batches, 0) << "update " << stop << " ended epoch " << epoch << "; the test wants the middle of one";
  for (const auto& dir : {two, one}) std::filesystem::copy(across, dir, std::filesystem::copy_options::recursive);
  const std::string loaded = fmt::format("/checkpoint_last.pt (epoch {} @ {} updates)", epoch, stop);

  auto r2 = run(on_host(0, {program("fairseq-cpp-train"), config(two, 2, 1, updates)}));
  ASSERT_EQ(r2.exit_code, 0) << r2.err;
  EXPECT_NE(r2.err.find("mode=local-spawn rank=0/2"), std::string::npos) << r2.err;
  EXPECT_NE(r2.err.find("loaded " + two + loaded), std::string::npos) << r2.err;
  auto r1 = run(on_host(0, {program("fairseq-cpp-train"), config(one, 1, 1, updates),
                            "distributed_training.keep_global_batch=true"}));
  ASSERT_EQ(r1.exit_code, 0) << r1.err;
  EXPECT_NE(r1.err.find("loaded " + one + loaded), std::string::npos) << r1.err;
  EXPECT_NE(r1.err.find("was written by a run of 2 workers; with 1 workers, update_freq 1 becomes 2"),
            std::string::npos)
      << r1.err;

  auto uninterrupted = explicit_ranks(config(straight, 2, 1, updates), 1);
  expect_all_succeed(uninterrupted);
  for (const auto& dir : {two, one}) {
    EXPECT_EQ(updates_in(dir + "/checkpoint_last.pt"), updates) << dir;
    EXPECT_LT(max_relative_difference(parameters(straight), parameters(dir)), 1e-5) << dir;
  }
}

#ifdef FSQ_TORCHRUN
// torchrun on host `i`: one agent, `per_host` workers, its c10d rendezvous on host 0 (the README's
// command); `nnodes` as torchrun takes it ("2", or "1:2" for an elastic job).
std::vector<std::string> torchrun_on(int i, const std::string& nnodes, int per_host, const std::string& cfg,
                                     const std::vector<std::string>& extra = {}) {
  std::vector<std::string> argv{FSQ_TORCHRUN,
                                "--nnodes=" + nnodes,
                                fmt::format("--nproc-per-node={}", per_host),
                                "--rdzv-backend=c10d",
                                fmt::format("--rdzv-endpoint={}:29400", host_name(0)),
                                "--rdzv-id=fsq-multinode"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  argv.insert(argv.end(), {"--no-python", program("fairseq-cpp-train"), cfg, "--log-all-ranks"});
  return on_host(i, argv);
}

class MultinodeTorchrun : public Multinode, public ::testing::WithParamInterface<int> {};

// The pid of the one fairseq-cpp-train process on test host `i`, or -1 (none, or several).
int trainer_on(int i) {
  std::istringstream pids(run({"/usr/bin/ip", "netns", "pids", host_name(i)}).out);
  int found = -1, n = 0;
  for (int pid; pids >> pid;) {
    std::error_code error;
    const auto exe = std::filesystem::read_symlink(fmt::format("/proc/{}/exe", pid), error).filename().string();
    if (!error && exe.rfind("fairseq-cpp-train", 0) == 0) found = pid, ++n;
  }
  return n == 1 ? found : -1;
}

// Whether `signal` waits, undelivered, for process `pid` (its SigPnd or ShdPnd in /proc).
bool pending(int pid, int signal) {
  std::ifstream in(fmt::format("/proc/{}/status", pid));
  const uint64_t bit = uint64_t{1} << (signal - 1);
  for (std::string line; std::getline(in, line);)
    if ((line.rfind("SigPnd:", 0) == 0 || line.rfind("ShdPnd:", 0) == 0) &&
        (std::stoull(line.substr(7), nullptr, 16) & bit))
      return true;
  return false;
}

TEST_P(MultinodeTorchrun, OneAgentPerHostTrainsAsOneWorkerWithTheSameGlobalBatch) {
  // 2 hosts x N workers under torchrun --nnodes=2 give the parameters of one worker with update_freq 2N.
  const int per_host = GetParam(), world = kHosts * per_host, updates = 12;
  std::string across = work_.path() + "/torchrun", alone = work_.path() + "/alone";
  std::string cfg = config(across, world, 1, updates);
  std::vector<std::unique_ptr<BackgroundProcess>> agents;
  for (int i = 0; i < kHosts; ++i)
    agents.push_back(std::make_unique<BackgroundProcess>(
        torchrun_on(i, "2", per_host, cfg, {"--rdzv-conf=join_timeout=120"})));
  std::string both;
  for (int i = 0; i < kHosts; ++i) {
    ASSERT_EQ(agents[i]->wait(300), 0) << "host " << i << ":\n" << agents[i]->err();
    both += agents[i]->err();
  }
  // Each host's workers name its own veth; the ranks follow torchrun's node order, so look for all.
  for (int i = 0; i < kHosts; ++i) {
    EXPECT_EQ(
        count(agents[i]->err(), fmt::format("device=cpu interface={} ({}, the route to the master", veth(i), address(i))),
        per_host)
        << agents[i]->err();
    EXPECT_EQ(count(agents[i]->err(), "interface=lo"), 0) << agents[i]->err();
  }
  for (int rank = 0; rank < world; ++rank)
    EXPECT_EQ(count(both, fmt::format("mode=torchrun rank={}/{} local={}/{}", rank, world, rank % per_host, per_host)),
              1)
        << both;
  auto single = train(config(alone, 1, world, updates));
  ASSERT_EQ(single.exit_code, 0) << single.err;
  EXPECT_EQ(updates_in(across + "/checkpoint_last.pt"), updates);
  EXPECT_LT(max_relative_difference(parameters(across), parameters(alone)), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(WorkersPerHost, MultinodeTorchrun, ::testing::Values(1, 2),
                         [](const auto& info) { return fmt::format("x{}", info.param); });

TEST_F(Multinode, ElasticTorchrunLosesAHostGoesOnAloneWithTheSameGlobalBatchAndGrowsBack) {
  // torchrun --nnodes=1:2 on both hosts, keep_global_batch on, a checkpoint every 10 updates. Every
  // process of host 1 (agent and worker) gets SIGKILL mid-epoch: host 0's agent re-forms the group
  // alone and its worker resumes from checkpoint_last.pt with update_freq 2. Host 1's agent then
  // comes back: the group grows to 2 again (host 0's worker stops at an update and saves) and
  // update_freq is 1 again. The run ends with the parameters of the uninterrupted run.
  const int timeout = 10, updates = kElasticUpdates;
  std::string elastic = work_.path() + "/elastic", alone = work_.path() + "/alone";
  const std::string every10 = "  save_interval_updates: 10";
  std::string cfg = config(elastic, 1, 1, updates, every10);
  const std::vector<std::string> agent_options{"--max-restarts=3", "--rdzv-conf=join_timeout=120,last_call_timeout=5"};
  auto agent = [&](int i) {
    std::vector<std::string> argv = torchrun_on(i, "1:2", 1, cfg, agent_options);
    argv.insert(argv.end(), {fmt::format("distributed_training.timeout={}", timeout),
                             "distributed_training.keep_global_batch=true"});
    // PyTorch 2.4+ agents share one TCPStore across rounds, and its rank-0 agent publishes the
    // workers' MASTER_ADDR only in the first round: an agent that joins a later round waits for it
    // forever (60 s, then an error). Without the sharing, every round publishes its own.
    return std::make_unique<BackgroundProcess>(argv,
                                               std::map<std::string, std::string>{{"TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1"}});
  };
  auto host0 = agent(0);
  auto host1 = agent(1);
  ASSERT_TRUE(in_err(*host0, "mode=torchrun rank=", 120)) << host0->err();
  EXPECT_NE(host0->err().find("/2 local=0/1"), std::string::npos) << host0->err() << host1->err();
  // Either host's worker may be rank 0 (the one that logs): wait for the second checkpoint instead.
  ASSERT_TRUE(wait_for_checkpoint(elastic + "/checkpoint_last.pt", 20)) << host0->err() << host1->err();
  auto killed = run({"/bin/sh", "-c", "ip netns pids " + host_name(1) + " | xargs -r kill -9"});
  ASSERT_EQ(killed.exit_code, 0) << killed.err;
  EXPECT_EQ(host1->wait(10), 128 + SIGKILL);

  // Alone: the same global batch from the last checkpoint.
  ASSERT_TRUE(in_err(*host0, "mode=torchrun rank=0/1 local=0/1", 120)) << host0->err();
  ASSERT_TRUE(in_err(*host0, "keep_global_batch: " + elastic +
                                         "/checkpoint_last.pt was written by a run of 2 workers; with 1 workers, "
                                         "update_freq 1 becomes 2 (the same 2 batches per update)",
                                     60))
      << host0->err();
  const int alone_updates_before = count(host0->err(), "[train_inner]");
  ASSERT_TRUE(wait_for_updates(*host0, alone_updates_before + 5)) << host0->err();

  // Host 1 is back: the group grows to 2 again. Host 0's worker waits, stopped, until its agent has
  // asked it to stop (SIGTERM pending), so that the regrowth comes at the same update however slow
  // host 1's agent is to start, and the run can be short.
  const int alone_worker = trainer_on(0);
  ASSERT_GT(alone_worker, 0) << "not one trainer on host 0";
  ASSERT_EQ(kill(alone_worker, SIGSTOP), 0);
  host1 = agent(1);
  bool asked = false;
  for (int i = 0; i < 1200 && !(asked = pending(alone_worker, SIGTERM)); ++i) usleep(100000);
  ASSERT_EQ(kill(alone_worker, SIGCONT), 0);
  ASSERT_TRUE(asked) << "host 0's agent did not stop its worker within 2 minutes of host 1's return:\n"
                     << without_updates(host0->err()) << "host 1:\n"
                     << without_updates(host1->err());
  ASSERT_EQ(host0->wait(300), 0) << without_updates(host0->err()) << "host 1:\n" << without_updates(host1->err());
  ASSERT_EQ(host1->wait(60), 0) << without_updates(host1->err());
  EXPECT_NE(host0->err().find("stop signal received: saving checkpoint_last"), std::string::npos) << host0->err();
  EXPECT_NE(host1->err().find("/2 local=0/1"), std::string::npos) << host1->err();
  EXPECT_EQ(count(host0->err() + host1->err(), "keep_global_batch:"), 1) << "only the run alone changes update_freq";

  // The world size before and after, as host 0's log tells it.
  std::istringstream log(host0->err());
  for (std::string line; std::getline(log, line);)
    if (line.find("mode=torchrun") != std::string::npos || line.find("keep_global_batch:") != std::string::npos ||
        line.find("stop signal") != std::string::npos || line.find("loaded ") != std::string::npos ||
        line.find("error: ") != std::string::npos)
      std::cout << line << "\n";

  auto single = train(config(alone, 1, 2, updates, every10));
  ASSERT_EQ(single.exit_code, 0) << single.err;
  EXPECT_EQ(updates_in(elastic + "/checkpoint_last.pt"), updates);
  EXPECT_LT(max_relative_difference(parameters(elastic), parameters(alone)), 1e-5);
  EXPECT_EQ(processes_on(0), "") << "orphans on host 0";
  EXPECT_EQ(processes_on(1), "") << "orphans on host 1";
}
#endif

}  // namespace
}  // namespace fairseq_cpp::testing
