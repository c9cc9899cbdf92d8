// Naming the lost ranks after a failed collective: beacons on loopback, one per simulated rank.
#include "fairseq_cpp/distributed/peer_beacon.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include <fmt/format.h>

namespace fairseq_cpp::distributed {
namespace {

TEST(PeerBeacon, AnsweringRanksAreNotLostAndAClosedOneIsGone) {
  std::vector<std::unique_ptr<PeerBeacon>> beacons;
  std::vector<std::string> endpoints;
  for (int r = 0; r < 4; ++r) {
    beacons.push_back(std::make_unique<PeerBeacon>("127.0.0.1"));
    endpoints.push_back(beacons.back()->endpoint());
  }
  EXPECT_EQ(beacons[0]->lost_peers(0, endpoints, 1.0), "");
  beacons[2].reset();  // rank 2's process is gone: its port refuses
  beacons[3].reset();
  EXPECT_EQ(beacons[0]->lost_peers(0, endpoints, 1.0), "ranks 2, 3 are gone (127.0.0.1 refused the connection)");
}

TEST(PeerBeacon, ARankThatToldUsItFailedIsNotLostAfterItExits) {
  // Rank 1 fails first, tells rank 0, and exits; rank 0 then sees rank 1 close its sockets, but
  // only rank 2 is lost.
  std::vector<std::unique_ptr<PeerBeacon>> beacons;
  std::vector<std::string> endpoints;
  for (int r = 0; r < 3; ++r) {
    beacons.push_back(std::make_unique<PeerBeacon>("127.0.0.1"));
    endpoints.push_back(beacons.back()->endpoint());
  }
  beacons[2].reset();
  EXPECT_EQ(beacons[1]->lost_peers(1, endpoints, 1.0), "rank 2 is gone (127.0.0.1 refused the connection)");
  beacons[1].reset();
  EXPECT_EQ(beacons[0]->lost_peers(0, endpoints, 1.0), "rank 2 is gone (127.0.0.1 refused the connection)");
}

TEST(PeerBeacon, AHostThatDoesNotAnswerIsUnreachable) {
  // A port whose accept queue is full drops new connects unanswered, as a cut link does.
  int full = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(sa);
  ASSERT_EQ(bind(full, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
  ASSERT_EQ(listen(full, 0), 0);
  ASSERT_EQ(getsockname(full, reinterpret_cast<sockaddr*>(&sa), &length), 0);
  std::vector<int> fillers;
  for (int i = 0; i < 4; ++i) {
    fillers.push_back(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0));
    connect(fillers.back(), reinterpret_cast<sockaddr*>(&sa), sizeof(sa));
  }
  usleep(100000);
  PeerBeacon mine("127.0.0.1");
  std::vector<std::string> endpoints{mine.endpoint(), fmt::format("127.0.0.1 {}", ntohs(sa.sin_port))};
  EXPECT_EQ(mine.lost_peers(0, endpoints, 0.5), "rank 1 is unreachable (no answer from 127.0.0.1 within 0.5 s)");
  for (int fd : fillers) close(fd);
  close(full);
}

TEST(PeerBeacon, AliveRanksBehindThisCollectiveOrSilentDidNotArrive) {
  // Rank 0 is in its 5th collective. Rank 1 answers from its 4th: it did not arrive. Rank 2 is in
  // the 5th too (waiting like rank 0): not named. Rank 3's port accepts connections (the kernel
  // does, for a stopped process) but nothing answers.
  std::vector<std::unique_ptr<PeerBeacon>> beacons;
  std::vector<std::string> endpoints;
  for (int r = 0; r < 3; ++r) {
    beacons.push_back(std::make_unique<PeerBeacon>("127.0.0.1"));
    endpoints.push_back(beacons.back()->endpoint());
  }
  beacons[0]->set_position(5, "all_reduce(max) (the stop vote; update 3 of epoch 1)");
  beacons[1]->set_position(4, "all-reduce of gradient bucket 2 of 2 (update 2 of epoch 1)");
  beacons[2]->set_position(5, "all_reduce(max) (the stop vote; update 3 of epoch 1)");
  int stopped = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(sa);
  ASSERT_EQ(bind(stopped, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
  ASSERT_EQ(listen(stopped, 8), 0);
  ASSERT_EQ(getsockname(stopped, reinterpret_cast<sockaddr*>(&sa), &length), 0);
  endpoints.push_back(fmt::format("127.0.0.1 {}", ntohs(sa.sin_port)));
  EXPECT_EQ(beacons[0]->lost_peers(0, endpoints, 0.5),
            "rank 1 did not arrive (it answers; its last collective, 4 of this rank's 5, was all-reduce of gradient "
            "bucket 2 of 2 (update 2 of epoch 1)); rank 3 did not arrive (its process accepts connections but says "
            "nothing within 0.5 s: stopped or hung)");
  // Once rank 1 catches up, only the silent one is left.
  beacons[1]->set_position(5, "all_reduce(max) (the stop vote; update 3 of epoch 1)");
  EXPECT_EQ(beacons[0]->lost_peers(0, endpoints, 0.5),
            "rank 3 did not arrive (its process accepts connections but says nothing within 0.5 s: stopped or hung)");
  close(stopped);
}

TEST(PeerBeacon, ItsOwnThreadDoesNotKeepAFailedRankWaitingOnABusyMachine) {
  // The beacon's thread waits for connections all the time. A failed rank's lost_peers() must not
  // wait for that thread to let go on a machine whose every core is busy (a CI run, a shared node):
  // it once held a lock while it waited and took it back at once, so the failed rank's report
  // waited up to 20 s behind it.
  std::atomic<bool> done{false};
  std::vector<std::thread> busy;
  for (unsigned i = 0; i < 3 * std::max(1u, std::thread::hardware_concurrency()); ++i)
    busy.emplace_back([&] {
      while (!done) {
      }
    });
  PeerBeacon mine("127.0.0.1");
  PeerBeacon other("127.0.0.1");
  std::vector<std::string> endpoints{mine.endpoint(), other.endpoint()};
  double slowest = 0;
  for (int i = 0; i < 6; ++i) {
    auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(mine.lost_peers(0, endpoints, 1.0), "");
    slowest = std::max(slowest, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  done = true;
  for (auto& t : busy) t.join();
  // Half a second of settling, then the other beacon answers at once; 1.5 s allows for the load.
  EXPECT_LT(slowest, 1.5);
}

}  // namespace
}  // namespace fairseq_cpp::distributed
