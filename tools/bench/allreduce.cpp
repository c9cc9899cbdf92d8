// All-reduce bandwidth between local processes over Gloo (TCP on localhost).
//   fsq_bench_allreduce [--world-size 2] [--mib 64] [--iters 10]
// Spawns the workers itself (the library's local spawn) and prints, from rank 0, one line:
//   fairseq-cpp  world=2  size=64 MiB  median=123.4 ms  algbw=0.52 GB/s  busbw=0.52 GB/s
// algbw = bytes / time; busbw = algbw * 2 (n - 1) / n, as nccl-tests report it.
#include <algorithm>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/core.h>

#include "fairseq_cpp/core/main.h"
#include "fairseq_cpp/core/meters.h"
#include "fairseq_cpp/distributed/launcher.h"

using namespace fairseq_cpp;

int main(int argc, char** argv) {
  return core::guarded_main("fsq_bench_allreduce", [&]() -> int {
    int world = 2, iters = 10;
    double mib = 64;
    for (int i = 1; i + 1 < argc; i += 2) {
      std::string flag = argv[i];
      if (flag == "--world-size")
        world = std::stoi(argv[i + 1]);
      else if (flag == "--mib")
        mib = std::stod(argv[i + 1]);
      else if (flag == "--iters")
        iters = std::stoi(argv[i + 1]);
      else
        raise<UserError>("unknown flag {}", flag);
    }
    distributed::TopologyInputs in;
    in.world_size = world;
    in.env = distributed::capture_environment();
    distributed::Topology topology = distributed::resolve_topology(in);
    std::vector<std::string> args(argv, argv + argc);
    return distributed::launch(topology, args, {}, [&](distributed::Gang& gang) -> int {
      at::set_num_threads(1);
      auto n = static_cast<int64_t>(mib * 1024 * 1024 / sizeof(float));
      at::Tensor t = at::ones({n});
      distributed::all_sum(gang, t);  // warm-up: connections and buffers
      std::vector<double> times;
      for (int i = 0; i < iters; ++i) {
        gang.barrier();
        double start = core::monotonic_seconds();
        distributed::all_sum(gang, t);
        times.push_back(core::monotonic_seconds() - start);
      }
      std::sort(times.begin(), times.end());
      double median = times[times.size() / 2];
      double bytes = static_cast<double>(n) * sizeof(float);
      double algbw = bytes / median / 1e9;
      if (gang.rank() == 0)
        fmt::print("fairseq-cpp  world={}  size={} MiB  median={:.1f} ms  algbw={:.2f} GB/s  busbw={:.2f} GB/s\n",
                   gang.size(), mib, median * 1e3, algbw, algbw * 2 * (gang.size() - 1) / gang.size());
      return 0;
    });
  });
}
