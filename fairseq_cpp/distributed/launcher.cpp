#include "fairseq_cpp/distributed/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string_view>

#include <fmt/format.h>

#include "fairseq_cpp/core/logging.h"
#include "fairseq_cpp/core/main.h"
#include "fairseq_cpp/core/meters.h"
#include "fairseq_cpp/core/runtime.h"
#include "fairseq_cpp/distributed/distributed_utils.h"

namespace fairseq_cpp::distributed {
namespace {

// Signals the parent forwards to its children, delivered through a self-pipe.
constexpr int kForwarded[] = {SIGINT, SIGTERM, SIGUSR1};
int g_signal_pipe[2] = {-1, -1};

void on_signal(int signo) {
  unsigned char byte = static_cast<unsigned char>(signo);
  [[maybe_unused]] ssize_t n = write(g_signal_pipe[1], &byte, 1);
}

std::string signal_text(int signo) {
  const char* abbrev = sigabbrev_np(signo);
  return fmt::format("signal {} (SIG{})", signo, abbrev ? abbrev : "?");
}

struct Child {
  int rank = 0;
  pid_t pid = -1;
  int out_fd = -1;  // pipes when output is prefixed, else -1
  int err_fd = -1;
  std::string out_partial;  // an unfinished line
  std::string err_partial;
  bool running = true;
  int status = 0;
};

// Writes complete lines of `data` with "[rank N] " in front; keeps the unfinished tail.
void forward_lines(int rank, std::string& partial, const char* data, size_t n, int to_fd) {
  partial.append(data, n);
  size_t start = 0;
  for (size_t nl; (nl = partial.find('\n', start)) != std::string::npos; start = nl + 1) {
    std::string line = fmt::format("[rank {}] {}\n", rank, std::string_view(partial).substr(start, nl - start));
    [[maybe_unused]] ssize_t w = write(to_fd, line.data(), line.size());
  }
  partial.erase(0, start);
}

void drain(Child& c, int& fd, std::string& partial, int to_fd) {
  if (fd < 0) return;
  char buf[65536];
  ssize_t n = read(fd, buf, sizeof(buf));
  if (n > 0) {
    forward_lines(c.rank, partial, buf, static_cast<size_t>(n), to_fd);
  } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
    if (!partial.empty()) forward_lines(c.rank, partial, "\n", 1, to_fd);
    close(fd);
    fd = -1;
  }
}

// The launcher's own descriptors, which a forked worker closes (exec would: they are O_CLOEXEC).
void close_all(const std::vector<int>& fds) {
  for (int fd : fds)
    if (fd >= 0) close(fd);
}

// Forked workers where `rerun` is set (LaunchOptions::rerun) and FSQ_SPAWN is not "exec".
bool fork_in_place(const LaunchOptions& options) {
  const char* how = std::getenv("FSQ_SPAWN");
  return options.rerun && !(how != nullptr && std::string_view(how) == "exec");
}

// In the child: its rank's environment and output, then the program again: `rerun` in this fork
// where it is set, else re-executed.
[[noreturn]] void start_child(const Topology& t, const std::vector<std::string>& argv, int local, pid_t parent,
                              int out_fd, int err_fd, const std::vector<int>& launcher_fds,
                              const std::function<int()>& rerun) {
  // Die with the parent, so that no worker outlives a killed launcher.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(1);
  setpgid(0, 0);  // terminal signals reach the parent only; it forwards them once
  if (out_fd >= 0) dup2(out_fd, STDOUT_FILENO);
  if (err_fd >= 0) dup2(err_fd, STDERR_FILENO);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int s : kForwarded) signal(s, SIG_DFL);
  setenv("FSQ_LAUNCH_MODE", launch_mode_name(t.mode), 1);
  setenv("MASTER_ADDR", t.master_addr.c_str(), 1);
  setenv("MASTER_PORT", std::to_string(t.master_port).c_str(), 1);
  setenv("WORLD_SIZE", std::to_string(t.world_size).c_str(), 1);
  setenv("RANK", std::to_string(t.rank + local).c_str(), 1);
  setenv("LOCAL_RANK", std::to_string(local).c_str(), 1);
  setenv("LOCAL_WORLD_SIZE", std::to_string(t.spawn).c_str(), 1);
  // Spinning idle threads slow down neighbours on a shared machine (LIBTORCH.md, trap 2). For the
  // re-executed program: a fork keeps the libraries that read them, loaded with the launcher's.
  core::set_cpu_runtime_settings();
  if (rerun) {
    close_all(launcher_fds);
    int code = 1;
    try {
      code = rerun();
    } catch (...) {  // never unwind into the launcher's frames, which this copy of them must not run
      fmt::print(stderr, "worker {}: an unknown exception ended it\n", t.rank + local);
    }
    std::exit(code);  // as the re-executed program's return from main: static destructors, leak checks
  }
  std::vector<char*> args = core::c_argv(argv);
  execv("/proc/self/exe", args.data());
  fmt::print(stderr, "cannot re-execute /proc/self/exe: {}\n", std::strerror(errno));
  _exit(127);
}

// "rank 1 (pid 4242) exited with status 2" / "... was killed by signal 9 (SIGKILL)"
std::string describe_exit(const Child& c) {
  if (WIFSIGNALED(c.status))
    return fmt::format("rank {} (pid {}) was killed by {}", c.rank, c.pid, signal_text(WTERMSIG(c.status)));
  return fmt::format("rank {} (pid {}) exited with status {}", c.rank, c.pid, WEXITSTATUS(c.status));
}

bool failed(const Child& c) { return WIFSIGNALED(c.status) || WEXITSTATUS(c.status) != 0; }

// Forks the `t.spawn` workers, their output through pipes with `prefix_output`; each runs `rerun`
// in place where that is set, else re-executes this program.
std::vector<Child> start_children(const Topology& t, const std::vector<std::string>& argv, bool prefix_output,
                                  const std::function<int()>& rerun) {
  std::vector<Child> children(t.spawn);
  pid_t parent = getpid();
  for (int local = 0; local < t.spawn; ++local) {
    Child& c = children[local];
    c.rank = t.rank + local;
    int out[2] = {-1, -1}, err[2] = {-1, -1};
    if (prefix_output && (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0))
      raise<OperationalError>("cannot create a pipe: {}", std::strerror(errno));
    std::fflush(nullptr);
    c.pid = fork();
    if (c.pid < 0) raise<OperationalError>("cannot fork worker {}: {}", c.rank, std::strerror(errno));
    if (c.pid == 0) {
      // The launcher's descriptors in this copy: the signal pipe, this worker's pipes (after their
      // dup2 onto stdout and stderr) and the earlier workers' read ends.
      std::vector<int> inherited{g_signal_pipe[0], g_signal_pipe[1], out[0], out[1], err[0], err[1]};
      for (int j = 0; j < local; ++j) inherited.insert(inherited.end(), {children[j].out_fd, children[j].err_fd});
      start_child(t, argv, local, parent, out[1], err[1], inherited, rerun);
    }
    if (prefix_output) {
      close(out[1]);
      close(err[1]);
      c.out_fd = out[0];
      c.err_fd = err[0];
      fcntl(c.out_fd, F_SETFL, O_NONBLOCK);
      fcntl(c.err_fd, F_SETFL, O_NONBLOCK);
    }
  }
  return children;
}

// The parent's watch over its workers: signals forwarded, output relayed, the first failure
// recorded and the other workers stopped (SIGTERM, then SIGKILL after the grace period).
struct Supervisor {
  Supervisor(std::vector<Child>& children, double grace_seconds)
      : children(children), grace_seconds(grace_seconds), running(static_cast<int>(children.size())) {}

  std::vector<Child>& children;
  double grace_seconds;
  std::string failure;  // the first failure, for the error message
  int failure_code = 0;
  int forwarded = 0;   // the last signal forwarded, 0 if none
  double kill_at = 0;  // when stopping: the time to send SIGKILL
  int running;         // workers not yet reaped

  bool busy() const {
    return running > 0 || std::any_of(children.begin(), children.end(),
                                       [](const Child& c) { return c.out_fd >= 0 || c.err_fd >= 0; });
  }

  // Waits up to 100 ms for a signal or output, then forwards and relays what came.
  void relay() {
    std::vector<pollfd> fds{{g_signal_pipe[0], POLLIN, 0}};
    for (auto& c : children) {
      if (c.out_fd >= 0) fds.push_back({c.out_fd, POLLIN, 0});
      if (c.err_fd >= 0) fds.push_back({c.err_fd, POLLIN, 0});
    }
    poll(fds.data(), fds.size(), 100);
    unsigned char signo = 0;
    while (read(g_signal_pipe[0], &signo, 1) == 1) {
      forwarded = signo;
      log::warning("launcher", "received {}; forwarding it to the workers", signal_text(signo));
      for (auto& c : children)
        if (c.running) kill(c.pid, signo);
    }
    for (auto& c : children) {
      drain(c, c.out_fd, c.out_partial, STDOUT_FILENO);
      drain(c, c.err_fd, c.err_partial, STDERR_FILENO);
    }
  }

  // Reaps every worker that ended since the last poll. When several did, the one killed by a
  // signal is the cause (its peers then fail on their collectives within milliseconds).
  void reap() {
    std::vector<Child*> ended;
    for (auto& c : children) {
      if (!c.running || waitpid(c.pid, &c.status, WNOHANG) != c.pid) continue;
      c.running = false;
      --running;
      ended.push_back(&c);
    }
    std::stable_partition(ended.begin(), ended.end(), [](const Child* c) { return WIFSIGNALED(c->status); });
    for (Child* c : ended) {
      if (!failed(*c) || !failure.empty()) continue;
      if (forwarded != 0 && WIFEXITED(c->status)) continue;  // stopping on a signal: its own exit code
      failure = describe_exit(*c);
      failure_code = WIFEXITED(c->status) ? WEXITSTATUS(c->status) : 1;
      if (running > 0) {
        log::error("launcher", "{}; stopping the other {} worker(s)", failure, running);
        for (auto& other : children)
          if (other.running) kill(other.pid, SIGTERM);
        kill_at = core::monotonic_seconds() + grace_seconds;
      }
    }
    if (kill_at > 0 && core::monotonic_seconds() >= kill_at) {
      for (auto& c : children)
        if (c.running) kill(c.pid, SIGKILL);
      kill_at = 0;
    }
  }

  // Throws WorkerFailedError after a failure; else 0, or after a forwarded signal the largest of
  // the workers' exit codes (they agree on one, e.g. "requeue").
  int exit_code() const {
    if (!failure.empty()) throw WorkerFailedError(failure, failure_code == 0 ? 1 : failure_code);
    if (forwarded == 0) return 0;
    int code = 0;
    for (const auto& c : children) code = std::max(code, WIFEXITED(c.status) ? WEXITSTATUS(c.status) : 1);
    return code;
  }
};

}  // namespace

int spawn_and_supervise(const Topology& t, const std::vector<std::string>& argv, const LaunchOptions& options) {
  if (pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
    raise<OperationalError>("cannot create a pipe: {}", std::strerror(errno));
  std::map<int, struct sigaction> previous;
  for (int s : kForwarded) {
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(s, &sa, &previous[s]);
  }
  const bool forked = fork_in_place(options);
  log::info("launcher", "starting {} worker processes ({}): {}", t.spawn, forked ? "forked" : "re-executed",
            t.describe());
  std::vector<Child> children =
      start_children(t, argv, options.prefix_output, forked ? options.rerun : std::function<int()>());
  Supervisor supervisor(children, options.grace_seconds);
  while (supervisor.busy()) {
    supervisor.relay();
    supervisor.reap();
  }
  for (int s : kForwarded) sigaction(s, &previous[s], nullptr);
  close(g_signal_pipe[0]);
  close(g_signal_pipe[1]);
  return supervisor.exit_code();
}

int launch(const Topology& t, const std::vector<std::string>& argv, const LaunchOptions& options,
           const WorkerBody& body) {
  if (t.spawn > 0) {
    log::info("distributed", "{}", t.describe());
    return spawn_and_supervise(t, argv, options);
  }
  // The start-up line names the interface that Gloo binds (the CPU's collectives go over it).
  SocketInterface socket;
  if (t.world_size > 1 && !c10::Device(t.device).is_cuda())
    socket = choose_socket_interface(t.master_addr, options.socket_ifname, gloo_socket_ifname_env(),
                                     t.local_world_size == t.world_size);
  log::info("distributed", "{}{}", t.describe(), socket.empty() ? "" : " " + socket.describe());
  std::shared_ptr<Gang> gang = distributed_init(t, options.timeout_seconds, options.backend, socket);
  return body(*gang);
}

}  // namespace fairseq_cpp::distributed
