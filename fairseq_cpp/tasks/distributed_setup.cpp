#include "fairseq_cpp/tasks/distributed_setup.h"

#include <torch/cuda.h>

namespace fairseq_cpp::tasks {

distributed::TopologyInputs topology_inputs(const config::Config& cfg) {
  const auto& d = cfg.distributed_training;
  distributed::TopologyInputs in;
  in.world_size = static_cast<int>(d.distributed_world_size);
  in.rank = static_cast<int>(d.distributed_rank);
  in.init_method = d.distributed_init_method;
  in.port = static_cast<int>(d.distributed_port);
  in.no_spawn = d.distributed_no_spawn;
  in.device_id = static_cast<int>(d.device_id);
  in.cpu = cfg.common.cpu;
  in.cuda_devices = static_cast<int>(torch::cuda::device_count());
  in.env = distributed::capture_environment();
  return in;
}

distributed::LaunchOptions launch_options(const config::Config& cfg) {
  distributed::LaunchOptions o;
  o.timeout_seconds = cfg.distributed_training.timeout;
  o.backend = cfg.distributed_training.distributed_backend;
  o.prefix_output = cfg.common.log_all_ranks;
  o.socket_ifname = cfg.distributed_training.socket_ifname;
  return o;
}

}  // namespace fairseq_cpp::tasks
