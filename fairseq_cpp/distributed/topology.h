#pragma once
// The topology resolver: one function turns the distributed config and the environment into
// where this process stands, and refuses ambiguous or inconsistent input with a clear error.
// Sources, in order (DESIGN.md, "Distributed training"):
//   0. a worker we spawned ourselves (FSQ_LAUNCH_MODE plus the torchrun variables);
//   1. `distributed_init_method` tcp://host:port (+ distributed_rank, distributed_world_size), or env://;
//   2. torchrun: MASTER_ADDR MASTER_PORT WORLD_SIZE RANK LOCAL_RANK LOCAL_WORLD_SIZE;
//   3. SLURM: node list, SLURM_NNODES/NTASKS/NTASKS_PER_NODE/NODEID/PROCID/LOCALID, port from the job id;
//   4. distributed_world_size > 1 on one node: spawn on localhost;
//   5. a single process.

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace fairseq_cpp::distributed {

enum class LaunchMode { single, local_spawn, explicit_init, torchrun, slurm_per_task, slurm_per_node };
// "single", "local-spawn", "explicit", "torchrun", "slurm-per-task", "slurm-per-node"
const char* launch_mode_name(LaunchMode mode);

struct Topology {
  LaunchMode mode = LaunchMode::single;
  int rank = 0;                           // of this process; with spawn > 0, the first spawned rank
  int world_size = 1;                     // processes in the whole job
  int local_rank = 0;                     // position on this node
  int local_world_size = 1;               // processes on this node
  std::string master_addr = "127.0.0.1";  // rank 0's host (TCPStore)
  int master_port = 0;                    // rank 0's TCPStore port; 0 for a single process
  std::string device = "cpu";             // "cpu" or "cuda:N"
  int spawn = 0;                          // > 0: this process starts `spawn` workers here and joins no gang
  // torchrun's agent already serves the TCPStore at master_addr:master_port and keeps it across
  // restarts (TORCHELASTIC_USE_AGENT_STORE=True): every rank connects as a client, and each start of
  // the group works under a key prefix of its own (see make_process_group_gang).
  bool store_from_agent = false;
  std::string run_id;                     // TORCHELASTIC_RUN_ID, part of that prefix

  // "mode=slurm-per-task rank=3/8 local=1/4 master=node01:17342 device=cuda:1"
  std::string describe() const;
};

struct TopologyInputs {
  int world_size = 1;       // distributed_training.distributed_world_size (0 and 1: not distributed)
  int rank = 0;             // distributed_training.distributed_rank (explicit init: this node's first rank)
  std::string init_method;  // distributed_training.distributed_init_method
  int port = -1;            // distributed_training.distributed_port; <= 0 = derive or pick
  bool no_spawn = false;    // distributed_training.distributed_no_spawn
  int device_id = 0;        // distributed_training.device_id (single process on CUDA)
  bool cpu = false;         // common.cpu: never use CUDA
  int cuda_devices = 0;     // CUDA devices on this node (0 on a CPU build)
  std::map<std::string, std::string> env;  // the environment variables that matter (see capture_environment)
  // Expands a SLURM node list; empty = scontrol, then the built-in parser.
  std::function<std::vector<std::string>(const std::string&)> expand_nodelist;
  // Picks a free TCP port on localhost for a local spawn; empty = ask the kernel.
  std::function<int()> free_port;
};

// Throws UserError that says what to fix when the inputs are inconsistent or half set.
Topology resolve_topology(const TopologyInputs& inputs);

// The device of a program that runs one process and joins no gang (generate, interactive, eval
// validate), picked as training picks a worker's: the CPU with common.cpu or without CUDA, else
// cuda:LOCAL_RANK where a launcher set LOCAL_RANK (torchrun, or one process per GPU under any
// launcher that follows it), else cuda:`distributed_training.device_id`. A device this node lacks,
// or a LOCAL_RANK that is no integer, is a UserError.
std::string local_device(const TopologyInputs& inputs);

// This process's launcher-related environment variables (torchrun's, SLURM's, FSQ_LAUNCH_MODE).
std::map<std::string, std::string> capture_environment();

// "node[01-03,07],gpu5" -> node01 node02 node03 node07 gpu5 (SLURM's hostlist syntax, zero padding kept).
std::vector<std::string> parse_nodelist(const std::string& nodelist);
// `scontrol show hostnames LIST`, or parse_nodelist when scontrol is missing or fails.
std::vector<std::string> expand_nodelist(const std::string& nodelist);

// A TCP port that was free on localhost a moment ago.
int pick_free_port();

// The port a SLURM job's tasks agree on without talking: 15000 + job_id % 15000.
int slurm_port(long job_id);

}  // namespace fairseq_cpp::distributed
