#include "fairseq_cpp/distributed/peer_beacon.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <chrono>
#include <cstring>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "fairseq_cpp/core/errors.h"

namespace fairseq_cpp::distributed {
namespace {

constexpr int kSettleMs = 500;
constexpr size_t kPositionBytes = 512;  // "at N WHAT\n", at most

// `address`:`port` as a socket address (numeric only).
bool to_sockaddr(const std::string& address, int port, sockaddr_storage& out, socklen_t& length) {
  addrinfo hints{};
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(address.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) return false;
  std::memcpy(&out, found->ai_addr, found->ai_addrlen);
  length = found->ai_addrlen;
  freeaddrinfo(found);
  return true;
}

std::string list(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += fmt::format("{}{}", out.empty() ? "" : ", ", r);
  return out;
}

std::string list(const std::set<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

// One peer's probe: a non-blocking connection to its beacon.
struct Probe {
  int rank;
  std::string address;
  int fd = -1;
  int error = EINPROGRESS;  // 0 once connected
};

// Starts a connection to every peer's beacon but `rank`'s (endpoints: "ADDRESS PORT" per rank).
std::vector<Probe> start_probes(int rank, const std::vector<std::string>& endpoints) {
  std::vector<Probe> probes;
  for (int r = 0; r < static_cast<int>(endpoints.size()); ++r) {
    if (r == rank) continue;
    std::istringstream in(endpoints[r]);
    Probe p{r, ""};
    int port = 0;
    sockaddr_storage sa{};
    socklen_t length = 0;
    if (!(in >> p.address >> port) || !to_sockaddr(p.address, port, sa, length)) continue;
    p.fd = socket(sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (p.fd < 0) continue;
    if (connect(p.fd, reinterpret_cast<sockaddr*>(&sa), length) == 0)
      p.error = 0;
    else
      p.error = errno;
    probes.push_back(p);
  }
  return probes;
}

// Polls the probes that `wanted` selects for `events` until none is left or `timeout_seconds`
// pass; `ready` handles each one that has an event.
template <class Wanted, class Ready>
void poll_probes(std::vector<Probe>& probes, short events, double timeout_seconds, Wanted wanted, Ready ready) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
  while (true) {
    std::vector<pollfd> fds;
    std::vector<Probe*> pending;
    for (auto& p : probes)
      if (wanted(p)) {
        fds.push_back({p.fd, events, 0});
        pending.push_back(&p);
      }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (fds.empty() || left.count() <= 0) break;
    if (poll(fds.data(), fds.size(), static_cast<int>(left.count())) <= 0) continue;
    for (size_t i = 0; i < fds.size(); ++i)
      if (fds[i].revents != 0) ready(*pending[i]);
  }
}

// Each connected peer's answer: "at N WHAT\n", at once (within `timeout_seconds`: a peer under
// load may take a moment to accept); "...\n" once it closed.
std::map<int, std::string> read_replies(std::vector<Probe>& probes, double timeout_seconds) {
  std::map<int, std::string> replies;
  const auto wanted = [&](const Probe& p) {
    const std::string& reply = replies[p.rank];
    return p.error == 0 && (reply.empty() || reply.back() != '\n') && reply.size() < kPositionBytes;
  };
  poll_probes(probes, POLLIN, timeout_seconds, wanted, [&](Probe& p) {
    char buffer[256];
    ssize_t n = read(p.fd, buffer, sizeof(buffer));
    std::string& reply = replies[p.rank];
    if (n > 0)
      reply.append(buffer, static_cast<size_t>(n));
    else
      reply += '\n';  // closed: whatever it said is all
  });
  return replies;
}

// Tells every connected peer that `rank` failed, and closes every probe.
void send_failed_notes(std::vector<Probe>& probes, int rank) {
  std::string note = fmt::format("failed {}\n", rank);
  for (auto& p : probes) {
    if (p.error == 0) {
      ssize_t written = write(p.fd, note.data(), note.size());
      (void)written;  // a peer that cannot take the note is alive all the same
    }
    close(p.fd);
  }
}

// The verdict's sentences in order: gone, unreachable, behind, silent.
std::string describe_lost(const std::vector<int>& gone, const std::set<std::string>& gone_at,
                          const std::vector<int>& unreachable, const std::set<std::string>& unreachable_at,
                          const std::vector<std::string>& behind, const std::vector<int>& silent,
                          double timeout_seconds) {
  std::string out;
  if (!gone.empty())
    out = fmt::format("{} {} {} gone ({} refused the connection)", gone.size() > 1 ? "ranks" : "rank", list(gone),
                      gone.size() > 1 ? "are" : "is", list(gone_at));
  if (!unreachable.empty())
    out += fmt::format("{}{} {} {} unreachable (no answer from {} within {:g} s)", out.empty() ? "" : "; ",
                       unreachable.size() > 1 ? "ranks" : "rank", list(unreachable),
                       unreachable.size() > 1 ? "are" : "is", list(unreachable_at), timeout_seconds);
  for (const auto& line : behind) out += (out.empty() ? "" : "; ") + line;
  if (!silent.empty())
    out += fmt::format("{}{} {} did not arrive ({} accept{} connections but say{} nothing within {:g} s: stopped or "
                       "hung)",
                       out.empty() ? "" : "; ", silent.size() > 1 ? "ranks" : "rank", list(silent),
                       silent.size() > 1 ? "their processes" : "its process", silent.size() > 1 ? "" : "s",
                       silent.size() > 1 ? "" : "s", timeout_seconds);
  return out;
}

}  // namespace

PeerBeacon::PeerBeacon(const std::string& address) : address_(address) {
  sockaddr_storage sa{};
  socklen_t length = 0;
  if (!to_sockaddr(address, 0, sa, length))
    raise<OperationalError>("peer beacon: `{}` is not a numeric address.", address);
  listen_fd_ = socket(sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0 || bind(listen_fd_, reinterpret_cast<sockaddr*>(&sa), length) != 0 ||
      listen(listen_fd_, 128) != 0 || getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&sa), &length) != 0) {
    int err = errno;
    if (listen_fd_ >= 0) close(listen_fd_);
    raise<OperationalError>("peer beacon: cannot listen on {}: {}", address, std::strerror(err));
  }
  port_ = ntohs(sa.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&sa)->sin_port
                                        : reinterpret_cast<sockaddr_in6*>(&sa)->sin6_port);
  thread_ = std::thread([this] { serve(); });
}

PeerBeacon::~PeerBeacon() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  close(listen_fd_);
}

std::string PeerBeacon::endpoint() const { return fmt::format("{} {}", address_, port_); }

void PeerBeacon::set_position(int64_t started, const std::string& what) {
  std::lock_guard<std::mutex> lock(position_mutex_);
  started_ = started;
  last_ = what;
}

void PeerBeacon::serve() {
  // Waits without the lock: lost_peers() takes it, and a thread that held it while waiting and took
  // it back at once kept a failed rank waiting for seconds on a busy machine.
  while (!stop_) {
    pollfd waiting{listen_fd_, POLLIN, 0};
    if (poll(&waiting, 1, 100) == 1) collect();
  }
}

void PeerBeacon::collect() {
  std::lock_guard<std::mutex> lock(mutex_);
  while (true) {
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) return;  // none left (the listening socket does not block), or the other thread took it
    // Where this rank stands, first: "at N WHAT" (one line; the newline in WHAT, if any, dropped).
    std::string position;
    {
      std::lock_guard<std::mutex> lock(position_mutex_);
      position = fmt::format("at {} {}", started_, last_.substr(0, kPositionBytes - 32));
    }
    std::replace(position.begin(), position.end(), '\n', ' ');
    position += '\n';
    ssize_t sent = send(fd, position.data(), position.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)sent;  // a prober that has gone does not need it
    // A note is one short line, written at once by a peer that failed; a connection without one
    // (a probe of a peer that has not failed) closes with nothing.
    std::string note;
    pollfd readable{fd, POLLIN, 0};
    char buffer[64];
    while (note.size() < 64 && poll(&readable, 1, 200) == 1) {
      ssize_t n = read(fd, buffer, sizeof(buffer));
      if (n <= 0) break;
      note.append(buffer, static_cast<size_t>(n));
      if (note.find('\n') != std::string::npos) break;
    }
    close(fd);
    int rank = -1;
    if (std::sscanf(note.c_str(), "failed %d", &rank) == 1 && rank >= 0) failed_.insert(rank);
  }
}

std::string PeerBeacon::lost_peers(int rank, const std::vector<std::string>& endpoints, double timeout_seconds) {
  // A peer killed together with the one that broke our collective may take a moment to lose its
  // sockets: probing at once would find it alive.
  std::this_thread::sleep_for(std::chrono::milliseconds(kSettleMs));
  std::vector<Probe> probes = start_probes(rank, endpoints);
  poll_probes(
      probes, POLLOUT, timeout_seconds, [](const Probe& p) { return p.error == EINPROGRESS; },
      [](Probe& p) {
        int error = 0;
        socklen_t size = sizeof(error);
        getsockopt(p.fd, SOL_SOCKET, SO_ERROR, &error, &size);
        p.error = error;
      });
  std::map<int, std::string> replies = read_replies(probes, timeout_seconds);
  send_failed_notes(probes, rank);
  // Peers that failed and told us so before they exited are not lost.
  collect();
  std::vector<int> gone, unreachable;
  std::set<std::string> gone_at, unreachable_at;
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& p : probes) {
    if (p.error == 0 || failed_.count(p.rank)) continue;
    bool refused = p.error == ECONNREFUSED;
    (refused ? gone : unreachable).push_back(p.rank);
    (refused ? gone_at : unreachable_at).insert(p.address);
  }
  // Alive but absent: behind this rank's collectives, or silent.
  int64_t mine = 0;
  {
    std::lock_guard<std::mutex> position_lock(position_mutex_);
    mine = started_;
  }
  std::vector<std::string> behind;
  std::vector<int> silent;
  for (const auto& p : probes) {
    if (p.error != 0 || failed_.count(p.rank)) continue;
    const std::string& reply = replies[p.rank];
    long long started = 0;
    int consumed = 0;
    if (std::sscanf(reply.c_str(), "at %lld %n", &started, &consumed) < 1 || reply.back() != '\n') {
      silent.push_back(p.rank);
    } else if (started < mine) {
      std::string what = reply.substr(static_cast<size_t>(consumed));
      what.pop_back();
      behind.push_back(fmt::format("rank {} did not arrive (it answers; its last collective, {} of this rank's {}, "
                                   "was {})",
                                   p.rank, started, mine, what.empty() ? "none" : what));
    }
  }
  return describe_lost(gone, gone_at, unreachable, unreachable_at, behind, silent, timeout_seconds);
}

}  // namespace fairseq_cpp::distributed
