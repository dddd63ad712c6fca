// Interface selection (TIDE_SOCKET_IFNAME), stripe arithmetic and the stripe
// header's wire form of the socket net.
#include <arpa/inet.h>
#include <endian.h>
#include <ifaddrs.h>
#include <limits.h>
#include <net/if.h>
#include <stdlib.h>

#include <cstring>
#include <fstream>

#include "transports/socket/socket_net.h"

namespace tide {
namespace {

constexpr uint64_t kMinStripe = 64 << 10;
constexpr uint64_t kStripeAlign = 4096;
// A stripe's length travels in 32 bits (SocketStripeHeader::len).
constexpr uint64_t kMaxStripe = uint64_t{1} << 30;

int readSpeed(const std::string& ifname) {
  std::ifstream f("/sys/class/net/" + ifname + "/speed");
  int v = 0;
  if (!(f >> v) || v < 0) return 0;
  return v;
}

std::string pciPathOf(const std::string& ifname) {
  std::string link = "/sys/class/net/" + ifname + "/device";
  char buf[PATH_MAX];
  if (realpath(link.c_str(), buf) == nullptr) return "";
  return buf;
}

bool linkLocal6(const sockaddr* a) {
  auto* a6 = reinterpret_cast<const sockaddr_in6*>(a);
  return IN6_IS_ADDR_LINKLOCAL(&a6->sin6_addr);
}

}  // namespace

bool socketIfnameMatches(const std::string& filter, const std::string& name) {
  std::string f = filter;
  bool exclude = false, exact = false;
  if (!f.empty() && f[0] == '^') exclude = true, f.erase(0, 1);
  if (!f.empty() && f[0] == '=') exact = true, f.erase(0, 1);
  bool hit = false;
  size_t pos = 0;
  while (!hit && pos <= f.size()) {
    size_t comma = f.find(',', pos);
    std::string item = f.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    if (!item.empty()) hit = exact ? item == name : name.compare(0, item.size(), item) == 0;
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return exclude ? !hit : hit;
}

std::vector<SocketDevice> findSocketDevices(const std::string& filter, int family) {
  std::vector<SocketDevice> out, loop;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  const bool user = !filter.empty();
  const std::string f = user ? filter : "^docker,virbr";
  // Per interface name: the first address of the wanted family (IPv4 first
  // when none is asked for).
  for (int pass = 0; pass < 2; ++pass) {
    int fam = family != AF_UNSPEC ? family : (pass == 0 ? AF_INET : AF_INET6);
    if (family != AF_UNSPEC && pass == 1) break;
    for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
      if (i->ifa_addr == nullptr || !(i->ifa_flags & IFF_UP)) continue;
      if (i->ifa_addr->sa_family != fam) continue;
      if (fam == AF_INET6 && linkLocal6(i->ifa_addr)) continue;
      std::string name = i->ifa_name;
      if (!socketIfnameMatches(f, name)) continue;
      bool isLoop = (i->ifa_flags & IFF_LOOPBACK) != 0;
      std::vector<SocketDevice>& dst = (isLoop && !user) ? loop : out;
      bool seen = false;
      for (const SocketDevice& d : dst) seen |= d.ifname == name;
      if (seen) continue;
      SocketDevice d;
      d.ifname = name;
      size_t len = fam == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
      std::memcpy(&d.addr.ss, i->ifa_addr, len);
      d.addr.len = static_cast<socklen_t>(len);
      d.addr.setPort(0);
      d.speedMbps = readSpeed(name);
      d.pciPath = pciPathOf(name);
      dst.push_back(d);
    }
  }
  freeifaddrs(list);
  return out.empty() ? loop : out;
}

void socketStripes(uint64_t total, int nsocks, int* count, uint64_t* stripeBytes) {
  if (total <= kMaxStripe && (nsocks <= 1 || total < 2 * kMinStripe)) {
    *count = 1;
    *stripeBytes = total;
    return;
  }
  uint64_t n = std::min<uint64_t>(static_cast<uint64_t>(std::max(nsocks, 1)), total / kMinStripe);
  n = std::max(n, (total + kMaxStripe - 1) / kMaxStripe);  // more stripes than sockets
  uint64_t per = (total + n - 1) / n;
  per = (per + kStripeAlign - 1) / kStripeAlign * kStripeAlign;
  *count = static_cast<int>((total + per - 1) / per);
  *stripeBytes = per;
}

void encodeStripeHeader(const SocketStripeHeader& h, uint8_t* out) {
  uint32_t w32[2] = {htole32(h.magic), htole32(h.seq)};
  uint64_t w64[2] = {htole64(h.total), htole64(h.offset)};
  uint32_t t32[2] = {htole32(h.len), htole32(static_cast<uint32_t>(h.tag))};
  std::memcpy(out, w32, 8);
  std::memcpy(out + 8, w64, 16);
  std::memcpy(out + 24, t32, 8);
}

SocketStripeHeader decodeStripeHeader(const uint8_t* in) {
  uint32_t w32[2], t32[2];
  uint64_t w64[2];
  std::memcpy(w32, in, 8);
  std::memcpy(w64, in + 8, 16);
  std::memcpy(t32, in + 24, 8);
  return SocketStripeHeader{le32toh(w32[0]), le32toh(w32[1]),
                            le64toh(w64[0]), le64toh(w64[1]),
                            le32toh(t32[0]), static_cast<int32_t>(le32toh(t32[1]))};
}

}  // namespace tide
