#pragma once
// Which ranks are lost when a collective fails. Gloo's message names one peer, often the wrong one:
// a surviving rank that gave up first closes its sockets, and the others then see it "close the
// connection". So every rank listens on a small TCP port of its own (the kernel answers connects;
// a thread reads notes), and after a failure a rank connects to every other rank's port: refused
// means the process is gone, no answer means its host is unreachable, and a connection leaves the
// note "rank R failed", so that the peer's own report leaves R out even after R has exited. A peer
// that answers tells first how many collectives it has started and what the last one was: one that
// has started fewer than we have did not arrive at ours, and one whose process accepts the
// connection but says nothing is stopped or hung.
//
//   PeerBeacon beacon("10.213.77.2");                  // when the gang forms
//   endpoints = all_gather(beacon.endpoint());         // "10.213.77.1 41234", one per rank
//   beacon.set_position(12, "all_reduce(max) (the stop vote; update 4 of epoch 1)");  // each collective
//   std::string lost = beacon.lost_peers(1, endpoints, 1.0);
//   // "ranks 2, 3 are gone (10.213.77.2 refused the connection)"

#include <atomic>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace fairseq_cpp::distributed {

class PeerBeacon {
 public:
  // Listens on `address` (numeric), on a port the kernel picks.
  explicit PeerBeacon(const std::string& address);
  ~PeerBeacon();
  PeerBeacon(const PeerBeacon&) = delete;
  PeerBeacon& operator=(const PeerBeacon&) = delete;

  // "ADDRESS PORT", for the other ranks.
  std::string endpoint() const;

  // This rank has started `started` collectives, the last one `what` (told to peers that ask).
  void set_position(int64_t started, const std::string& what);

  // After a failure on rank `rank`: waits half a second, connects to every other rank's endpoint at
  // once, for at most `timeout_seconds`, and tells each that answers that `rank` failed. Returns what is lost, e.g.
  // "ranks 2, 3 are gone (10.213.77.2 refused the connection)" or "rank 1 is unreachable (no answer
  // from 10.213.77.2 within 1 s)", and who is alive but absent: "rank 1 did not arrive (it answers;
  // its last collective, 11 of this rank's 12, was all_reduce(sum) (...))" or "rank 3 did not
  // arrive (its process accepts connections but says nothing within 1 s: stopped or hung)"; or ""
  // when every rank answers from this collective or told us it failed.
  std::string lost_peers(int rank, const std::vector<std::string>& endpoints, double timeout_seconds);

 private:
  void serve();
  // Accepts the connections that are waiting and records their notes.
  void collect();

  std::string address_;
  int port_ = 0;
  int listen_fd_ = -1;
  std::mutex mutex_;      // guards collect() and failed_ (never held while waiting for a connection)
  std::set<int> failed_;  // ranks that told us they failed
  std::mutex position_mutex_;  // guards the two below (never held while waiting)
  int64_t started_ = 0;        // collectives this rank has started
  std::string last_;           // the last one
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace fairseq_cpp::distributed
