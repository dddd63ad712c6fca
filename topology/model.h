// The node model: a graph of typed devices (CPU sockets, PCIe switches,
// GPUs, NICs, NVSwitch) joined by links with bandwidth and latency, and for
// every pair of devices the path type and bottleneck bandwidth.
//
// A NodeTopo is plain data: built by detection (hwloc, sysfs, NVML) or by
// an XML reader, made canonical (normalize()), then paths are computed.
// Not thread-safe; callers own their copies.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/topology.h"

namespace tide::topo {

enum class DevKind : uint8_t { Cpu = 0, PciSwitch, Gpu, Nic, NvSwitch };
const char* devKindName(DevKind k);  // "cpu", "pci-switch", "gpu", "nic", "nvswitch"
bool parseDevKind(const std::string& s, DevKind* out);

enum class LinkKind : uint8_t { Pci = 0, NvLink, Smp };
const char* linkKindName(LinkKind k);  // "pci", "nvlink", "smp"
bool parseLinkKind(const std::string& s, LinkKind* out);

struct Device {
  DevKind kind = DevKind::Cpu;
  std::string bus;      // PCI bus id "0000:18:00.0" (lower case); "" for CPU/NVSwitch
  std::string name;     // NIC: "mlx5_0" (RDMA device) or "eth0"; empty for other kinds
  int parent = -1;      // PCI parent (switch or CPU); -1 for CPUs and the NVSwitch
  int socket = -1;      // CPU package this device hangs from
  int numa = -1;        // CPU: its (first) NUMA node
  std::string cpuset;   // CPU: list form "0-55,112-167"
  int cores = 0;        // CPU: physical cores
  double pciGBs = 0;    // PCIe link to the parent, GB/s (0: unknown)
  double speedGBs = 0;  // NIC: port speed in GB/s (1e9 bytes/s)
  bool rdma = false;    // NIC: RDMA capable (InfiniBand / RoCE device present)
};

struct Link {
  int a = -1, b = -1;  // device indices, a < b after normalize()
  LinkKind kind = LinkKind::Pci;
  int count = 1;   // NVLink: number of links
  double gbs = 0;  // bandwidth in each direction, GB/s
  double latUs = 0;
};

// One device pair's path: class plus bottleneck (minimum link) bandwidth.
struct DevPath {
  PathType type = PathType::Self;
  double gbs = 0;
  double latUs = 0;
};

struct NodeTopo {
  std::string host;  // informational; not part of the canonical form
  std::vector<Device> devs;
  std::vector<Link> links;     // besides the parent links implied by Device::parent
  std::vector<DevPath> paths;  // [a * devs.size() + b], filled by computePaths()

  int count(DevKind k) const;
  std::vector<int> indicesOf(DevKind k) const;  // in device order
  const DevPath& path(int a, int b) const { return paths[a * devs.size() + b]; }
};

// Typical numbers used when a source gives none (documented in topology/README.md).
constexpr double kDefaultPciGBs = 24.0;     // PCIe Gen4 x16 after protocol overhead
constexpr double kSmpGBs = 40.0;            // socket interconnect (UPI / xGMI), one direction
constexpr double kNvLinkPerLinkGBs = 25.0;  // NVLink 2-4 per link and direction
constexpr double kPciLatUs = 1.0;
constexpr double kNvLinkLatUs = 0.7;
constexpr double kSmpLatUs = 1.5;

// PCIe bandwidth in GB/s from transfer rate (GT/s) and width, with the line
// encoding of the generation (8b/10b up to 5 GT/s, 128b/130b above).
double pciLinkGBs(double gts, int width);
// NVLink bandwidth per link for a compute capability (x10).
double nvLinkGBs(int sm);

// Makes the model canonical so that two descriptions of one machine compare
// equal: sorts CPUs by cpuset, every other device by (kind, bus, name),
// remaps parents, merges all NVSwitches into one, sorts links, recomputes
// socket. Then computes paths. Fails on a dangling parent or a cycle.
Status normalize(NodeTopo* t);
// Fills t->paths (called by normalize()).
void computePaths(NodeTopo* t);

// Index of the CPU socket whose cpuset holds every CPU of `cpus` (a list
// string); -1 when none or several.
int socketOfCpus(const NodeTopo& t, const std::string& cpus);
// The NIC a GPU should use: best path class, then bandwidth; ties are spread
// over the tied NICs in GPU order. -1 when the node has no NIC.
std::vector<int> gpuNics(const NodeTopo& t);

// Human-readable tree, one device per line.
std::string describeTree(const NodeTopo& t);
// Path matrix over the GPUs and NICs (and the CPUs when there is no GPU).
std::string describePaths(const NodeTopo& t);

// CPU list helpers ("0-3,8" <-> bit vector).
bool parseCpuList(const std::string& s, std::vector<bool>* cpus);
std::string formatCpuList(const std::vector<bool>& cpus);

}  // namespace tide::topo
