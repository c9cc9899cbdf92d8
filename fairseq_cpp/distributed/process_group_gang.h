#pragma once
// A Gang over real c10d process groups: rendezvous through a TCPStore served by rank 0 (or by
// torchrun's agent), Gloo for CPU tensors, NCCL for CUDA tensors (CUDA builds only). Timeouts are
// explicit: a rank that never arrives or dies mid-collective makes the others throw GangError
// within `timeout_seconds`.

#include <memory>
#include <string>

#include "fairseq_cpp/distributed/gang.h"
#include "fairseq_cpp/distributed/network.h"

namespace fairseq_cpp::distributed {

struct ProcessGroupOptions {
  std::string master_addr = "127.0.0.1";        // host of rank 0's TCPStore
  int master_port = 0;                          // its TCP port (1-65535)
  int rank = 0;                                 // this process, in [0, world_size)
  int world_size = 1;                           // processes in the gang
  double timeout_seconds = 1800;                // rendezvous and each collective; > 0
  c10::Device device = c10::Device(c10::kCPU);  // cpu => Gloo, cuda:N => NCCL
  std::string backend;                          // "gloo" | "nccl"; empty = by device
  // The store is already served at master_addr:master_port (torchrun's agent) and outlives this
  // group: all ranks connect as clients, under a prefix that is new for each start of the group.
  bool store_served_elsewhere = false;
  std::string store_namespace = "none";  // names the job in that prefix (TORCHELASTIC_RUN_ID)
  // What Gloo binds; empty = choose_socket_interface(master_addr, "", GLOO_SOCKET_IFNAME).
  SocketInterface socket;
};

// Joins the gang (blocks until every rank has arrived or the timeout passes).
std::shared_ptr<Gang> make_process_group_gang(const ProcessGroupOptions& options);

}  // namespace fairseq_cpp::distributed
