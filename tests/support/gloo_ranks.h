#pragma once
// Gloo ranks as threads of one test process.

#include "fairseq_cpp/distributed/process_group_gang.h"

namespace fairseq_cpp::testing {

// Options of rank `r` of `n` Gloo ranks on localhost:`port` with tensors on `device`: Gloo carries
// CUDA tensors too (`backend: gloo`), where NCCL would refuse two ranks on one device.
inline distributed::ProcessGroupOptions gloo_options(int port, int r, int n, double timeout, c10::Device device) {
  distributed::ProcessGroupOptions o;
  o.master_port = port;
  o.rank = r;
  o.world_size = n;
  o.timeout_seconds = timeout;
  o.device = device;
  o.backend = "gloo";
  return o;
}

}  // namespace fairseq_cpp::testing
