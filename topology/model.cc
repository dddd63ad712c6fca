// Node model: canonical form, path classes and bottleneck bandwidths.
#include "topology/model.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>
#include <numeric>
#include <tuple>

namespace tide::topo {

const char* devKindName(DevKind k) {
  switch (k) {
    case DevKind::Cpu:
      return "cpu";
    case DevKind::PciSwitch:
      return "pci-switch";
    case DevKind::Gpu:
      return "gpu";
    case DevKind::Nic:
      return "nic";
    case DevKind::NvSwitch:
      return "nvswitch";
  }
  return "unknown";
}

bool parseDevKind(const std::string& s, DevKind* out) {
  for (int k = 0; k <= static_cast<int>(DevKind::NvSwitch); ++k) {
    if (s == devKindName(static_cast<DevKind>(k))) {
      *out = static_cast<DevKind>(k);
      return true;
    }
  }
  return false;
}

const char* linkKindName(LinkKind k) {
  switch (k) {
    case LinkKind::Pci:
      return "pci";
    case LinkKind::NvLink:
      return "nvlink";
    case LinkKind::Smp:
      return "smp";
  }
  return "unknown";
}

bool parseLinkKind(const std::string& s, LinkKind* out) {
  for (int k = 0; k <= static_cast<int>(LinkKind::Smp); ++k) {
    if (s == linkKindName(static_cast<LinkKind>(k))) {
      *out = static_cast<LinkKind>(k);
      return true;
    }
  }
  return false;
}

int NodeTopo::count(DevKind k) const {
  return static_cast<int>(
      std::count_if(devs.begin(), devs.end(), [k](const Device& d) { return d.kind == k; }));
}

std::vector<int> NodeTopo::indicesOf(DevKind k) const {
  std::vector<int> out;
  for (int i = 0; i < static_cast<int>(devs.size()); ++i) {
    if (devs[i].kind == k) out.push_back(i);
  }
  return out;
}

double pciLinkGBs(double gts, int width) {
  if (gts <= 0 || width <= 0) return 0;
  double enc = gts <= 5.0 ? 0.8 : 128.0 / 130.0;
  return gts * width * enc / 8.0;
}

double nvLinkGBs(int sm) { return sm > 0 && sm < 70 ? 20.0 : kNvLinkPerLinkGBs; }

bool parseCpuList(const std::string& s, std::vector<bool>* cpus) {
  cpus->clear();
  size_t i = 0;
  while (i < s.size()) {
    if (s[i] == ',' || isspace(static_cast<unsigned char>(s[i]))) {
      ++i;
      continue;
    }
    char* end = nullptr;
    long lo = strtol(s.c_str() + i, &end, 10);
    if (end == s.c_str() + i || lo < 0 || lo > 65535) return false;
    i = end - s.c_str();
    long hi = lo;
    if (i < s.size() && s[i] == '-') {
      hi = strtol(s.c_str() + i + 1, &end, 10);
      if (end == s.c_str() + i + 1 || hi < lo || hi > 65535) return false;
      i = end - s.c_str();
    }
    if (cpus->size() <= static_cast<size_t>(hi)) cpus->resize(hi + 1, false);
    for (long c = lo; c <= hi; ++c) (*cpus)[c] = true;
  }
  return true;
}

std::string formatCpuList(const std::vector<bool>& cpus) {
  std::string out;
  size_t n = cpus.size();
  for (size_t i = 0; i < n;) {
    if (!cpus[i]) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j + 1 < n && cpus[j + 1]) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(i);
    if (j > i) out += "-" + std::to_string(j);
    i = j + 1;
  }
  return out;
}

namespace {

int firstCpu(const std::string& list) {
  std::vector<bool> v;
  if (!parseCpuList(list, &v)) return 1 << 20;
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i]) return static_cast<int>(i);
  }
  return 1 << 20;
}

bool hasEndpointBelow(const NodeTopo& t, int sw) {
  for (size_t i = 0; i < t.devs.size(); ++i) {
    if (t.devs[i].parent != sw) continue;
    DevKind k = t.devs[i].kind;
    if (k == DevKind::Gpu || k == DevKind::Nic) return true;
    if (k == DevKind::PciSwitch && hasEndpointBelow(t, static_cast<int>(i))) return true;
  }
  return false;
}

// Removes devices flagged in `drop` and renumbers the rest in `order`.
void reorder(NodeTopo* t, const std::vector<int>& order) {
  std::vector<int> newIndex(t->devs.size(), -1);
  for (size_t i = 0; i < order.size(); ++i) newIndex[order[i]] = static_cast<int>(i);
  std::vector<Device> devs;
  devs.reserve(order.size());
  for (int old : order) {
    Device d = t->devs[old];
    d.parent = d.parent >= 0 ? newIndex[d.parent] : -1;
    devs.push_back(std::move(d));
  }
  std::vector<Link> links;
  for (Link l : t->links) {
    if (l.a < 0 || l.b < 0) continue;
    l.a = newIndex[l.a];
    l.b = newIndex[l.b];
    if (l.a < 0 || l.b < 0 || l.a == l.b) continue;
    if (l.a > l.b) std::swap(l.a, l.b);
    links.push_back(l);
  }
  t->devs = std::move(devs);
  t->links = std::move(links);
}

}  // namespace

Status normalize(NodeTopo* t) {
  const int n0 = static_cast<int>(t->devs.size());
  for (int i = 0; i < n0; ++i) {
    Device& d = t->devs[i];
    for (char& c : d.bus) c = static_cast<char>(tolower(static_cast<unsigned char>(c)));
    if (d.parent >= n0 || d.parent == i)
      return invalidArgument("topology: device %d has a bad parent", i);
    if (d.kind == DevKind::Cpu || d.kind == DevKind::NvSwitch) d.parent = -1;
    if (d.kind != DevKind::Cpu && d.kind != DevKind::NvSwitch && d.parent < 0)
      return invalidArgument("topology: %s %s has no parent", devKindName(d.kind), d.bus.c_str());
  }
  for (const Link& l : t->links) {
    if (l.a < 0 || l.b < 0 || l.a >= n0 || l.b >= n0)
      return invalidArgument("topology: link to a missing device");
  }
  // Cycle check: every parent chain reaches a root within n steps.
  for (int i = 0; i < n0; ++i) {
    int p = i, steps = 0;
    while (p >= 0 && steps <= n0) p = t->devs[p].parent, ++steps;
    if (p >= 0) return invalidArgument("topology: parent cycle at device %d", i);
  }
  // Merge every NVSwitch into the first one (GPUs see one switch fabric).
  int nvs = -1;
  std::vector<bool> keep(n0, true);
  for (int i = 0; i < n0; ++i) {
    if (t->devs[i].kind != DevKind::NvSwitch) continue;
    if (nvs < 0) {
      nvs = i;
      t->devs[i].bus.clear();
      t->devs[i].name.clear();
      continue;
    }
    keep[i] = false;
    for (Link& l : t->links) {
      if (l.a == i) l.a = nvs;
      if (l.b == i) l.b = nvs;
    }
  }
  // Switches with no GPU/NIC below carry nothing we model; drop them with
  // their subtree of other devices.
  bool changed = true;
  while (changed) {
    changed = false;
    for (int i = 0; i < n0; ++i) {
      if (!keep[i] || t->devs[i].kind != DevKind::PciSwitch) continue;
      if (!hasEndpointBelow(*t, i)) {
        keep[i] = false;
        t->devs[i].kind = DevKind::Cpu;  // neutralise: no longer a switch for the scan
        t->devs[i].parent = -1;
        for (Device& d : t->devs) {
          if (d.parent == i) d.parent = -1;
        }
        changed = true;
      }
    }
  }
  // A switch with a single child adds no sharing: splice it out, keeping its
  // uplink as the child's bottleneck.
  for (int i = 0; i < n0; ++i) {
    if (!keep[i] || t->devs[i].kind != DevKind::PciSwitch) continue;
    std::vector<int> kids;
    for (int j = 0; j < n0; ++j) {
      if (keep[j] && t->devs[j].parent == i) kids.push_back(j);
    }
    if (kids.size() >= 2) continue;
    keep[i] = false;
    for (int k : kids) {
      Device& c = t->devs[k];
      double up = t->devs[i].pciGBs;
      if (up > 0 && (c.pciGBs <= 0 || up < c.pciGBs)) c.pciGBs = up;
      c.parent = t->devs[i].parent;
    }
  }
  // Canonical order.
  std::vector<int> order;
  for (int i = 0; i < n0; ++i) {
    if (keep[i]) order.push_back(i);
  }
  auto key = [&](int i) {
    const Device& d = t->devs[i];
    int cpuKey = d.kind == DevKind::Cpu ? firstCpu(d.cpuset) : 0;
    return std::make_tuple(static_cast<int>(d.kind), cpuKey, d.numa, d.bus, d.name, i);
  };
  std::sort(order.begin(), order.end(), [&](int a, int b) { return key(a) < key(b); });
  reorder(t, order);
  // Merge duplicate links, sort.
  std::sort(t->links.begin(), t->links.end(), [](const Link& x, const Link& y) {
    return std::tie(x.a, x.b, x.kind) < std::tie(y.a, y.b, y.kind);
  });
  std::vector<Link> merged;
  for (const Link& l : t->links) {
    if (!merged.empty() && merged.back().a == l.a && merged.back().b == l.b &&
        merged.back().kind == l.kind) {
      merged.back().count += l.count;
      merged.back().gbs += l.gbs;
    } else {
      merged.push_back(l);
    }
  }
  t->links = std::move(merged);
  // Sockets: the CPU at the root of each chain.
  int sock = 0;
  for (Device& d : t->devs) {
    if (d.kind == DevKind::Cpu) d.socket = sock++;
  }
  for (Device& d : t->devs) {
    if (d.kind == DevKind::Cpu || d.kind == DevKind::NvSwitch) continue;
    int p = d.parent;
    while (p >= 0 && t->devs[p].kind != DevKind::Cpu) p = t->devs[p].parent;
    d.socket = p >= 0 ? t->devs[p].socket : -1;
  }
  computePaths(t);
  return Status::Ok();
}

namespace {

// Chain from a device up to its CPU (inclusive).
std::vector<int> chainOf(const NodeTopo& t, int d) {
  std::vector<int> c;
  for (int p = d; p >= 0; p = t.devs[p].parent) c.push_back(p);
  return c;
}

double uplink(const Device& d) { return d.pciGBs > 0 ? d.pciGBs : kDefaultPciGBs; }

double nvBandwidth(const NodeTopo& t, int a, int b) {
  double direct = 0;
  double toSw[2] = {0, 0};
  int nvs = -1;
  for (size_t i = 0; i < t.devs.size(); ++i) {
    if (t.devs[i].kind == DevKind::NvSwitch) nvs = static_cast<int>(i);
  }
  for (const Link& l : t.links) {
    if (l.kind != LinkKind::NvLink) continue;
    if ((l.a == a && l.b == b) || (l.a == b && l.b == a)) direct += l.gbs;
    if (nvs >= 0 && (l.a == nvs || l.b == nvs)) {
      int other = l.a == nvs ? l.b : l.a;
      if (other == a) toSw[0] += l.gbs;
      if (other == b) toSw[1] += l.gbs;
    }
  }
  if (a == nvs) toSw[0] = 1e9;
  if (b == nvs) toSw[1] = 1e9;
  return std::max(direct, std::min(toSw[0], toSw[1]));
}

}  // namespace

void computePaths(NodeTopo* t) {
  const int n = static_cast<int>(t->devs.size());
  t->paths.assign(static_cast<size_t>(n) * n, DevPath{});
  std::vector<std::vector<int>> chains(n);
  for (int i = 0; i < n; ++i) chains[i] = chainOf(*t, i);
  for (int a = 0; a < n; ++a) {
    for (int b = 0; b < n; ++b) {
      DevPath& p = t->paths[static_cast<size_t>(a) * n + b];
      if (a == b) {
        p = DevPath{PathType::Self, 1e3, 0};
        continue;
      }
      double nv = nvBandwidth(*t, a, b);
      if (nv > 0) {
        p = DevPath{PathType::NVLink, nv, kNvLinkLatUs};
        continue;
      }
      // Lowest common ancestor in the PCI tree.
      const std::vector<int>& ca = chains[a];
      const std::vector<int>& cb = chains[b];
      int lca = -1;
      size_t ia = 0, ib = 0;
      for (ia = 0; ia < ca.size() && lca < 0; ++ia) {
        for (ib = 0; ib < cb.size(); ++ib) {
          if (ca[ia] == cb[ib]) {
            lca = ca[ia];
            break;
          }
        }
      }
      double bw = 1e3;
      double lat = 0;
      auto climb = [&](const std::vector<int>& c, int stop) {
        for (int x : c) {
          if (x == stop) break;
          if (t->devs[x].parent >= 0) {
            bw = std::min(bw, uplink(t->devs[x]));
            lat += kPciLatUs / 2;
          }
        }
      };
      climb(ca, lca);
      climb(cb, lca);
      if (lca >= 0 && t->devs[lca].kind == DevKind::PciSwitch) {
        p.type = PathType::PciSwitch;
      } else if (lca >= 0) {
        p.type = PathType::PciHostBridge;
        if (t->devs[a].kind == DevKind::Cpu || t->devs[b].kind == DevKind::Cpu)
          p.type = PathType::SameNuma;
      } else if (ca.empty() || cb.empty() || t->devs[ca.back()].kind != DevKind::Cpu ||
                 t->devs[cb.back()].kind != DevKind::Cpu) {
        p.type = PathType::CrossSocket;  // an unattached device (NVSwitch without link)
        bw = 0;
      } else {
        p.type = PathType::CrossSocket;
        bw = std::min(bw, kSmpGBs);
        lat += kSmpLatUs;
      }
      p.gbs = bw;
      p.latUs = lat;
    }
  }
}

int socketOfCpus(const NodeTopo& t, const std::string& cpus) {
  std::vector<bool> mine;
  if (!parseCpuList(cpus, &mine)) return -1;
  int found = -1;
  bool any = false;
  for (size_t c = 0; c < mine.size(); ++c) {
    if (!mine[c]) continue;
    any = true;
    int owner = -1;
    for (const Device& d : t.devs) {
      if (d.kind != DevKind::Cpu) continue;
      std::vector<bool> set;
      if (parseCpuList(d.cpuset, &set) && c < set.size() && set[c]) owner = d.socket;
    }
    if (owner < 0 || (found >= 0 && owner != found)) return -1;
    found = owner;
  }
  return any ? found : -1;
}

std::vector<int> gpuNics(const NodeTopo& t) {
  std::vector<int> gpus = t.indicesOf(DevKind::Gpu);
  std::vector<int> nics = t.indicesOf(DevKind::Nic);
  std::vector<int> out(gpus.size(), -1);
  std::map<int, int> load;
  for (size_t g = 0; g < gpus.size(); ++g) {
    int best = -1;
    for (int nic : nics) {
      if (best < 0) {
        best = nic;
        continue;
      }
      const DevPath& p = t.path(gpus[g], nic);
      const DevPath& q = t.path(gpus[g], best);
      auto score = [&](const DevPath& x, int idx) {
        return std::make_tuple(static_cast<int>(x.type), -x.gbs, load[idx], idx);
      };
      if (score(p, nic) < score(q, best)) best = nic;
    }
    out[g] = best;
    if (best >= 0) ++load[best];
  }
  return out;
}

std::string describeTree(const NodeTopo& t) {
  std::string out;
  std::vector<std::vector<int>> kids(t.devs.size());
  for (size_t i = 0; i < t.devs.size(); ++i) {
    if (t.devs[i].parent >= 0) kids[t.devs[i].parent].push_back(static_cast<int>(i));
  }
  char line[320];
  auto print = [&](auto&& self, int i, int depth) -> void {
    const Device& d = t.devs[i];
    int len = snprintf(line, sizeof(line), "%*s[%d] %s", depth * 2, "", i, devKindName(d.kind));
    auto add = [&](const char* fmt, auto... args) {
      if (len < static_cast<int>(sizeof(line)))
        len += snprintf(line + len, sizeof(line) - len, fmt, args...);
    };
    if (d.kind == DevKind::Cpu)
      add(" socket %d numa %d cpus %s cores %d", d.socket, d.numa, d.cpuset.c_str(), d.cores);
    if (!d.bus.empty()) add(" %s", d.bus.c_str());
    if (!d.name.empty()) add(" %s", d.name.c_str());
    if (d.kind == DevKind::Nic) add(" %.1f GB/s%s", d.speedGBs, d.rdma ? " rdma" : "");
    if (d.parent >= 0) add(" (pcie %.1f GB/s)", uplink(d));
    out += line;
    out += '\n';
    for (int k : kids[i]) self(self, k, depth + 1);
  };
  for (size_t i = 0; i < t.devs.size(); ++i) {
    if (t.devs[i].parent < 0) print(print, static_cast<int>(i), 0);
  }
  for (const Link& l : t.links) {
    snprintf(line, sizeof(line), "link [%d]-[%d] %s x%d %.1f GB/s\n", l.a, l.b,
             linkKindName(l.kind), l.count, l.gbs);
    out += line;
  }
  return out;
}

std::string describePaths(const NodeTopo& t) {
  std::vector<int> sel = t.indicesOf(DevKind::Gpu);
  std::vector<int> nics = t.indicesOf(DevKind::Nic);
  sel.insert(sel.end(), nics.begin(), nics.end());
  if (t.count(DevKind::Gpu) == 0) {
    std::vector<int> cpus = t.indicesOf(DevKind::Cpu);
    sel.insert(sel.begin(), cpus.begin(), cpus.end());
  }
  std::string out = "path       ";
  char cell[64];
  for (int j : sel) {
    snprintf(cell, sizeof(cell), " %-5s%-3d", devKindName(t.devs[j].kind), j);
    out += cell;
  }
  out += '\n';
  static const char* kShort[] = {"SELF", "GPU", "NVL", "PIX", "PHB", "NUMA", "XNUM", "SYS", "NET"};
  for (int i : sel) {
    snprintf(cell, sizeof(cell), "%-6s%-5d", devKindName(t.devs[i].kind), i);
    out += cell;
    for (int j : sel) {
      const DevPath& p = t.path(i, j);
      snprintf(cell, sizeof(cell), " %-4s%4.0f", kShort[static_cast<int>(p.type)],
               i == j ? 0.0 : p.gbs);
      out += cell;
    }
    out += '\n';
  }
  return out;
}

}  // namespace tide::topo
