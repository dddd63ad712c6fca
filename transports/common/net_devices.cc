#include "transports/common/net_devices.h"

#include <limits.h>
#include <stdlib.h>
#include <sys/socket.h>

#include <fstream>

#include "core/if_addrs.h"
#include "core/if_filter.h"

namespace tide {
namespace {

std::string pciPathOf(const std::string& ifname) {
  std::string link = "/sys/class/net/" + ifname + "/device";
  char buf[PATH_MAX];
  if (realpath(link.c_str(), buf) == nullptr) return "";
  return buf;
}

}  // namespace

int linkSpeedMbps(const std::string& ifname) {
  std::ifstream f("/sys/class/net/" + ifname + "/speed");
  int v = 0;
  if (!(f >> v) || v < 0) return 0;
  return v;
}

std::vector<NetDevice> findNetDevices(const std::string& filter, int family) {
  std::vector<NetDevice> out, loop;
  std::vector<NetInterface> ifs;
  if (!listInterfaces(&ifs).ok()) return out;
  const bool user = !filter.empty();
  const std::string f = user ? filter : "^docker,virbr";
  // Per interface name: the first address of the wanted family (IPv4 first
  // when none is asked for).
  for (int pass = 0; pass < 2; ++pass) {
    int fam = family != AF_UNSPEC ? family : (pass == 0 ? AF_INET : AF_INET6);
    if (family != AF_UNSPEC && pass == 1) break;
    for (const NetInterface& i : ifs) {
      if (!i.up() || i.family != fam || i.linkLocal6()) continue;
      if (!interfaceNameMatches(f, i.name)) continue;
      std::vector<NetDevice>& dst = (i.loopback() && !user) ? loop : out;
      bool seen = false;
      for (const NetDevice& d : dst) seen |= d.ifname == i.name;
      if (seen) continue;
      NetDevice d;
      d.ifname = i.name;
      d.addr = i.addr;
      d.addr.setPort(0);
      d.speedMbps = linkSpeedMbps(i.name);
      d.pciPath = pciPathOf(i.name);
      dst.push_back(d);
    }
  }
  return out.empty() ? loop : out;
}

}  // namespace tide
