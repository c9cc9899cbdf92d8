// The topology resolver over a table of environments: each launcher, and broken inputs.
#include "fairseq_cpp/distributed/topology.h"

#include <gtest/gtest.h>

#include "fairseq_cpp/core/errors.h"

namespace fairseq_cpp::distributed {
namespace {

struct Case {
  const char* name;
  std::map<std::string, std::string> env;
  std::function<void(TopologyInputs&)> config;  // config and machine settings
  std::string expected;                         // Topology::describe(), or the error's text
  bool error = false;
};

TopologyInputs inputs_for(const Case& c) {
  TopologyInputs in;
  in.env = c.env;
  in.free_port = [] { return 45678; };
  in.expand_nodelist = parse_nodelist;  // keep scontrol out of unit tests
  if (c.config) c.config(in);
  return in;
}

std::map<std::string, std::string> torchrun(int rank, int world, int local, int local_world) {
  return {{"MASTER_ADDR", "10.0.0.1"},           {"MASTER_PORT", "29500"},
          {"WORLD_SIZE", std::to_string(world)}, {"RANK", std::to_string(rank)},
          {"LOCAL_RANK", std::to_string(local)}, {"LOCAL_WORLD_SIZE", std::to_string(local_world)}};
}

std::map<std::string, std::string> slurm(const std::string& nodes, int nnodes, int ntasks, const std::string& per_node,
                                         int node, int proc, int local) {
  std::map<std::string, std::string> env{{"SLURM_JOB_ID", "123456"},
                                         {"SLURM_STEP_NODELIST", nodes},
                                         {"SLURM_NNODES", std::to_string(nnodes)},
                                         {"SLURM_NTASKS", std::to_string(ntasks)},
                                         {"SLURM_NODEID", std::to_string(node)},
                                         {"SLURM_PROCID", std::to_string(proc)},
                                         {"SLURM_LOCALID", std::to_string(local)}};
  if (!per_node.empty()) env["SLURM_NTASKS_PER_NODE"] = per_node;
  return env;
}

auto gpus(int n) {
  return [n](TopologyInputs& in) { in.cuda_devices = n; };
}

// 15000 + 123456 % 15000 = 18456
const std::vector<Case> kCases = {
    {"single_cpu", {}, nullptr, "mode=single rank=0/1 local=0/1 master=127.0.0.1:0 device=cpu"},
    {"single_gpu",
     {},
     [](TopologyInputs& in) {
       in.cuda_devices = 2;
       in.device_id = 1;
     },
     "mode=single rank=0/1 local=0/1 master=127.0.0.1:0 device=cuda:1"},
    {"single_cpu_flag_wins",
     {},
     [](TopologyInputs& in) {
       in.cuda_devices = 2;
       in.cpu = true;
     },
     "mode=single rank=0/1 local=0/1 master=127.0.0.1:0 device=cpu"},
    {"local_spawn_cpu",
     {},
     [](TopologyInputs& in) { in.world_size = 4; },
     "mode=local-spawn rank=0/4 local=0/4 master=127.0.0.1:45678 device=cpu spawn=4 (ranks 0-3)"},
    {"local_spawn_fixed_port",
     {},
     [](TopologyInputs& in) {
       in.world_size = 2;
       in.port = 12345;
     },
     "mode=local-spawn rank=0/2 local=0/2 master=127.0.0.1:12345 device=cpu spawn=2 (ranks 0-1)"},
    {"torchrun_cpu", torchrun(3, 8, 1, 4), nullptr,
     "mode=torchrun rank=3/8 local=1/4 master=10.0.0.1:29500 device=cpu"},
    {"torchrun_gpu_device_is_local_rank", torchrun(5, 8, 1, 4), gpus(4),
     "mode=torchrun rank=5/8 local=1/4 master=10.0.0.1:29500 device=cuda:1"},
    {"env_init_method", torchrun(0, 2, 0, 2), [](TopologyInputs& in) { in.init_method = "env://"; },
     "mode=torchrun rank=0/2 local=0/2 master=10.0.0.1:29500 device=cpu"},
    {"our_spawned_worker",
     [] {
       auto env = torchrun(1, 2, 1, 2);
       env["FSQ_LAUNCH_MODE"] = "local-spawn";
       return env;
     }(),
     [](TopologyInputs& in) { in.world_size = 2; },
     "mode=local-spawn rank=1/2 local=1/2 master=10.0.0.1:29500 device=cpu"},
    {"explicit_cpu",
     {},
     [](TopologyInputs& in) {
       in.init_method = "tcp://node07:23456";
       in.world_size = 4;
       in.rank = 2;
     },
     "mode=explicit rank=2/4 local=0/1 master=node07:23456 device=cpu"},
    {"explicit_gpus_spawn_per_device",
     {},
     [](TopologyInputs& in) {
       in.init_method = "tcp://node07:23456";
       in.world_size = 8;
       in.rank = 4;
       in.cuda_devices = 4;
     },
     "mode=explicit rank=4/8 local=0/4 master=node07:23456 device=cpu spawn=4 (ranks 4-7)"},
    {"slurm_per_task_gpu", slurm("node[01-02]", 2, 8, "4(x2)", 1, 6, 2), gpus(4),
     "mode=slurm-per-task rank=6/8 local=2/4 master=node01:18456 device=cuda:2"},
    {"slurm_per_task_cpu_no_per_node_var", slurm("cpu[1-2]", 2, 4, "", 0, 1, 1), nullptr,
     "mode=slurm-per-task rank=1/4 local=1/2 master=cpu1:18456 device=cpu"},
    {"slurm_per_node_gpu_spawns", slurm("gpu[3,5]", 2, 2, "1", 1, 1, 0), gpus(8),
     "mode=slurm-per-node rank=8/16 local=0/8 master=gpu3:18456 device=cpu spawn=8 (ranks 8-15)"},
    {"slurm_per_node_cpu_world_from_config", slurm("n[1-2]", 2, 2, "1(x2)", 0, 0, 0),
     [](TopologyInputs& in) { in.world_size = 4; },
     "mode=slurm-per-node rank=0/4 local=0/2 master=n1:18456 device=cpu spawn=2 (ranks 0-1)"},
    {"slurm_port_from_config", slurm("n1", 1, 2, "2", 0, 1, 1), [](TopologyInputs& in) { in.port = 31000; },
     "mode=slurm-per-task rank=1/2 local=1/2 master=n1:31000 device=cpu"},
    // Broken inputs: each says what to fix.
    {"torchrun_half_set",
     {{"MASTER_ADDR", "h"}, {"RANK", "0"}},
     nullptr,
     "the torchrun-style launch is half set up: MASTER_ADDR, RANK are set but MASTER_PORT, WORLD_SIZE, LOCAL_RANK, "
     "LOCAL_WORLD_SIZE are missing",
     true},
    {"torchrun_rank_out_of_range", torchrun(8, 8, 0, 4), nullptr, "RANK must be in [0, WORLD_SIZE=8), but is 8", true},
    {"torchrun_local_rank_out_of_range", torchrun(1, 8, 4, 4), nullptr,
     "LOCAL_RANK must be in [0, LOCAL_WORLD_SIZE=4), but is 4", true},
    {"torchrun_not_a_number",
     [] {
       auto e = torchrun(0, 2, 0, 2);
       e["WORLD_SIZE"] = "two";
       return e;
     }(),
     nullptr, "environment variable WORLD_SIZE must be an integer, but is \"two\"", true},
    {"torchrun_bad_port",
     [] {
       auto e = torchrun(0, 2, 0, 2);
       e["MASTER_PORT"] = "0";
       return e;
     }(),
     nullptr, "MASTER_PORT must be a TCP port in 1-65535, but is 0", true},
    {"torchrun_world_conflicts_with_config", torchrun(0, 2, 0, 2), [](TopologyInputs& in) { in.world_size = 4; },
     "`distributed_training.distributed_world_size` is 4, but WORLD_SIZE says the world size is 2", true},
    {"torchrun_more_local_ranks_than_gpus", torchrun(3, 4, 3, 4), gpus(2),
     "LOCAL_RANK is 3, but this node has only 2 CUDA device(s)", true},
    {"slurm_not_divisible", slurm("n[1-3]", 3, 8, "", 0, 0, 0), nullptr,
     "SLURM_NTASKS 8 is not divisible by SLURM_NNODES 3", true},
    {"slurm_half_set",
     {{"SLURM_JOB_ID", "5"}, {"SLURM_NTASKS", "2"}},
     nullptr,
     "SLURM_JOB_ID is set, but the SLURM environment is incomplete: SLURM_STEP_NODELIST or SLURM_JOB_NODELIST, "
     "SLURM_NNODES, SLURM_NODEID, SLURM_PROCID, SLURM_LOCALID missing",
     true},
    {"slurm_nodelist_mismatch", slurm("n[1-3]", 2, 2, "", 0, 0, 0), nullptr,
     "SLURM node list \"n[1-3]\" names 3 host(s), but SLURM_NNODES is 2", true},
    {"slurm_heterogeneous_tasks", slurm("n[1-2]", 2, 4, "3,1", 0, 0, 0), nullptr,
     "nodes with different task counts are not supported", true},
    {"slurm_procid_out_of_range", slurm("n[1-2]", 2, 4, "2(x2)", 0, 4, 0), nullptr,
     "SLURM_PROCID must be in [0, 4), but is 4", true},
    {"explicit_needs_world_size",
     {},
     [](TopologyInputs& in) { in.init_method = "tcp://h:1234"; },
     "`distributed_world_size` must be greater than 1, but is 1",
     true},
    {"explicit_no_port",
     {},
     [](TopologyInputs& in) {
       in.init_method = "tcp://host";
       in.world_size = 2;
     },
     "must look like tcp://HOST:PORT, but is \"tcp://host\"",
     true},
    {"explicit_rank_out_of_range",
     {},
     [](TopologyInputs& in) {
       in.init_method = "tcp://h:1234";
       in.world_size = 2;
       in.rank = 2;
     },
     "`distributed_training.distributed_rank` must be in [0, 2), but is 2",
     true},
    {"unsupported_init_method",
     {},
     [](TopologyInputs& in) {
       in.init_method = "file:///tmp/x";
       in.world_size = 2;
     },
     "must be tcp://HOST:PORT or env://",
     true},
    {"spawn_more_than_gpus",
     {},
     [](TopologyInputs& in) {
       in.world_size = 4;
       in.cuda_devices = 2;
     },
     "`distributed_world_size` is 4, but this node has only 2 CUDA device(s)",
     true},
    {"no_spawn_without_launcher",
     {},
     [](TopologyInputs& in) {
       in.world_size = 2;
       in.no_spawn = true;
     },
     "no launcher (torchrun, SLURM) or `distributed_init_method` says where the other processes are",
     true},
    {"bad_launch_mode",
     {{"FSQ_LAUNCH_MODE", "teleport"}},
     nullptr,
     "FSQ_LAUNCH_MODE \"teleport\" is not a launch mode",
     true},
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class Resolver : public ::testing::TestWithParam<Case> {};

TEST_P(Resolver, Resolves) {
  const Case& c = GetParam();
  if (c.error) {
    try {
      Topology t = resolve_topology(inputs_for(c));
      FAIL() << "expected an error, got " << t.describe();
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find(c.expected), std::string::npos) << e.what();
    }
  } else {
    EXPECT_EQ(resolve_topology(inputs_for(c)).describe(), c.expected);
  }
}

INSTANTIATE_TEST_SUITE_P(Table, Resolver, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return info.param.name; });

TEST(Nodelist, ParsesSlurmHostlists) {
  EXPECT_EQ(parse_nodelist("node[01-04,07]"),
            (std::vector<std::string>{"node01", "node02", "node03", "node04", "node07"}));
  EXPECT_EQ(parse_nodelist("a,b[09-11]-ib,c"), (std::vector<std::string>{"a", "b09-ib", "b10-ib", "b11-ib", "c"}));
  EXPECT_EQ(parse_nodelist("gpu[8-10]"), (std::vector<std::string>{"gpu8", "gpu9", "gpu10"}));
  EXPECT_THROW(parse_nodelist("n[1-2"), UserError);
  EXPECT_THROW(parse_nodelist("n[3-1]"), UserError);
  EXPECT_THROW(parse_nodelist("n[a-b]"), UserError);
  EXPECT_THROW(parse_nodelist("a,,b"), UserError);
}

// Found by fuzz_hostlist: a number past long's range threw std::out_of_range, and a huge range
// expanded until memory ran out.
TEST(Nodelist, RefusesHugeNumbersAndRanges) {
  EXPECT_THROW(parse_nodelist("n[99999999999999999999]"), UserError);
  EXPECT_THROW(parse_nodelist("n[0-999999999999]"), UserError);
  EXPECT_THROW(parse_nodelist("n[0-40000],m[0-40000]"), UserError);
  EXPECT_EQ(parse_nodelist("n[1-65536]").size(), 65536u);
}

TEST(Nodelist, ExpandFallsBackToTheParser) {
  // Without a SLURM controller, scontrol fails or is missing; the built-in parser answers.
  EXPECT_EQ(expand_nodelist("x[1-2]"), (std::vector<std::string>{"x1", "x2"}));
}

TEST(Topology, SlurmPortIsDerivedFromTheJobId) {
  EXPECT_EQ(slurm_port(123456), 18456);
  EXPECT_EQ(slurm_port(0), 15000);
}

TEST(Topology, TorchrunsAgentStoreIsJoinedAsAClient) {
  // torchrun 2.x serves the store itself and says so; our own spawn and torchrun 1.x do not.
  auto env = torchrun(1, 2, 1, 2);
  env["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  env["TORCHELASTIC_RUN_ID"] = "job7";
  Topology t = resolve_topology(inputs_for({"agent_store", env, nullptr, "", false}));
  EXPECT_TRUE(t.store_from_agent);
  EXPECT_EQ(t.run_id, "job7");
  env["TORCHELASTIC_USE_AGENT_STORE"] = "False";
  EXPECT_FALSE(resolve_topology(inputs_for({"own_store", env, nullptr, "", false})).store_from_agent);
  env.erase("TORCHELASTIC_USE_AGENT_STORE");
  EXPECT_FALSE(resolve_topology(inputs_for({"no_agent", env, nullptr, "", false})).store_from_agent);
  env["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  env["FSQ_LAUNCH_MODE"] = "local-spawn";  // our spawn's workers never use an agent's store
  EXPECT_FALSE(resolve_topology(inputs_for({"spawn", env, nullptr, "", false})).store_from_agent);
}

// generate, interactive and eval validate: one process, on the device a training worker of the same
// launch would take.
TEST(Topology, OneProcessProgramsTakeTheDeviceOfTheirLaunch) {
  auto device = [](std::map<std::string, std::string> env, int gpus, int device_id, bool cpu) {
    TopologyInputs in;
    in.env = std::move(env);
    in.cuda_devices = gpus;
    in.device_id = device_id;
    in.cpu = cpu;
    return local_device(in);
  };
  EXPECT_EQ(device({}, 0, 0, false), "cpu");
  EXPECT_EQ(device({}, 0, 3, false), "cpu");  // no CUDA: device_id does not matter
  EXPECT_EQ(device({}, 4, 0, false), "cuda:0");
  EXPECT_EQ(device({}, 4, 2, false), "cuda:2");
  EXPECT_EQ(device({}, 4, 2, true), "cpu");                         // common.cpu
  EXPECT_EQ(device({{"LOCAL_RANK", "3"}}, 4, 0, false), "cuda:3");  // a launcher's LOCAL_RANK wins
  EXPECT_EQ(device({{"LOCAL_RANK", "3"}}, 4, 1, false), "cuda:3");
  EXPECT_EQ(device({{"LOCAL_RANK", "3"}}, 0, 0, false), "cpu");
  EXPECT_EQ(device(torchrun(5, 8, 1, 4), 4, 0, false), "cuda:1");
  auto error = [&](std::map<std::string, std::string> env, int gpus, int device_id) {
    try {
      device(std::move(env), gpus, device_id, false);
    } catch (const UserError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error({}, 2, 2), "`distributed_training.device_id` is 2, but this node has only 2 CUDA device(s).");
  EXPECT_EQ(error({{"LOCAL_RANK", "4"}}, 4, 0), "LOCAL_RANK is 4, but this node has only 4 CUDA device(s).");
  EXPECT_EQ(error({{"LOCAL_RANK", "one"}}, 4, 0), "environment variable LOCAL_RANK must be an integer, but is \"one\" instead.");
  EXPECT_EQ(error({{"LOCAL_RANK", "-1"}}, 4, 0), "LOCAL_RANK must be at least 0, but is -1 instead.");
}

TEST(Topology, FreePortIsUsable) {
  int port = pick_free_port();
  EXPECT_GT(port, 0);
  EXPECT_LE(port, 65535);
}

}  // namespace
}  // namespace fairseq_cpp::distributed
