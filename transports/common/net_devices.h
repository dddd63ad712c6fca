// The network interfaces a net may use (TIDE_SOCKET_IFNAME): the socket net's
// devices, and the set-up side channel of the ucx and ib nets (the first
// one). Built on the core's one interface walk (core/if_addrs.h) and name
// filter (core/if_filter.h).
#pragma once

#include <string>
#include <vector>

#include "core/socket.h"

namespace tide {

struct NetDevice {
  std::string ifname;
  SockAddr addr;  // port 0
  int speedMbps = 0;
  std::string pciPath;  // "" when not a PCI device
};

// Interfaces that are up and match `filter` (empty: all but lo, docker*,
// virbr*; loopback only when nothing else exists), one address each:
// family AF_INET or AF_INET6 as asked, else IPv4 preferred (no IPv6
// link-local addresses). Order of getifaddrs(); empty when it fails.
std::vector<NetDevice> findNetDevices(const std::string& filter, int family);

// Link speed of an interface from /sys/class/net/<ifname>/speed, 0 when
// unknown.
int linkSpeedMbps(const std::string& ifname);

}  // namespace tide
