#include "fairseq_cpp/distributed/topology.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "fairseq_cpp/core/errors.h"

namespace fairseq_cpp::distributed {
namespace {

const char* const kTorchrunVars[] = {"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE",
                                     "RANK",        "LOCAL_RANK",  "LOCAL_WORLD_SIZE"};
const char* const kSlurmVars[] = {"SLURM_NNODES", "SLURM_NTASKS", "SLURM_NODEID", "SLURM_PROCID", "SLURM_LOCALID"};

class Env {
 public:
  explicit Env(const std::map<std::string, std::string>& vars) : vars_(vars) {}
  bool has(const std::string& name) const {
    auto it = vars_.find(name);
    return it != vars_.end() && !it->second.empty();
  }
  const std::string& get(const std::string& name) const {
    static const std::string kEmpty;
    auto it = vars_.find(name);
    return it == vars_.end() ? kEmpty : it->second;
  }
  // The integer value of `name`; a UserError naming the variable when it is not one.
  int integer(const std::string& name) const {
    const std::string& text = get(name);
    char* end = nullptr;
    errno = 0;
    long v = std::strtol(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || errno != 0 || v < INT32_MIN || v > INT32_MAX)
      raise<UserError>("environment variable {} must be an integer, but is \"{}\" instead.", name, text);
    return static_cast<int>(v);
  }

 private:
  const std::map<std::string, std::string>& vars_;
};

void check_port(int port, const std::string& what) {
  if (port < 1 || port > 65535) raise<UserError>("{} must be a TCP port in 1-65535, but is {} instead.", what, port);
}

bool use_cuda(const TopologyInputs& in) { return !in.cpu && in.cuda_devices > 0; }

std::string device_for(const TopologyInputs& in, int local_rank, const std::string& what) {
  if (!use_cuda(in)) return "cpu";
  if (local_rank >= in.cuda_devices)
    raise<UserError>("{} is {}, but this node has only {} CUDA device(s).", what, local_rank, in.cuda_devices);
  return fmt::format("cuda:{}", local_rank);
}

// Rejects a config world size that contradicts the launcher's.
void check_world_size(const TopologyInputs& in, int launcher_world, const std::string& launcher) {
  if (in.world_size > 1 && in.world_size != launcher_world)
    raise<UserError>(
        "`distributed_training.distributed_world_size` is {}, but {} says the world size is {}; remove the key or "
        "make them agree.",
        in.world_size, launcher, launcher_world);
}

std::optional<LaunchMode> mode_from_name(const std::string& name) {
  for (LaunchMode m : {LaunchMode::single, LaunchMode::local_spawn, LaunchMode::explicit_init, LaunchMode::torchrun,
                       LaunchMode::slurm_per_task, LaunchMode::slurm_per_node})
    if (name == launch_mode_name(m)) return m;
  return std::nullopt;
}

// A worker whose rank comes from the torchrun variables (torchrun itself, or our own spawn).
Topology from_torchrun_vars(const TopologyInputs& in, LaunchMode mode) {
  Env env(in.env);
  std::vector<std::string> set, missing;
  for (const char* v : kTorchrunVars) (env.has(v) ? set : missing).emplace_back(v);
  if (!missing.empty())
    raise<UserError>(
        "the torchrun-style launch is half set up: {} {} set but {} {} missing; set all of MASTER_ADDR, MASTER_PORT, "
        "WORLD_SIZE, RANK, LOCAL_RANK, LOCAL_WORLD_SIZE, or none.",
        fmt::join(set, ", "), set.size() == 1 ? "is" : "are", fmt::join(missing, ", "),
        missing.size() == 1 ? "is" : "are");
  Topology t;
  t.mode = mode;
  t.master_addr = env.get("MASTER_ADDR");
  t.master_port = env.integer("MASTER_PORT");
  t.world_size = env.integer("WORLD_SIZE");
  t.rank = env.integer("RANK");
  t.local_rank = env.integer("LOCAL_RANK");
  t.local_world_size = env.integer("LOCAL_WORLD_SIZE");
  check_port(t.master_port, "MASTER_PORT");
  if (t.world_size < 1) raise<UserError>("WORLD_SIZE must be at least 1, but is {} instead.", t.world_size);
  if (t.rank < 0 || t.rank >= t.world_size)
    raise<UserError>("RANK must be in [0, WORLD_SIZE={}), but is {} instead.", t.world_size, t.rank);
  if (t.local_world_size < 1 || t.local_world_size > t.world_size)
    raise<UserError>("LOCAL_WORLD_SIZE must be in [1, WORLD_SIZE={}], but is {} instead.", t.world_size,
                     t.local_world_size);
  if (t.local_rank < 0 || t.local_rank >= t.local_world_size)
    raise<UserError>("LOCAL_RANK must be in [0, LOCAL_WORLD_SIZE={}), but is {} instead.", t.local_world_size,
                     t.local_rank);
  check_world_size(in, t.world_size, "WORLD_SIZE");
  t.device = device_for(in, t.local_rank, "LOCAL_RANK");
  if (mode == LaunchMode::torchrun) {
    t.store_from_agent = env.has("TORCHELASTIC_USE_AGENT_STORE") && env.get("TORCHELASTIC_USE_AGENT_STORE") == "True";
    t.run_id = env.has("TORCHELASTIC_RUN_ID") ? env.get("TORCHELASTIC_RUN_ID") : "none";
  }
  return t;
}

// "tcp://host:port" -> (host, port)
std::pair<std::string, int> parse_tcp(const std::string& init_method) {
  const std::string prefix = "tcp://";
  std::string rest = init_method.substr(prefix.size());
  auto colon = rest.rfind(':');
  if (colon == std::string::npos || colon == 0)
    raise<UserError>("`distributed_training.distributed_init_method` must look like tcp://HOST:PORT, but is \"{}\".",
                     init_method);
  std::string host = rest.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  char* end = nullptr;
  long port = std::strtol(rest.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || end == rest.c_str() + colon + 1)
    raise<UserError>("`distributed_training.distributed_init_method` has no port number: \"{}\".", init_method);
  check_port(static_cast<int>(port), "the port of `distributed_training.distributed_init_method`");
  return {host, static_cast<int>(port)};
}

Topology from_init_method(const TopologyInputs& in) {
  auto [host, port] = parse_tcp(in.init_method);
  if (in.world_size < 2)
    raise<UserError>(
        "`distributed_training.distributed_init_method` is set, so `distributed_world_size` must be "
        "greater than 1, but is {} instead.",
        in.world_size);
  if (in.rank < 0 || in.rank >= in.world_size)
    raise<UserError>("`distributed_training.distributed_rank` must be in [0, {}), but is {} instead.", in.world_size,
                     in.rank);
  Topology t;
  t.mode = LaunchMode::explicit_init;
  t.master_addr = host;
  t.master_port = port;
  t.world_size = in.world_size;
  t.rank = in.rank;
  // fairseq: one process per local GPU unless told otherwise; `rank` is this node's first rank.
  int local = use_cuda(in) && !in.no_spawn ? in.cuda_devices : 1;
  if (in.rank + local > in.world_size)
    raise<UserError>("`distributed_rank` {} + {} local processes exceeds `distributed_world_size` {}.", in.rank, local,
                     in.world_size);
  t.local_world_size = local;
  if (local > 1) {
    t.spawn = local;
  } else {
    t.device = use_cuda(in) ? device_for(in, in.device_id, "`distributed_training.device_id`") : "cpu";
  }
  return t;
}

// "8" -> 8, "8(x2)" -> 8; "2(x3),1" (different counts per node) is refused.
int tasks_per_node(const std::string& text) {
  if (text.find(',') != std::string::npos)
    raise<UserError>(
        "SLURM_NTASKS_PER_NODE is \"{}\": nodes with different task counts are not supported; give "
        "every node the same number of tasks.",
        text);
  char* end = nullptr;
  long n = std::strtol(text.c_str(), &end, 10);
  if (end == text.c_str() || n < 1 || (*end != '\0' && *end != '('))
    raise<UserError>("SLURM_NTASKS_PER_NODE must look like 8 or 8(x2), but is \"{}\".", text);
  return static_cast<int>(n);
}

// What SLURM's variables say of the job, checked against each other.
struct SlurmJob {
  std::vector<std::string> hosts;  // the node list, expanded
  int nnodes = 0, ntasks = 0, per_node = 0;
  int node_id = 0, proc_id = 0, local_id = 0;
};

SlurmJob read_slurm(const TopologyInputs& in, const Env& env) {
  std::string nodelist =
      env.has("SLURM_STEP_NODELIST") ? env.get("SLURM_STEP_NODELIST") : env.get("SLURM_JOB_NODELIST");
  std::vector<std::string> missing;
  if (nodelist.empty()) missing.emplace_back("SLURM_STEP_NODELIST or SLURM_JOB_NODELIST");
  for (const char* v : kSlurmVars)
    if (!env.has(v)) missing.emplace_back(v);
  if (!missing.empty())
    raise<UserError>(
        "SLURM_JOB_ID is set, but the SLURM environment is incomplete: {} missing; run the program "
        "through srun.",
        fmt::join(missing, ", "));
  SlurmJob j;
  j.nnodes = env.integer("SLURM_NNODES");
  j.ntasks = env.integer("SLURM_NTASKS");
  j.node_id = env.integer("SLURM_NODEID");
  j.proc_id = env.integer("SLURM_PROCID");
  j.local_id = env.integer("SLURM_LOCALID");
  j.hosts = in.expand_nodelist ? in.expand_nodelist(nodelist) : expand_nodelist(nodelist);
  if (j.nnodes < 1 || static_cast<int>(j.hosts.size()) != j.nnodes)
    raise<UserError>("SLURM node list \"{}\" names {} host(s), but SLURM_NNODES is {}.", nodelist, j.hosts.size(),
                     j.nnodes);
  if (j.ntasks % j.nnodes != 0)
    raise<UserError>(
        "SLURM_NTASKS {} is not divisible by SLURM_NNODES {}: every node must run the same number of "
        "tasks.",
        j.ntasks, j.nnodes);
  j.per_node =
      env.has("SLURM_NTASKS_PER_NODE") ? tasks_per_node(env.get("SLURM_NTASKS_PER_NODE")) : j.ntasks / j.nnodes;
  if (j.per_node * j.nnodes != j.ntasks)
    raise<UserError>("SLURM_NTASKS_PER_NODE {} x SLURM_NNODES {} is not SLURM_NTASKS {}.", j.per_node, j.nnodes,
                     j.ntasks);
  if (j.node_id < 0 || j.node_id >= j.nnodes)
    raise<UserError>("SLURM_NODEID must be in [0, {}), but is {} instead.", j.nnodes, j.node_id);
  if (j.proc_id < 0 || j.proc_id >= j.ntasks)
    raise<UserError>("SLURM_PROCID must be in [0, {}), but is {} instead.", j.ntasks, j.proc_id);
  if (j.local_id < 0 || j.local_id >= j.per_node)
    raise<UserError>("SLURM_LOCALID must be in [0, {}), but is {} instead.", j.per_node, j.local_id);
  return j;
}

// The configured port, else one derived from SLURM_JOB_ID, so that every task agrees.
int slurm_master_port(const TopologyInputs& in, const Env& env) {
  if (in.port > 0) return in.port;
  char* end = nullptr;
  long job = std::strtol(env.get("SLURM_JOB_ID").c_str(), &end, 10);
  if (*end != '\0' || job < 0)
    raise<UserError>("SLURM_JOB_ID must be a number, but is \"{}\" instead.", env.get("SLURM_JOB_ID"));
  return slurm_port(job);
}

// One task per node: it spawns one process per local device (CPU: distributed_world_size / nodes).
void slurm_per_node(const TopologyInputs& in, const SlurmJob& j, Topology& t) {
  int local = use_cuda(in) ? in.cuda_devices : std::max(1, in.world_size / j.nnodes);
  if (!use_cuda(in) && in.world_size > 1 && in.world_size % j.nnodes != 0)
    raise<UserError>("`distributed_world_size` {} is not divisible by the {} SLURM nodes.", in.world_size, j.nnodes);
  t.mode = LaunchMode::slurm_per_node;
  t.world_size = j.nnodes * local;
  check_world_size(in, t.world_size, "SLURM (nodes x local devices)");
  t.rank = j.node_id * local;
  t.local_world_size = local;
  if (local > 1 && !in.no_spawn) {
    t.spawn = local;
  } else {
    t.device = device_for(in, 0, "the local device");
  }
  if (local > 1 && in.no_spawn)
    raise<UserError>(
        "one SLURM task per node needs to spawn {} local processes, but `distributed_no_spawn` is set; "
        "start one task per device (srun --ntasks-per-node={}) instead.",
        local, local);
}

Topology from_slurm(const TopologyInputs& in) {
  Env env(in.env);
  const SlurmJob j = read_slurm(in, env);
  Topology t;
  t.master_addr = j.hosts.front();
  t.master_port = slurm_master_port(in, env);
  check_port(t.master_port, "`distributed_training.distributed_port`");
  if (j.per_node == 1) {
    slurm_per_node(in, j, t);
    return t;
  }
  t.mode = LaunchMode::slurm_per_task;
  t.world_size = j.ntasks;
  check_world_size(in, t.world_size, "SLURM_NTASKS");
  t.rank = j.proc_id;
  t.local_rank = j.local_id;
  t.local_world_size = j.per_node;
  if (use_cuda(in) && j.per_node > in.cuda_devices)
    raise<UserError>("SLURM runs {} tasks per node, but this node has only {} CUDA device(s).", j.per_node,
                     in.cuda_devices);
  t.device = device_for(in, j.local_id, "SLURM_LOCALID");
  return t;
}

}  // namespace

const char* launch_mode_name(LaunchMode mode) {
  switch (mode) {
    case LaunchMode::single:
      return "single";
    case LaunchMode::local_spawn:
      return "local-spawn";
    case LaunchMode::explicit_init:
      return "explicit";
    case LaunchMode::torchrun:
      return "torchrun";
    case LaunchMode::slurm_per_task:
      return "slurm-per-task";
    case LaunchMode::slurm_per_node:
      return "slurm-per-node";
  }
  return "?";
}

std::string Topology::describe() const {
  std::string out = fmt::format("mode={} rank={}/{} local={}/{} master={}:{} device={}", launch_mode_name(mode), rank,
                                world_size, local_rank, local_world_size, master_addr, master_port, device);
  if (spawn > 0) out += fmt::format(" spawn={} (ranks {}-{})", spawn, rank, rank + spawn - 1);
  return out;
}

Topology resolve_topology(const TopologyInputs& in) {
  Env env(in.env);
  if (in.world_size < 0)
    raise<UserError>("`distributed_training.distributed_world_size` must be at least 0, but is {} instead.",
                     in.world_size);
  // 0. One of our own spawned workers.
  if (env.has("FSQ_LAUNCH_MODE")) {
    auto mode = mode_from_name(env.get("FSQ_LAUNCH_MODE"));
    if (!mode) raise<UserError>("FSQ_LAUNCH_MODE \"{}\" is not a launch mode.", env.get("FSQ_LAUNCH_MODE"));
    return from_torchrun_vars(in, *mode);
  }
  // 1. An explicit init method.
  if (!in.init_method.empty()) {
    if (in.init_method == "env://") return from_torchrun_vars(in, LaunchMode::torchrun);
    if (in.init_method.rfind("tcp://", 0) == 0) return from_init_method(in);
    raise<UserError>(
        "`distributed_training.distributed_init_method` must be tcp://HOST:PORT or env://, but is "
        "\"{}\".",
        in.init_method);
  }
  // 2. torchrun (or any launcher that sets its variables).
  for (const char* v : kTorchrunVars)
    if (env.has(v)) return from_torchrun_vars(in, LaunchMode::torchrun);
  // 3. SLURM.
  if (env.has("SLURM_JOB_ID") && (env.has("SLURM_STEP_NODELIST") || env.has("SLURM_JOB_NODELIST") ||
                                  env.has("SLURM_NTASKS") || env.has("SLURM_PROCID")))
    return from_slurm(in);
  // 4. Several processes on this node.
  if (in.world_size > 1) {
    if (in.no_spawn)
      raise<UserError>(
          "`distributed_world_size` is {} and `distributed_no_spawn` is set, but no launcher (torchrun, "
          "SLURM) or `distributed_init_method` says where the other processes are.",
          in.world_size);
    if (use_cuda(in) && in.world_size > in.cuda_devices)
      raise<UserError>(
          "`distributed_world_size` is {}, but this node has only {} CUDA device(s); use common.cpu=true "
          "for CPU processes or a multi-node launcher.",
          in.world_size, in.cuda_devices);
    Topology t;
    t.mode = LaunchMode::local_spawn;
    t.world_size = in.world_size;
    t.local_world_size = in.world_size;
    t.master_port = in.port > 0 ? in.port : (in.free_port ? in.free_port() : pick_free_port());
    check_port(t.master_port, "`distributed_training.distributed_port`");
    t.spawn = in.world_size;
    return t;
  }
  // 5. One process.
  Topology t;
  t.device = use_cuda(in) ? device_for(in, in.device_id, "`distributed_training.device_id`") : "cpu";
  return t;
}

std::string local_device(const TopologyInputs& in) {
  Env env(in.env);
  if (!use_cuda(in)) return "cpu";
  if (env.has("LOCAL_RANK")) {
    const int local_rank = env.integer("LOCAL_RANK");
    if (local_rank < 0) raise<UserError>("LOCAL_RANK must be at least 0, but is {} instead.", local_rank);
    return device_for(in, local_rank, "LOCAL_RANK");
  }
  return device_for(in, in.device_id, "`distributed_training.device_id`");
}

std::map<std::string, std::string> capture_environment() {
  std::map<std::string, std::string> out;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry(*e);
    auto eq = entry.find('=');
    if (eq == std::string::npos) continue;
    std::string name = entry.substr(0, eq);
    bool wanted = name.rfind("SLURM_", 0) == 0 || name.rfind("TORCHELASTIC_", 0) == 0 || name == "FSQ_LAUNCH_MODE";
    for (const char* v : kTorchrunVars) wanted = wanted || name == v;
    if (wanted) out[name] = entry.substr(eq + 1);
  }
  return out;
}

std::vector<std::string> parse_nodelist(const std::string& nodelist) {
  // Ranges expand to at most 64 Ki nodes in all (SLURM's hostlist.c refuses longer ranges, MAX_RANGE).
  constexpr size_t kMaxNodes = 64 * 1024;
  // Split on commas outside brackets: "a[1-2,4],b" -> "a[1-2,4]", "b".
  std::vector<std::string> parts;
  std::string current;
  int depth = 0;
  for (char c : nodelist) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == ',' && depth == 0) {
      parts.push_back(current);
      current.clear();
    } else {
      current += c;
    }
    if (depth < 0 || depth > 1) raise<UserError>("SLURM node list \"{}\" has unbalanced brackets.", nodelist);
  }
  if (depth != 0) raise<UserError>("SLURM node list \"{}\" has unbalanced brackets.", nodelist);
  parts.push_back(current);
  std::vector<std::string> hosts;
  for (const auto& part : parts) {
    if (part.empty()) raise<UserError>("SLURM node list \"{}\" has an empty entry.", nodelist);
    auto open = part.find('[');
    if (open == std::string::npos) {
      hosts.push_back(part);
      continue;
    }
    auto close = part.find(']', open);
    std::string prefix = part.substr(0, open);
    std::string suffix = part.substr(close + 1);
    std::string ranges = part.substr(open + 1, close - open - 1);
    size_t start = 0;
    while (start <= ranges.size()) {
      size_t comma = ranges.find(',', start);
      std::string range = ranges.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      auto dash = range.find('-');
      std::string lo = range.substr(0, dash);
      std::string hi = dash == std::string::npos ? lo : range.substr(dash + 1);
      auto is_digits = [](const std::string& s) {
        return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
      };
      if (!is_digits(lo) || !is_digits(hi))
        raise<UserError>("SLURM node list \"{}\": \"{}\" is not a number or a range.", nodelist, range);
      if (lo.size() > 18 || hi.size() > 18)
        raise<UserError>("SLURM node list \"{}\": \"{}\" has a number of more than 18 digits.", nodelist, range);
      long a = std::stol(lo), b = std::stol(hi);
      if (b < a) raise<UserError>("SLURM node list \"{}\": range \"{}\" runs backwards.", nodelist, range);
      if (hosts.size() + static_cast<size_t>(b - a) >= kMaxNodes)
        raise<UserError>("SLURM node list \"{}\" names more than {} nodes.", nodelist, kMaxNodes);
      for (long i = a; i <= b; ++i)
        hosts.push_back(prefix + fmt::format("{:0{}d}", i, static_cast<int>(lo.size())) + suffix);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  return hosts;
}

std::vector<std::string> expand_nodelist(const std::string& nodelist) {
  std::string command = "scontrol show hostnames '" + nodelist + "' 2>/dev/null";
  if (nodelist.find('\'') == std::string::npos) {
    std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
    if (pipe) {
      std::vector<std::string> hosts;
      char line[512];
      while (std::fgets(line, sizeof(line), pipe.get()) != nullptr) {
        std::string host(line);
        while (!host.empty() && (host.back() == '\n' || host.back() == '\r')) host.pop_back();
        if (!host.empty()) hosts.push_back(host);
      }
      int status = pclose(pipe.release());
      if (status == 0 && !hosts.empty()) return hosts;
    }
  }
  return parse_nodelist(nodelist);
}

int pick_free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) raise<OperationalError>("cannot open a socket to find a free port: {}", std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    int err = errno;
    close(fd);
    raise<OperationalError>("cannot find a free port on localhost: {}", std::strerror(err));
  }
  close(fd);
  return ntohs(addr.sin_port);
}

int slurm_port(long job_id) { return 15000 + static_cast<int>(job_id % 15000); }

}  // namespace fairseq_cpp::distributed
