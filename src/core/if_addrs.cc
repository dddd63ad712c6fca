#include "core/if_addrs.h"

#include <ifaddrs.h>

#include <cerrno>
#include <cstring>

namespace tide {

Status listInterfaces(std::vector<NetInterface>* out) {
  out->clear();
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return errnoError(errno, "getifaddrs");
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    int fam = i->ifa_addr->sa_family;
    if (fam != AF_INET && fam != AF_INET6) continue;
    NetInterface n;
    n.name = i->ifa_name;
    n.family = fam;
    size_t len = fam == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    std::memcpy(&n.addr.ss, i->ifa_addr, len);
    n.addr.len = static_cast<socklen_t>(len);
    n.flags = i->ifa_flags;
    n.index = if_nametoindex(i->ifa_name);
    out->push_back(std::move(n));
  }
  freeifaddrs(list);
  return Status::Ok();
}

}  // namespace tide
