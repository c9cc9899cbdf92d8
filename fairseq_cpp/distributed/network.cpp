#include "fairseq_cpp/distributed/network.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "fairseq_cpp/core/errors.h"

namespace fairseq_cpp::distributed {
namespace {

// The numeric text of an IPv4 or IPv6 socket address ("10.213.77.1", "fe80::1").
std::string numeric(const sockaddr* sa) {
  char text[INET6_ADDRSTRLEN] = {0};
  if (sa->sa_family == AF_INET)
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, text, sizeof(text));
  else if (sa->sa_family == AF_INET6)
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, text, sizeof(text));
  return text;
}

bool same_address(const sockaddr* a, const sockaddr* b) {
  if (a->sa_family != b->sa_family) return false;
  if (a->sa_family == AF_INET)
    return reinterpret_cast<const sockaddr_in*>(a)->sin_addr.s_addr ==
           reinterpret_cast<const sockaddr_in*>(b)->sin_addr.s_addr;
  if (a->sa_family == AF_INET6)
    return std::memcmp(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr,
                       &reinterpret_cast<const sockaddr_in6*>(b)->sin6_addr, sizeof(in6_addr)) == 0;
  return false;
}

using IfAddrs = std::unique_ptr<ifaddrs, void (*)(ifaddrs*)>;

IfAddrs list_interfaces() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0)
    raise<OperationalError>("cannot list this host's network interfaces: {}", std::strerror(errno));
  return IfAddrs(list, freeifaddrs);
}

bool has_ip(const ifaddrs* i) {
  return i->ifa_addr != nullptr && (i->ifa_addr->sa_family == AF_INET || i->ifa_addr->sa_family == AF_INET6);
}

// "fsqv0,fsqv1" -> {fsqv0, fsqv1}, each checked against this host's interfaces.
std::vector<std::string> named_interfaces(const std::string& list, const std::string& what) {
  std::vector<std::string> names;
  size_t start = 0;
  while (true) {
    size_t comma = list.find(',', start);
    names.push_back(list.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  std::vector<std::string> here = interfaces_with_address();
  for (const auto& name : names) {
    if (name.empty())
      raise<UserError>("{} is \"{}\": an empty interface name; give one name, or several separated by commas.", what,
                       list);
    if (std::find(here.begin(), here.end(), name) == here.end())
      raise<UserError>(
          "{} names the network interface `{}`, but this host has no interface of that name with an "
          "address (it has: {}).",
          what, name, fmt::join(here, ", "));
  }
  return names;
}

}  // namespace

Route route_to(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  int rc = getaddrinfo(host.c_str(), "9", &hints, &found);
  if (rc != 0) raise<OperationalError>("cannot resolve the master address `{}`: {}", host, gai_strerror(rc));
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> owner(found, freeaddrinfo);
  // IPv4 first, as the TCPStore's client tries it first too.
  const addrinfo* pick = found;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next)
    if (a->ai_family == AF_INET) {
      pick = a;
      break;
    }
  Route route;
  route.host = host;
  route.address = numeric(pick->ai_addr);
  int fd = socket(pick->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) raise<OperationalError>("cannot open a socket to find the route to `{}`: {}", host, std::strerror(errno));
  sockaddr_storage local{};
  socklen_t length = sizeof(local);
  // connect() on a UDP socket only picks the route and the source address.
  if (connect(fd, pick->ai_addr, pick->ai_addrlen) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) != 0) {
    int err = errno;
    close(fd);
    raise<OperationalError>("no route from this host to the master `{}` ({}): {}", host, route.address,
                            std::strerror(err));
  }
  close(fd);
  route.local_address = numeric(reinterpret_cast<const sockaddr*>(&local));
  IfAddrs interfaces = list_interfaces();
  for (const ifaddrs* i = interfaces.get(); i != nullptr; i = i->ifa_next) {
    if (has_ip(i) && same_address(i->ifa_addr, reinterpret_cast<const sockaddr*>(&local))) {
      route.interface = i->ifa_name;
      break;
    }
  }
  if (route.interface.empty())
    raise<OperationalError>("the route to the master `{}` ({}) leaves from {}, which no interface of this host has.",
                            host, route.address, route.local_address);
  return route;
}

std::vector<std::string> interfaces_with_address() {
  std::vector<std::string> names;
  IfAddrs interfaces = list_interfaces();
  for (const ifaddrs* i = interfaces.get(); i != nullptr; i = i->ifa_next)
    if (has_ip(i) && std::find(names.begin(), names.end(), i->ifa_name) == names.end()) names.emplace_back(i->ifa_name);
  return names;
}

std::string interface_address(const std::string& name) {
  IfAddrs interfaces = list_interfaces();
  for (const ifaddrs* i = interfaces.get(); i != nullptr; i = i->ifa_next)
    if (has_ip(i) && name == i->ifa_name) return numeric(i->ifa_addr);
  return "";
}

std::string SocketInterface::listen_address() const {
  if (!address.empty()) return address;
  return interfaces.empty() ? "" : interface_address(interfaces[0]);
}

std::string SocketInterface::describe() const {
  std::string names;
  for (const auto& name : interfaces) names += (names.empty() ? "" : ",") + name;
  if (!address.empty()) return fmt::format("interface={} ({}, {})", names, address, reason);
  return fmt::format("interface={} ({})", names, reason);
}

SocketInterface choose_socket_interface(const std::string& master_addr, const std::string& configured,
                                        const std::string& env_ifname, bool every_rank_here) {
  SocketInterface chosen;
  if (!configured.empty()) {
    chosen.interfaces = named_interfaces(configured, "`distributed_training.socket_ifname`");
    chosen.reason = "distributed_training.socket_ifname";
    return chosen;
  }
  if (!env_ifname.empty()) {
    chosen.interfaces = named_interfaces(env_ifname, "GLOO_SOCKET_IFNAME");
    chosen.reason = "GLOO_SOCKET_IFNAME";
    return chosen;
  }
  // The route from one host to itself: loopback (or the master's name, should it resolve to another
  // address of this host).
  Route route = route_to(every_rank_here ? "127.0.0.1" : master_addr);
  if (every_rank_here) {
    chosen.interfaces = {route.interface};
    chosen.address = route.local_address;
    chosen.reason = "every rank runs on this host";
    return chosen;
  }
  chosen.interfaces = {route.interface};
  chosen.address = route.local_address;
  chosen.reason = route.address == master_addr
                      ? fmt::format("the route to the master {}", route.address)
                      : fmt::format("the route to the master {} {}", master_addr, route.address);
  return chosen;
}

std::string gloo_socket_ifname_env() {
  const char* value = std::getenv("GLOO_SOCKET_IFNAME");
  return value == nullptr ? "" : value;
}

}  // namespace fairseq_cpp::distributed
