// fairseq-cpp-train's body: resolve the launch mode, then spawn workers or train here.
#include <fmt/core.h>

#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/tasks/compute_setup.h"
#include "fairseq_cpp/tasks/distributed_setup.h"
#include "fairseq_cpp/tasks/programs.h"
#include "fairseq_cpp/tasks/translation.h"

namespace fairseq_cpp::tasks {

int train_main(const Invocation& inv) {
  distributed::Topology topology = distributed::resolve_topology(topology_inputs(inv.config));
  if (inv.command_line.switches.count("dry-run-distributed")) {
    fmt::print("{}\n", topology.describe());
    return kExitOk;
  }
  setup_compute(inv.config);
  return distributed::launch(topology, inv.argv, launch_options(inv.config), [&](distributed::Gang& gang) {
    install_stop_handlers();
    return train_translation(inv.config, gang);
  });
}

}  // namespace fairseq_cpp::tasks
