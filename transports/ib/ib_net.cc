// The verbs net ("ib"): device selection and properties over ib_verbs.h.
//
// STATUS: init/devices/getProperties are complete (TIDE_IB_HCA,
// TIDE_IB_GID_INDEX); without an RDMA device init() fails at once with a
// message naming what is missing, so TIDE_NET=ib fails fast. The connection
// and data functions (QP handshake, CTS credits, striped RDMA writes with
// immediate, see ib_logic.h) are not wired to verbs yet: they return
// tideInternalError saying so. Unverified on hardware.
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "core/log.h"
#include "core/registry.h"
#include "transports/ib/ib_verbs.h"
#include "transports/net/net_registry.h"

namespace tide {
namespace {

struct IbGlobal {
  std::mutex mu;
  bool inited = false;
  tideResult_t result = tideSuccess;
  std::vector<IbPortInfo> ports;
  std::vector<std::string> names;
};

IbGlobal& ibGlobal() {
  static IbGlobal* g = new IbGlobal;
  return *g;
}

tideResult_t ibInit(tideNetLogger_t /*logger*/) {
  IbGlobal& g = ibGlobal();
  std::lock_guard<std::mutex> lock(g.mu);
  if (g.inited) return g.result;
  g.inited = true;
  Status s = ibFindPorts(&g.ports);
  if (!s.ok()) {
    TIDE_WARN("%s", s.message().c_str());
    return g.result = s.code();
  }
  for (const IbPortInfo& p : g.ports) g.names.push_back(p.device + ":" + std::to_string(p.port));
  return tideSuccess;
}

tideResult_t ibDevices(int* ndev) {
  IbGlobal& g = ibGlobal();
  std::lock_guard<std::mutex> lock(g.mu);
  *ndev = g.result == tideSuccess ? static_cast<int>(g.ports.size()) : 0;
  return tideSuccess;
}

tideResult_t ibGetProperties(int dev, tideNetProperties_v1_t* props) {
  IbGlobal& g = ibGlobal();
  if (dev < 0 || dev >= static_cast<int>(g.ports.size())) return tideInvalidArgument;
  const IbPortInfo& p = g.ports[dev];
  memset(props, 0, sizeof(*props));
  props->name = g.names[dev].c_str();
  props->pciPath = p.pciPath.empty() ? nullptr : p.pciPath.c_str();
  props->guid = p.guid;
  props->ptrSupport = TIDE_NET_PTR_HOST | TIDE_NET_PTR_DMABUF;
  props->speed = p.speedMbps;
  props->port = p.port;
  props->latency = 0;
  props->maxComms = 65536;
  props->maxRecvs = 1;
  props->maxSize = size_t{1} << 30;
  return tideSuccess;
}

tideResult_t notWired(const char* what) {
  TIDE_WARN("ib net: %s: the verbs data path is not implemented in this build", what);
  return tideInternalError;
}

tideResult_t ibListen(int, void*, void**) { return notWired("listen"); }
tideResult_t ibConnect(int, void*, void** c) {
  *c = nullptr;
  return notWired("connect");
}
tideResult_t ibAccept(void*, void** c) {
  *c = nullptr;
  return notWired("accept");
}
tideResult_t ibRegMr(void*, void*, size_t, int, void** m) {
  *m = nullptr;
  return notWired("regMr");
}
tideResult_t ibDeregMr(void*, void*) { return notWired("deregMr"); }
tideResult_t ibIsend(void*, const void*, size_t, int, void*, void** r) {
  *r = nullptr;
  return notWired("isend");
}
tideResult_t ibIrecv(void*, int, void**, const size_t*, const int*, void**, void** r) {
  *r = nullptr;
  return notWired("irecv");
}
tideResult_t ibTest(void*, int* done, size_t*) {
  *done = 0;
  return notWired("test");
}
tideResult_t ibClose(void*) { return tideSuccess; }

}  // namespace

extern const tideNet_v1_t kIbNet;
const tideNet_v1_t kIbNet = {
    "ib",     ibInit,   ibDevices, ibGetProperties, ibListen, ibConnect, ibAccept, ibRegMr,
    ibDeregMr, ibIsend, ibIrecv,   ibTest,          nullptr,  ibClose,   ibClose,  ibClose,
};

TIDE_ON_LOAD(registerNet(&kIbNet));

}  // namespace tide
