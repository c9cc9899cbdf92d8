#pragma once
// Starting the workers of a topology (fairseq's cli_main, three modes in one function):
// - spawn: starts this program once per local rank with the rank in the environment (forked,
//   running `LaunchOptions::rerun`, where that is set; else re-executed, /proc/self/exe with the
//   same argv), and supervises the children: SIGINT/SIGTERM/SIGUSR1 are forwarded; when one child
//   fails, the others get SIGTERM, then SIGKILL after a grace period, and the parent fails naming
//   the rank and its exit status or signal;
// - a worker of a multi-process job joins the process group and runs the body;
// - a single process runs the body with a FakeGang of size 1.
//
//   return launch(topology, argv, options, [&](Gang& gang) { return train(gang, cfg); });

#include <functional>
#include <string>
#include <vector>

#include "fairseq_cpp/distributed/gang.h"
#include "fairseq_cpp/distributed/topology.h"

namespace fairseq_cpp::distributed {

struct LaunchOptions {
  double timeout_seconds = 1800;  // rendezvous and collectives (distributed_training.timeout)
  std::string backend;            // "gloo" | "nccl"; empty = by device
  bool prefix_output = false;     // prefix every child output line with "[rank N] " (several ranks log)
  double grace_seconds = 5;       // after a failure: SIGTERM, then SIGKILL this much later
  // The network interface(s) Gloo binds (distributed_training.socket_ifname, comma-separated);
  // empty = GLOO_SOCKET_IFNAME, else the interface of the route to the master.
  std::string socket_ifname;
  // The program again, from its command line, as a re-executed worker would run it (it reads its
  // rank from the environment). When set, each spawned worker is this process forked, which calls
  // rerun() and exits with its code: no second start of LibTorch (0.7 s of CPU with Debian's, 290
  // libraries and the operator registry). Leave it empty where a fork cannot compute: after this
  // process initialized CUDA (the driver does not survive a fork) or ran a parallel region
  // (libgomp's threads do not). FSQ_SPAWN=exec in the environment re-executes all the same.
  std::function<int()> rerun;
};

// A worker exited with a failure: `exit_code()` is the worker's own code (1 for a signal).
class WorkerFailedError : public Error {
 public:
  WorkerFailedError(const std::string& message, int code) : Error(message), code_(code) {}
  int exit_code() const override { return code_; }

 private:
  int code_;
};

using WorkerBody = std::function<int(Gang& gang)>;

// Runs `body` where the topology says: in spawned children, here with a process-group gang, or
// here alone. `argv` is this program's command line (argv[0] first), used to re-execute it.
int launch(const Topology& topology, const std::vector<std::string>& argv, const LaunchOptions& options,
           const WorkerBody& body);

// The spawn half of launch(): starts `topology.spawn` children and waits for them. Returns 0
// when all succeed, the shared exit code when they all stop on a forwarded signal, and throws
// WorkerFailedError when one fails.
int spawn_and_supervise(const Topology& topology, const std::vector<std::string>& argv, const LaunchOptions& options);

}  // namespace fairseq_cpp::distributed
