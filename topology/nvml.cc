// NVLink discovery through NVML, loaded at run time. Machines without the
// NVIDIA driver (no libnvidia-ml.so.1) skip this silently. Declarations
// below follow NVML's public C API (nvml.h), restated here so the build does
// not need the CUDA toolkit.
#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>

#include "core/log.h"
#include "topology/formats.h"

namespace tide::topo {

namespace {

using nvmlDevice = void*;
struct NvmlPciInfo {
  char busIdLegacy[16];
  unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
};
constexpr unsigned kMaxNvLinks = 18;

struct Nvml {
  int (*init)() = nullptr;
  int (*count)(unsigned*) = nullptr;
  int (*handle)(unsigned, nvmlDevice*) = nullptr;
  int (*pci)(nvmlDevice, NvmlPciInfo*) = nullptr;
  int (*linkState)(nvmlDevice, unsigned, int*) = nullptr;
  int (*remotePci)(nvmlDevice, unsigned, NvmlPciInfo*) = nullptr;
  int (*capability)(nvmlDevice, int*, int*) = nullptr;
  bool ok = false;
};

// Loaded once per process; the library stays loaded (NVML is not meant to
// be unloaded while other threads may use it).
const Nvml& nvml() {
  static Nvml n;
  static std::once_flag once;
  std::call_once(once, [] {
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return;
    auto sym = [&](auto* fn, const char* name) {
      *fn = reinterpret_cast<std::remove_pointer_t<decltype(fn)>>(dlsym(lib, name));
      return *fn != nullptr;
    };
    bool all = sym(&n.init, "nvmlInit_v2") && sym(&n.count, "nvmlDeviceGetCount_v2") &&
               sym(&n.handle, "nvmlDeviceGetHandleByIndex_v2") &&
               sym(&n.pci, "nvmlDeviceGetPciInfo_v3") &&
               sym(&n.linkState, "nvmlDeviceGetNvLinkState") &&
               sym(&n.remotePci, "nvmlDeviceGetNvLinkRemotePciInfo_v2") &&
               sym(&n.capability, "nvmlDeviceGetCudaComputeCapability");
    n.ok = all && n.init() == 0;
    if (!n.ok) TIDE_INFO("NVML present but unusable; NVLinks unknown");
  });
  return n;
}

std::string busOf(const NvmlPciInfo& p) {
  // busId is "00000000:18:00.0"; keep the short form used everywhere else.
  const char* dot = strrchr(p.busId, '.');
  char b[32];
  snprintf(b, sizeof(b), "%04x:%02x:%02x.%c", p.domain & 0xffff, p.bus, p.device,
           dot != nullptr ? dot[1] : '0');
  return b;
}

}  // namespace

void addNvmlLinks(NodeTopo* t) {
  const Nvml& n = nvml();
  if (!n.ok) return;
  std::map<std::string, int> gpuByBus;
  for (size_t i = 0; i < t->devs.size(); ++i) {
    if (t->devs[i].kind == DevKind::Gpu) gpuByBus[t->devs[i].bus] = static_cast<int>(i);
  }
  unsigned count = 0;
  if (n.count(&count) != 0) return;
  int nvswitch = -1;
  for (unsigned g = 0; g < count; ++g) {
    nvmlDevice dev = nullptr;
    NvmlPciInfo info{};
    if (n.handle(g, &dev) != 0 || n.pci(dev, &info) != 0) continue;
    auto me = gpuByBus.find(busOf(info));
    if (me == gpuByBus.end()) continue;
    int major = 0, minor = 0;
    n.capability(dev, &major, &minor);
    double perLink = nvLinkGBs(major * 10 + minor);
    std::map<int, int> peers;  // device index -> link count
    for (unsigned l = 0; l < kMaxNvLinks; ++l) {
      int active = 0;
      NvmlPciInfo remote{};
      if (n.linkState(dev, l, &active) != 0 || active == 0) continue;
      if (n.remotePci(dev, l, &remote) != 0) continue;
      auto peer = gpuByBus.find(busOf(remote));
      if (peer != gpuByBus.end()) {
        if (peer->second > me->second) ++peers[peer->second];  // each pair once
        continue;
      }
      if (nvswitch < 0) {
        Device sw;
        sw.kind = DevKind::NvSwitch;
        t->devs.push_back(sw);
        nvswitch = static_cast<int>(t->devs.size()) - 1;
      }
      ++peers[nvswitch];
    }
    for (auto [peer, links] : peers) {
      t->links.push_back(
          Link{me->second, peer, LinkKind::NvLink, links, links * perLink, kNvLinkLatUs});
    }
  }
}

}  // namespace tide::topo
