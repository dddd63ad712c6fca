// The one walk over the node's interface addresses (getifaddrs): the
// bootstrap, tideCommInitFromEnv and the nets' device lists
// (transports/common/net_devices.h) all choose from this list.
#pragma once

#include <net/if.h>
#include <netinet/in.h>

#include <string>
#include <vector>

#include "core/socket.h"
#include "core/status.h"

namespace tide {

struct NetInterface {
  std::string name;    // "eth0", "lo", ...
  int family = 0;      // AF_INET or AF_INET6
  SockAddr addr;       // the address as listed (port 0), len of its family
  unsigned flags = 0;  // IFF_* of the interface
  unsigned index = 0;  // if_nametoindex(name); 0 when it has none

  bool up() const { return (flags & IFF_UP) != 0; }
  bool loopback() const { return (flags & IFF_LOOPBACK) != 0; }
  // An IPv6 link-local address (fe80::/10): not reachable without a scope.
  bool linkLocal6() const {
    return family == AF_INET6 &&
           IN6_IS_ADDR_LINKLOCAL(&reinterpret_cast<const sockaddr_in6*>(&addr.ss)->sin6_addr);
  }
};

// Every IPv4 and IPv6 address getifaddrs() lists, in its order (interfaces
// that are down included: callers check up()). An interface appears once per
// address. errnoError when getifaddrs fails.
Status listInterfaces(std::vector<NetInterface>* out);

}  // namespace tide
