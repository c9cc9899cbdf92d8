// fairseq-cpp-train's body: resolve the launch mode, then spawn workers or train here.
#include <fmt/core.h>

#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/tasks/compute_setup.h"
#include "fairseq_cpp/tasks/distributed_setup.h"
#include "fairseq_cpp/tasks/programs.h"
#include "fairseq_cpp/tasks/translation.h"

namespace fairseq_cpp::tasks {

int train_main(const Invocation& inv) {
  const distributed::TopologyInputs inputs = topology_inputs(inv.config);
  distributed::Topology topology = distributed::resolve_topology(inputs);
  if (inv.command_line.switches.count("dry-run-distributed")) {
    fmt::print("{}\n", topology.describe());
    return kExitOk;
  }
  distributed::LaunchOptions options = launch_options(inv.config);
  if (topology.spawn > 0) {
    // A spawning parent computes nothing (its workers set up their own threads), so that its
    // workers can be forks of it: on a machine with no CUDA device (the driver, once initialized
    // by a device count, does not survive a fork), each runs this program again in place.
    if (inputs.cuda_devices == 0) options.rerun = [&inv] { return run_program(inv.argv, train_spec(), train_main); };
  } else {
    setup_compute(inv.config);
  }
  return distributed::launch(topology, inv.argv, options, [&](distributed::Gang& gang) {
    install_stop_handlers();
    return train_translation(inv.config, gang);
  });
}

}  // namespace fairseq_cpp::tasks
