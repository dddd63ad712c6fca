// The verbs net ("ib"): init, devices, properties, the per-port device
// objects and the tideNet_v1_t table (design in ib_net_internal.h).
//
// Without an RDMA device init() fails at once with a message naming what is
// missing, so TIDE_NET=ib fails fast. UNVERIFIED ON HARDWARE.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/device/device_stream_gdr.h"
#include "core/log.h"
#include "core/registry.h"
#include "transports/ib/ib_net_internal.h"
#include "transports/net/net_registry.h"

namespace tide {
namespace ibnet {
namespace {

struct Global {
  std::mutex mu;
  bool inited = false;
  tideResult_t result = tideSuccess;
  std::string why;
  std::vector<IbPortInfo> ports;
  std::vector<std::string> names;
  std::vector<std::unique_ptr<Device>> devices;  // by port, opened on first use
  bool peerMem = false;
  bool dmaBuf = false;  // a GPU here exports dma-bufs (ibv_reg_dmabuf_mr is linked)
};

Global& global() {
  static Global* g = new Global;  // never destroyed: comms may outlive static destructors
  return *g;
}

// GPU memory can be registered with ibv_reg_mr when a peer-memory client is
// loaded (nvidia-peermem, or the older nv_peer_mem).
bool peerMemoryLoaded() {
  struct stat st;
  return stat("/sys/module/nvidia_peermem", &st) == 0 ||
         stat("/sys/kernel/mm/memory_peers/nv_mem/version", &st) == 0;
}

tideResult_t netInit(tideNetLogger_t /*logger*/) {
  Global& g = global();
  std::lock_guard<std::mutex> lock(g.mu);
  if (g.inited) {
    if (g.result != tideSuccess) setNetErrorDetail(g.why);
    return g.result;
  }
  g.inited = true;
  Status s = ibFindPorts(&g.ports);
  if (!s.ok()) {
    TIDE_WARN("%s", s.message().c_str());
    g.why = s.message();
    setNetErrorDetail(g.why);
    return g.result = s.code();
  }
  for (const IbPortInfo& p : g.ports) {
    g.names.push_back(p.device + ":" + std::to_string(p.port));
    g.devices.emplace_back();
    TIDE_INFO("ib net: %s:%d %s, GID index %d, %d Mbit/s", p.device.c_str(), p.port,
              p.linkLayer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand", p.gidIndex,
              p.speedMbps);
  }
  g.peerMem = peerMemoryLoaded();
  // Asks the core once (which probes CUDA only on hosts with the NVIDIA
  // kernel driver, so a host-only job elsewhere never initializes CUDA). rdma-core has
  // ibv_reg_dmabuf_mr since v34 (this file links against it); a kernel or HCA without dma-buf
  // support fails the registration, and the net transport then falls back to peer memory when
  // offered.
  g.dmaBuf = devstream::dmaBufExportSupported();
  if (g.peerMem || g.dmaBuf) {
    TIDE_INFO("ib net: GPU memory registration through %s%s%s", g.dmaBuf ? "dma-buf" : "",
              g.dmaBuf && g.peerMem ? " and " : "", g.peerMem ? "peer memory" : "");
  }
  return tideSuccess;
}

tideResult_t netDevices(int* ndev) {
  Global& g = global();
  std::lock_guard<std::mutex> lock(g.mu);
  *ndev = g.result == tideSuccess ? static_cast<int>(g.ports.size()) : 0;
  return tideSuccess;
}

tideResult_t netGetProperties(int dev, tideNetProperties_v1_t* props) {
  Global& g = global();
  if (props == nullptr || dev < 0 || dev >= numDevices())
    return fail(invalidArgument("ib net: no device %d", dev));
  const IbPortInfo& p = g.ports[dev];
  memset(props, 0, sizeof(*props));
  props->name = g.names[dev].c_str();
  props->pciPath = p.pciPath.empty() ? nullptr : p.pciPath.c_str();
  props->guid = p.guid;
  // GPU memory through peer memory (regMr type DEVICE) and/or dma-buf (type
  // DMABUF: the net asks the core for the fd, tideNetDmaBufFd).
  props->ptrSupport = TIDE_NET_PTR_HOST | (g.peerMem ? TIDE_NET_PTR_DEVICE : 0) |
                      (g.dmaBuf ? TIDE_NET_PTR_DMABUF : 0);
  props->speed = p.speedMbps;
  props->port = p.port;
  props->latency = 0;
  props->maxComms = 65536;
  props->maxRecvs = 1;
  props->maxSize = kMaxMessage;
  return tideSuccess;
}

}  // namespace

int numDevices() {
  Global& g = global();
  std::lock_guard<std::mutex> lock(g.mu);
  return g.result == tideSuccess ? static_cast<int>(g.ports.size()) : 0;
}

const IbPortInfo& portInfo(int dev) { return global().ports[dev]; }

Status getDevice(int dev, Device** out) {
  Global& g = global();
  std::lock_guard<std::mutex> lock(g.mu);
  if (!g.inited || g.result != tideSuccess || dev < 0 || dev >= static_cast<int>(g.ports.size()))
    return invalidArgument("ib net: no device %d (init() not called or failed)", dev);
  if (g.devices[dev] && g.devices[dev]->pid != getpid()) {
    // Inherited through fork(): verbs objects of the parent are unusable
    // here and must not be destroyed from the child either; leave them.
    (void)g.devices[dev].release();
  }
  if (!g.devices[dev]) {
    auto d = std::make_unique<Device>();
    d->pid = getpid();
    TIDE_TRY(IbDevice::open(g.ports[dev], &d->dev));
    IbDevice* raw = d->dev;
    d->cache = std::make_unique<MrCache>(
        [raw](uintptr_t base, size_t len, void** handle) {
          ibv_mr* mr = nullptr;
          TIDE_TRY(ibRegMr(raw, reinterpret_cast<void*>(base), len, -1, 0, &mr));
          *handle = mr;
          return Status::Ok();
        },
        [](void* handle) { ibv_dereg_mr(static_cast<ibv_mr*>(handle)); },
        static_cast<size_t>(std::max<int64_t>(knobInt(Knob::IbMrCacheEntries), 1)), 0);
    g.devices[dev] = std::move(d);
  }
  *out = g.devices[dev].get();
  return Status::Ok();
}

tideResult_t fail(const Status& s) {
  TIDE_INFO("%s", s.message().c_str());
  setNetErrorDetail(s.message());
  return s.code();
}

}  // namespace ibnet

using namespace ibnet;  // NOLINT: the table below names this net's functions

extern const tideNet_v1_t kIbNet;
const tideNet_v1_t kIbNet = {
    "ib",         netInit,  netDevices, netGetProperties, netListen, netConnect,
    netAccept,    netRegMr, netDeregMr, netIsend,         netIrecv,  netTest,
    netGetPollFd, netClose, netClose,   netCloseListen,
};

TIDE_ON_LOAD(registerNet(&kIbNet));

}  // namespace tide
