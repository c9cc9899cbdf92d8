// The interface Gloo binds on this host: the route to a loopback master is loopback, a named
// interface wins over the route, and bad names are user errors that list what exists. The same
// choice between two hosts in network namespaces is tested in multinode_test.cpp.
#include "fairseq_cpp/distributed/network.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "fairseq_cpp/core/errors.h"

namespace fairseq_cpp::distributed {
namespace {

bool has_loopback() {
  auto names = interfaces_with_address();
  return std::find(names.begin(), names.end(), "lo") != names.end();
}

TEST(Network, TheRouteToALoopbackMasterIsLoopback) {
  ASSERT_TRUE(has_loopback()) << "this host's interfaces have no `lo` with an address";
  Route r = route_to("127.0.0.1");
  EXPECT_EQ(r.interface, "lo");
  EXPECT_EQ(r.address, "127.0.0.1");
  EXPECT_EQ(r.local_address, "127.0.0.1");
  Route named = route_to("localhost");
  EXPECT_EQ(named.interface, "lo");
  EXPECT_EQ(named.address, "127.0.0.1");  // IPv4 first, as the store's client
}

TEST(Network, OneHostBindsLoopbackOnly) {
  SocketInterface s = choose_socket_interface("127.0.0.1", "", "");
  EXPECT_EQ(s.interfaces, std::vector<std::string>{"lo"});
  EXPECT_EQ(s.address, "127.0.0.1");
  EXPECT_EQ(s.describe(), "interface=lo (127.0.0.1, the route to the master 127.0.0.1)");
  EXPECT_EQ(choose_socket_interface("localhost", "", "").describe(),
            "interface=lo (127.0.0.1, the route to the master localhost 127.0.0.1)");
}

TEST(Network, AJobOnThisHostBindsLoopbackWhateverTheMasterResolvesTo) {
  // torchrun --standalone names the master by this host's name, which may resolve to its LAN address.
  SocketInterface s = choose_socket_interface("no-such-host.invalid", "", "", true);
  EXPECT_EQ(s.describe(), "interface=lo (127.0.0.1, every rank runs on this host)");
  EXPECT_EQ(choose_socket_interface("127.0.0.1", "lo", "", true).describe(),
            "interface=lo (distributed_training.socket_ifname)");
}

TEST(Network, TheConfigKeyWinsOverTheEnvironmentAndTheRoute) {
  SocketInterface s = choose_socket_interface("127.0.0.1", "lo", "no-such-if0");
  EXPECT_EQ(s.interfaces, std::vector<std::string>{"lo"});
  EXPECT_EQ(s.address, "");  // an interface by name: Gloo takes its address
  EXPECT_EQ(s.describe(), "interface=lo (distributed_training.socket_ifname)");
  // A master that does not even resolve: the named interface needs no route.
  EXPECT_EQ(choose_socket_interface("no-such-host.invalid", "lo", "").interfaces, std::vector<std::string>{"lo"});
}

TEST(Network, GlooSocketIfnameListsInterfacesAsPyTorchReadsIt) {
  SocketInterface s = choose_socket_interface("127.0.0.1", "", "lo,lo");
  EXPECT_EQ(s.interfaces, (std::vector<std::string>{"lo", "lo"}));
  EXPECT_EQ(s.describe(), "interface=lo,lo (GLOO_SOCKET_IFNAME)");
}

TEST(Network, UnknownOrEmptyNamesAreUserErrorsThatListTheInterfaces) {
  try {
    choose_socket_interface("127.0.0.1", "no-such-if0", "");
    FAIL() << "no error";
  } catch (const UserError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("`distributed_training.socket_ifname` names the network interface `no-such-if0`"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("(it has: lo"), std::string::npos) << m;
  }
  try {
    choose_socket_interface("127.0.0.1", "", "lo,");
    FAIL() << "no error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("GLOO_SOCKET_IFNAME is \"lo,\": an empty interface name"), std::string::npos)
        << e.what();
  }
}

TEST(Network, AMasterThatDoesNotResolveIsAnOperationalError) {
  try {
    choose_socket_interface("no-such-host.invalid", "", "");
    FAIL() << "no error";
  } catch (const UserError&) {
    FAIL() << "a name that does not resolve (DNS down, a typo) is reported as operational";
  } catch (const OperationalError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot resolve the master address `no-such-host.invalid`"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace fairseq_cpp::distributed
