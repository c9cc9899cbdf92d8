#pragma once
// From the config to the distributed layer's own options: the topology inputs (config plus this
// machine and its environment) and the launch options.

#include "fairseq_cpp/config/sections.h"
#include "fairseq_cpp/distributed/launcher.h"
#include "fairseq_cpp/distributed/topology.h"

namespace fairseq_cpp::tasks {

distributed::TopologyInputs topology_inputs(const config::Config& cfg);
distributed::LaunchOptions launch_options(const config::Config& cfg);

}  // namespace fairseq_cpp::tasks
