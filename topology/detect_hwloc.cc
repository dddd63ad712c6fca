// hwloc-based detection: the live machine or an hwloc XML of another one
// go through the same walk (fromHwloc), so cluster-node XMLs test the code
// path a cluster node takes.
#include <cmath>
#include <map>
#include <mutex>

#include "core/log.h"
#include "tide_build_config.h"
#include "topology/formats.h"

#if TIDE_HAVE_HWLOC
#include <hwloc.h>
#endif

namespace tide::topo {

#if TIDE_HAVE_HWLOC

namespace {

std::string listOf(hwloc_const_bitmap_t set) {
  char* s = nullptr;
  hwloc_bitmap_list_asprintf(&s, set);
  std::string out = s != nullptr ? s : "";
  free(s);
  return out;
}

std::string busOf(const hwloc_obj_attr_u::hwloc_pcidev_attr_s& p) {
  char b[32];
  snprintf(b, sizeof(b), "%04x:%02x:%02x.%01x", p.domain, p.bus, p.dev, p.func);
  return b;
}

enum class PciRole { None, Gpu, Nic, NvSwitch };

PciRole roleOf(hwloc_obj_t o) {
  unsigned cls = o->attr->pcidev.class_id;
  unsigned vendor = o->attr->pcidev.vendor_id;
  if ((cls == 0x0300 || cls == 0x0302) && (vendor == 0x10de || vendor == 0x1002))
    return PciRole::Gpu;
  if ((cls >> 8) == 0x02) return PciRole::Nic;
  if (cls == 0x0680 && vendor == 0x10de) return PciRole::NvSwitch;
  return PciRole::None;
}

class HwlocWalker {
 public:
  HwlocWalker(hwloc_topology_t topo, bool live, NodeTopo* t) : topo_(topo), live_(live), t_(t) {}

  Status run() {
    hwloc_obj_t root = hwloc_get_root_obj(topo_);
    const char* host = hwloc_obj_get_info_by_name(root, "HostName");
    t_->host = host != nullptr ? host : "";
    int npkg = hwloc_get_nbobjs_by_type(topo_, HWLOC_OBJ_PACKAGE);
    if (npkg <= 0) {
      addCpu(root);
    } else {
      for (int i = 0; i < npkg; ++i) addCpu(hwloc_get_obj_by_type(topo_, HWLOC_OBJ_PACKAGE, i));
    }
    for (hwloc_obj_t o = hwloc_get_next_pcidev(topo_, nullptr); o != nullptr;
         o = hwloc_get_next_pcidev(topo_, o)) {
      PciRole role = roleOf(o);
      if (role == PciRole::None) continue;
      Device d;
      d.bus = busOf(o->attr->pcidev);
      d.pciGBs = o->attr->pcidev.linkspeed;
      if (role == PciRole::NvSwitch) {
        d.kind = DevKind::NvSwitch;
        pciIndex_[o] = add(std::move(d));
        continue;
      }
      d.kind = role == PciRole::Gpu ? DevKind::Gpu : DevKind::Nic;
      d.parent = parentOf(o->parent);
      if (role == PciRole::Nic) nicDetails(o, &d);
      pciIndex_[o] = add(std::move(d));
    }
    nvlinks();
    return Status::Ok();
  }

 private:
  int add(Device d) {
    t_->devs.push_back(std::move(d));
    return static_cast<int>(t_->devs.size()) - 1;
  }

  void addCpu(hwloc_obj_t pkg) {
    Device d;
    d.kind = DevKind::Cpu;
    d.cpuset = listOf(pkg->cpuset);
    d.cores = hwloc_get_nbobjs_inside_cpuset_by_type(topo_, pkg->cpuset, HWLOC_OBJ_CORE);
    d.numa = pkg->nodeset != nullptr ? hwloc_bitmap_first(pkg->nodeset) : -1;
    cpus_.push_back(pkg);
    add(std::move(d));
  }

  // The CPU (package) whose cpuset covers the I/O object's locality.
  int cpuFor(hwloc_obj_t o) {
    hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(topo_, o);
    for (size_t i = 0; i < cpus_.size(); ++i) {
      if (anc != nullptr && anc->cpuset != nullptr &&
          hwloc_bitmap_isincluded(anc->cpuset, cpus_[i]->cpuset))
        return static_cast<int>(i);
    }
    return 0;
  }

  // Every PCI-to-PCI bridge is a switch candidate; normalize() splices out
  // those with one child (root ports, downstream ports).
  int parentOf(hwloc_obj_t p) {
    if (p == nullptr || p->type != HWLOC_OBJ_BRIDGE ||
        p->attr->bridge.upstream_type != HWLOC_OBJ_BRIDGE_PCI)
      return cpuFor(p != nullptr ? p : hwloc_get_root_obj(topo_));
    auto it = pciIndex_.find(p);
    if (it != pciIndex_.end()) return it->second;
    Device sw;
    sw.kind = DevKind::PciSwitch;
    sw.bus = busOf(p->attr->bridge.upstream.pci);
    sw.pciGBs = p->attr->bridge.upstream.pci.linkspeed;
    sw.parent = parentOf(p->parent);
    int idx = add(std::move(sw));
    pciIndex_[p] = idx;
    return idx;
  }

  void nicDetails(hwloc_obj_t o, Device* d) {
    std::string netName;
    for (hwloc_obj_t c = o->io_first_child; c != nullptr; c = c->next_sibling) {
      if (c->type != HWLOC_OBJ_OS_DEVICE || c->name == nullptr) continue;
      if (c->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS) {
        d->name = c->name;
        d->rdma = true;
      } else if (c->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK && netName.empty()) {
        netName = c->name;
      }
    }
    if (d->name.empty()) d->name = netName;
    const char* mbps = hwloc_obj_get_info_by_name(o, "TideSpeedMbps");
    if (mbps != nullptr) d->speedGBs = atof(mbps) / 8000.0;
    if (live_) {
      if (!d->rdma) {
        std::string rdma = sysfsRdmaDevice(d->bus);
        if (!rdma.empty()) d->name = rdma, d->rdma = true;
      }
      if (d->speedGBs <= 0) d->speedGBs = sysfsNicSpeedGBs(d->name, d->bus);
    }
  }

  hwloc_obj_t pciOf(hwloc_obj_t o) {
    while (o != nullptr && o->type != HWLOC_OBJ_PCI_DEVICE) o = o->parent;
    return o;
  }

  void nvlinks() {
    unsigned nr = 1;
    hwloc_distances_s* dist = nullptr;
    if (hwloc_distances_get_by_name(topo_, "NVLinkBandwidth", &nr, &dist, 0) != 0 || nr == 0)
      return;
    for (unsigned i = 0; i < dist->nbobjs; ++i) {
      auto a = pciIndex_.find(pciOf(dist->objs[i]));
      if (a == pciIndex_.end()) continue;
      for (unsigned j = i + 1; j < dist->nbobjs; ++j) {
        auto b = pciIndex_.find(pciOf(dist->objs[j]));
        if (b == pciIndex_.end()) continue;
        double mbs = static_cast<double>(dist->values[i * dist->nbobjs + j]);
        if (mbs <= 0) continue;
        double gbs = mbs / 1000.0;
        int count = std::max(1, static_cast<int>(std::lround(gbs / kNvLinkPerLinkGBs)));
        t_->links.push_back(Link{a->second, b->second, LinkKind::NvLink, count, gbs, kNvLinkLatUs});
      }
    }
    hwloc_distances_release(topo_, dist);
  }

  hwloc_topology_t topo_;
  bool live_;
  NodeTopo* t_;
  std::vector<hwloc_obj_t> cpus_;
  std::map<hwloc_obj_t, int> pciIndex_;
};

// hwloc loads its plugins (pci: libpciaccess, xml) when the first topology is
// created and unloads them when the last one is destroyed. libpciaccess keeps
// about 1 KiB per load reachable only from its own globals: once unloaded,
// LeakSanitizer reports it as a leak from an unnamed module (no suppression
// can match it). One never-loaded topology, kept for the process's life,
// keeps the plugins loaded and that memory reachable. Cost: nothing measurable
// (the plugins' load, ~10 ms, happens once instead of per topology; same RSS).
// Thread-safe (static initialization).
// Written once, never read: `used` keeps the compiler from dropping the store,
// so LeakSanitizer still finds the topology through it.
[[gnu::used]] hwloc_topology_t gPluginHolder = nullptr;

void keepHwlocPluginsLoaded() {
  static std::once_flag once;
  std::call_once(once, [] {
    hwloc_topology_t k = nullptr;
    if (hwloc_topology_init(&k) == 0) gPluginHolder = k;
  });
}

Status loadHwloc(const std::string* xml, NodeTopo* t) {
  *t = NodeTopo{};
  keepHwlocPluginsLoaded();
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0) return systemError("hwloc_topology_init failed");
  hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  // All PCI devices: NVSwitches are "bridge other" devices, not important to hwloc.
  hwloc_topology_set_type_filter(topo, HWLOC_OBJ_PCI_DEVICE, HWLOC_TYPE_FILTER_KEEP_ALL);
  if (xml == nullptr) {
    // Display (X11) and OpenCL probing find nothing Tide uses and are slow.
    hwloc_topology_set_components(topo, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, "gl");
    hwloc_topology_set_components(topo, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, "opencl");
  }
  if (xml != nullptr &&
      hwloc_topology_set_xmlbuffer(topo, xml->c_str(), static_cast<int>(xml->size()) + 1) != 0) {
    hwloc_topology_destroy(topo);
    return invalidArgument("hwloc cannot read this XML");
  }
  if (hwloc_topology_load(topo) != 0) {
    hwloc_topology_destroy(topo);
    return invalidArgument("hwloc_topology_load failed");
  }
  Status s = HwlocWalker(topo, xml == nullptr, t).run();
  hwloc_topology_destroy(topo);
  TIDE_TRY(s);
  std::string host = t->host;
  if (xml == nullptr) addNvmlLinks(t);
  TIDE_TRY(normalize(t));
  t->host = host;
  return Status::Ok();
}

}  // namespace

Status readHwlocXml(const std::string& text, NodeTopo* t) { return loadHwloc(&text, t); }

#else  // !TIDE_HAVE_HWLOC

Status readHwlocXml(const std::string&, NodeTopo*) {
  return invalidUsage("hwloc XML needs Tide built with hwloc");
}

#endif

Status detectLocal(NodeTopo* t) {
  static std::mutex mu;
  static bool done = false;
  static NodeTopo cached;
  static Status result;
  std::lock_guard<std::mutex> lock(mu);
  if (!done) {
#if TIDE_HAVE_HWLOC
    result = loadHwloc(nullptr, &cached);
    if (!result.ok()) {
      TIDE_INFO("hwloc detection failed (%s), using sysfs", result.message().c_str());
      result = detectSysfs(&cached);
    }
#else
    result = detectSysfs(&cached);
#endif
    done = true;
  }
  if (result.ok()) *t = cached;
  return result;
}

}  // namespace tide::topo
