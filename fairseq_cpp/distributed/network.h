#pragma once
// Which network interface a process's collectives use. Gloo binds the interface that routes to the
// master (loopback when every rank is on this host), unless the user names one with
// `distributed_training.socket_ifname` or, as PyTorch reads it, GLOO_SOCKET_IFNAME.
//
//   SocketInterface s = choose_socket_interface("fsqh0", cfg_ifname, env_ifname);
//   s.describe();  // "interface=fsqv1 (10.213.77.2, the route to the master 10.213.77.1)"

#include <string>
#include <vector>

namespace fairseq_cpp::distributed {

// The way from this host to another one, as the kernel's routing table says.
struct Route {
  std::string host;           // the name asked for ("fsqh0")
  std::string address;        // what it resolved to ("10.213.77.1"; IPv4 preferred)
  std::string interface;      // this host's interface the route leaves from ("fsqv1", "lo")
  std::string local_address;  // this host's address on that interface, the packets' source ("10.213.77.2")
};

// Resolves `host` and asks the kernel which interface and source address reach it (a connected
// UDP socket; nothing is sent). Throws OperationalError when the name does not resolve or no
// route reaches it.
Route route_to(const std::string& host);

// This host's interfaces that have an IPv4 or IPv6 address, in the kernel's order.
std::vector<std::string> interfaces_with_address();
// The first IPv4 or IPv6 address of interface `name` (the one Gloo binds); "" when it has none.
std::string interface_address(const std::string& name);

// What Gloo binds, and why.
struct SocketInterface {
  std::vector<std::string> interfaces;  // one Gloo device each (several: PyTorch's round-robin)
  std::string address;                  // when not empty, the device binds this address of interfaces[0]
  std::string reason;                   // "distributed_training.socket_ifname", "GLOO_SOCKET_IFNAME" or the route

  bool empty() const { return interfaces.empty(); }
  // The address the first device listens on ("" when unknown).
  std::string listen_address() const;
  // "interface=fsqv1 (10.213.77.2, the route to the master 10.213.77.1)"
  std::string describe() const;
};

// `configured` (distributed_training.socket_ifname) wins, then `env_ifname` (GLOO_SOCKET_IFNAME);
// both are one interface name or several separated by commas, and each must exist here with an
// address (UserError otherwise). With neither set: loopback when `every_rank_here` (the launcher
// put the whole job on this host), else the interface of the route to `master_addr`, bound at the
// route's source address.
SocketInterface choose_socket_interface(const std::string& master_addr, const std::string& configured,
                                        const std::string& env_ifname, bool every_rank_here = false);

// GLOO_SOCKET_IFNAME of this process ("" when unset).
std::string gloo_socket_ifname_env();

}  // namespace fairseq_cpp::distributed
