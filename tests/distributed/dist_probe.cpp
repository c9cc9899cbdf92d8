// A small program for the multi-process tests: resolves its topology like fairseq-cpp-train
// (flags below + environment), launches itself (spawn / process group / single) and runs one
// scenario on the gang:
//   collectives  the collective suite against closed forms
//   oversize     rank 1 sends an all_gather_list payload over max_size: every rank must raise
//   exit-mid     after one all_reduce rank 1 exits; the others must get GangError, not hang
//   hang         print "ready", then sit in barriers until killed
//   route HOST   (no gang) print the interface Gloo would bind to reach the master HOST
// Flags: --world-size N --port P --timeout S --init-method M --rank R --no-spawn --prefix
//        --socket-ifname NAMES
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>

#include <ATen/ATen.h>
#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "fairseq_cpp/core/main.h"
#include "fairseq_cpp/core/meters.h"
#include "fairseq_cpp/distributed/distributed_utils.h"
#include "fairseq_cpp/distributed/launcher.h"
#include "fairseq_cpp/distributed/network.h"
#include "tests/distributed/collective_suite.h"

using namespace fairseq_cpp;
using namespace fairseq_cpp::distributed;

namespace {

int scenario_collectives(Gang& gang) {
  auto failures = testing::run_collective_suite(gang, false);
  for (const auto& f : failures) fmt::print("{}\n", f);
  if (failures.empty()) fmt::print("rank {}/{}: collectives ok\n", gang.rank(), gang.size());
  std::fflush(stdout);
  return failures.empty() ? 0 : 1;
}

int scenario_oversize(Gang& gang) {
  std::string payload(gang.rank() == 1 ? 100000 : 10, 'x');
  try {
    distributed::all_gather_list(gang, payload, 16384);
  } catch (const UserError& e) {
    fmt::print("rank {}: oversize error: {}\n", gang.rank(), e.what());
    std::fflush(stdout);
    return 0;
  }
  fmt::print("rank {}: no error\n", gang.rank());
  return 1;
}

int scenario_exit_mid(Gang& gang) {
  at::Tensor t = at::ones({1000});
  gang.all_reduce(t, ReduceOp::sum);
  if (gang.rank() == 1) _exit(3);
  double start = core::monotonic_seconds();
  try {
    for (int i = 0; i < 100; ++i) gang.all_reduce(t, ReduceOp::sum);
  } catch (const GangError& e) {
    fmt::print("rank {}: GangError after {:.1f} s: {}\n", gang.rank(), core::monotonic_seconds() - start, e.what());
    std::fflush(stdout);
    return 4;
  }
  fmt::print("rank {}: no error\n", gang.rank());
  return 0;
}

int scenario_hang(Gang& gang) {
  fmt::print("rank {} pid {} ready\n", gang.rank(), getpid());
  std::fflush(stdout);
  for (;;) {
    gang.barrier();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace

int main(int argc, char** argv) {
  return core::guarded_main("fsq_dist_probe", [&]() -> int {
    if (argc < 2) raise<UserError>("usage: fsq_dist_probe SCENARIO [flags]");
    std::string scenario = argv[1];
    int first_flag = 2;
    std::string route_host;
    if (scenario == "route") {
      if (argc < 3) raise<UserError>("usage: fsq_dist_probe route HOST [--socket-ifname NAMES]");
      route_host = argv[first_flag++];
    }
    TopologyInputs in;
    LaunchOptions launch_options;
    launch_options.timeout_seconds = 30;
    for (int i = first_flag; i < argc; ++i) {
      std::string a = argv[i];
      auto value = [&]() -> std::string {
        if (i + 1 >= argc) raise<UserError>("{} needs a value", a);
        return argv[++i];
      };
      if (a == "--world-size")
        in.world_size = std::stoi(value());
      else if (a == "--port")
        in.port = std::stoi(value());
      else if (a == "--timeout")
        launch_options.timeout_seconds = std::stod(value());
      else if (a == "--init-method")
        in.init_method = value();
      else if (a == "--rank")
        in.rank = std::stoi(value());
      else if (a == "--no-spawn")
        in.no_spawn = true;
      else if (a == "--prefix")
        launch_options.prefix_output = true;
      else if (a == "--socket-ifname")
        launch_options.socket_ifname = value();
      else
        raise<UserError>("unknown flag {}", a);
    }
    if (scenario == "route") {
      SocketInterface chosen =
          choose_socket_interface(route_host, launch_options.socket_ifname, gloo_socket_ifname_env());
      fmt::print("{}\n", chosen.describe());
      return 0;
    }
    in.env = capture_environment();
    Topology topology = resolve_topology(in);
    std::vector<std::string> args(argv, argv + argc);
    return launch(topology, args, launch_options, [&](Gang& gang) -> int {
      if (scenario == "collectives") return scenario_collectives(gang);
      if (scenario == "oversize") return scenario_oversize(gang);
      if (scenario == "exit-mid") return scenario_exit_mid(gang);
      if (scenario == "hang") return scenario_hang(gang);
      raise<UserError>("unknown scenario {}", scenario);
    });
  });
}
