// The socket net's devices: the interfaces that match TIDE_SOCKET_IFNAME (and
// TIDE_SOCKET_FAMILY), found once per process (transports/common/net_devices.h),
// and their properties.
#include <sys/socket.h>

#include <mutex>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/log.h"
#include "transports/socket/socket_internal.h"

namespace tide {
namespace socknet {
namespace {

std::vector<NetDevice>* gDevices = nullptr;
std::once_flag gInitOnce;

}  // namespace

tideResult_t netInit(tideNetLogger_t) {
  std::call_once(gInitOnce, [] {
    std::string fam = knobString(Knob::SocketFamily);
    int family = AF_UNSPEC;
    if (fam == "AF_INET" || fam == "4") family = AF_INET;
    if (fam == "AF_INET6" || fam == "6") family = AF_INET6;
    gDevices = new std::vector<NetDevice>(findNetDevices(knobString(Knob::SocketIfname), family));
    for (const NetDevice& d : *gDevices)
      TIDE_INFO("socket net: device %s %s", d.ifname.c_str(), d.addr.hostStr().c_str());
  });
  if (gDevices->empty()) {
    return fail(tideSystemError, "no network interface matches TIDE_SOCKET_IFNAME=\"%s\"%s",
                knobString(Knob::SocketIfname).c_str(),
                knobIsSet(Knob::SocketFamily) ? " and TIDE_SOCKET_FAMILY" : "");
  }
  return tideSuccess;
}

tideResult_t netDevices(int* n) {
  if (gDevices == nullptr) return fail(tideInvalidUsage, "devices() before init()");
  *n = static_cast<int>(gDevices->size());
  return tideSuccess;
}

const NetDevice* socketDevice(int dev) {
  if (gDevices == nullptr || dev < 0 || dev >= static_cast<int>(gDevices->size())) return nullptr;
  return &(*gDevices)[dev];
}

tideResult_t netGetProperties(int dev, tideNetProperties_v1_t* p) {
  const NetDevice* d = socketDevice(dev);
  if (d == nullptr || p == nullptr) return fail(tideInvalidArgument, "bad device %d", dev);
  *p = tideNetProperties_v1_t{};
  p->name = d->ifname.c_str();
  p->pciPath = d->pciPath.empty() ? nullptr : d->pciPath.c_str();
  p->ptrSupport = TIDE_NET_PTR_HOST;
  p->speed = d->speedMbps;
  p->latency = 0;
  p->maxComms = 65536;
  p->maxRecvs = 1;
  p->maxSize = size_t{1} << 30;
  return tideSuccess;
}

}  // namespace socknet
}  // namespace tide
