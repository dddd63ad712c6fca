// sysfs: NIC port speeds, RDMA devices, and a hwloc-less detection of CPU
// packages, NUMA nodes and PCI GPUs/NICs.
#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>

#include "topology/formats.h"

namespace tide::topo {

namespace {

std::string readLine(const std::string& path) {
  FILE* f = fopen(path.c_str(), "r");
  if (f == nullptr) return "";
  char buf[512] = {};
  if (fgets(buf, sizeof(buf), f) == nullptr) buf[0] = '\0';
  fclose(f);
  std::string s = buf;
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::vector<std::string> listDir(const std::string& path) {
  std::vector<std::string> out;
  DIR* d = opendir(path.c_str());
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') out.emplace_back(e->d_name);
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

// PCI bus id of a sysfs class device ("/sys/class/net/eth0/device" -> "0000:00:03.0").
std::string busOfClassDevice(const std::string& dir) {
  char real[4096];
  if (realpath((dir + "/device").c_str(), real) == nullptr) return "";
  std::string p = real;
  // The last path component shaped like dddd:bb:dd.f.
  std::string bus;
  size_t pos = 0;
  while (pos < p.size()) {
    size_t slash = p.find('/', pos);
    std::string comp = p.substr(pos, slash == std::string::npos ? std::string::npos : slash - pos);
    if (comp.size() == 12 && comp[4] == ':' && comp[7] == ':' && comp[10] == '.') bus = comp;
    if (slash == std::string::npos) break;
    pos = slash + 1;
  }
  return bus;
}

}  // namespace

std::string sysfsRdmaDevice(const std::string& bus) {
  for (const std::string& dev : listDir("/sys/class/infiniband")) {
    if (busOfClassDevice("/sys/class/infiniband/" + dev) == bus) return dev;
  }
  return "";
}

double sysfsNicSpeedGBs(const std::string& name, const std::string& bus) {
  // RDMA port rate: "400 Gb/sec (4X NDR)".
  std::string rate = readLine("/sys/class/infiniband/" + name + "/ports/1/rate");
  if (!rate.empty()) return atof(rate.c_str()) / 8.0;
  for (const std::string& ifname : listDir("/sys/class/net")) {
    if (ifname != name && (bus.empty() || busOfClassDevice("/sys/class/net/" + ifname) != bus))
      continue;
    long mbps = atol(readLine("/sys/class/net/" + ifname + "/speed").c_str());
    if (mbps > 0) return mbps / 8000.0;
  }
  return 0;
}

Status detectSysfs(NodeTopo* t) {
  *t = NodeTopo{};
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  t->host = host;
  // Packages and their CPUs.
  std::map<int, std::vector<bool>> pkgCpus;
  std::map<int, std::set<int>> pkgCores;
  for (const std::string& e : listDir("/sys/devices/system/cpu")) {
    if (e.size() < 4 || e.compare(0, 3, "cpu") != 0 || !isdigit(static_cast<unsigned char>(e[3])))
      continue;
    int cpu = atoi(e.c_str() + 3);
    std::string base = "/sys/devices/system/cpu/" + e + "/topology/";
    std::string pkg = readLine(base + "physical_package_id");
    if (pkg.empty()) continue;  // offline CPU
    int p = atoi(pkg.c_str());
    auto& v = pkgCpus[p];
    if (v.size() <= static_cast<size_t>(cpu)) v.resize(cpu + 1, false);
    v[cpu] = true;
    pkgCores[p].insert(atoi(readLine(base + "core_id").c_str()));
  }
  if (pkgCpus.empty()) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    std::vector<bool> all(n > 0 ? n : 1, true);
    pkgCpus[0] = all;
    pkgCores[0].insert(0);
  }
  // NUMA node -> CPUs, to give each package its first NUMA node.
  std::map<int, std::vector<bool>> numaCpus;
  for (const std::string& e : listDir("/sys/devices/system/node")) {
    if (e.compare(0, 4, "node") != 0 || !isdigit(static_cast<unsigned char>(e[4]))) continue;
    std::vector<bool> v;
    if (parseCpuList(readLine("/sys/devices/system/node/" + e + "/cpulist"), &v))
      numaCpus[atoi(e.c_str() + 4)] = v;
  }
  std::map<int, int> numaToCpuDev;
  for (auto& [p, cpus] : pkgCpus) {
    Device d;
    d.kind = DevKind::Cpu;
    d.cpuset = formatCpuList(cpus);
    d.cores = static_cast<int>(pkgCores[p].size());
    for (auto& [node, ncpus] : numaCpus) {
      for (size_t c = 0; c < ncpus.size() && c < cpus.size(); ++c) {
        if (ncpus[c] && cpus[c]) {
          if (d.numa < 0) d.numa = node;
          numaToCpuDev[node] = static_cast<int>(t->devs.size());
          break;
        }
      }
    }
    t->devs.push_back(std::move(d));
  }
  // PCI GPUs and NICs, attached to the package of their NUMA node.
  for (const std::string& bus : listDir("/sys/bus/pci/devices")) {
    std::string base = "/sys/bus/pci/devices/" + bus + "/";
    unsigned long cls = strtoul(readLine(base + "class").c_str(), nullptr, 16) >> 8;
    unsigned long vendor = strtoul(readLine(base + "vendor").c_str(), nullptr, 16);
    Device d;
    if ((cls == 0x0300 || cls == 0x0302) && (vendor == 0x10de || vendor == 0x1002)) {
      d.kind = DevKind::Gpu;
    } else if ((cls >> 8) == 0x02) {
      d.kind = DevKind::Nic;
    } else {
      continue;
    }
    d.bus = bus;
    int node = atoi(readLine(base + "numa_node").c_str());
    auto it = numaToCpuDev.find(node);
    d.parent = it != numaToCpuDev.end() ? it->second : 0;
    double gts = atof(readLine(base + "current_link_speed").c_str());
    d.pciGBs = pciLinkGBs(gts, atoi(readLine(base + "current_link_width").c_str()));
    if (d.kind == DevKind::Nic) {
      d.name = sysfsRdmaDevice(bus);
      d.rdma = !d.name.empty();
      if (d.name.empty()) {
        for (const std::string& ifname : listDir("/sys/class/net")) {
          if (busOfClassDevice("/sys/class/net/" + ifname) == bus) d.name = ifname;
        }
      }
      d.speedGBs = sysfsNicSpeedGBs(d.name, bus);
    }
    t->devs.push_back(std::move(d));
  }
  addNvmlLinks(t);
  return normalize(t);
}

}  // namespace tide::topo
