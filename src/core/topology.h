// Topology interface owned by the core.
//
// The topology/ folder registers a provider. At communicator creation the
// core asks it (1) who this rank's node is, (2) for a description of this
// rank's node (detected, or loaded from TIDE_TOPO_FILE), which the core
// all-gathers, and (3) to turn every rank's description into the
// communicator's CommTopo: who shares a node/socket/switch/GPU, what path
// joins each pair, what a link costs, and the rings/trees to use. Algorithms
// and the cost model read CommTopo (through ExecCtx::topo()); they never call
// the provider.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/transport.h"

namespace tide {

// How two ranks are connected, best first (NCCL's path classes plus the
// host-memory ones). Self: same rank.
enum class PathType : uint8_t {
  Self = 0,
  SameGpu,        // two ranks on one GPU
  NVLink,         // direct or through NVSwitch
  PciSwitch,      // under one PCIe switch
  PciHostBridge,  // across switches, same CPU root complex
  SameNuma,       // host memory, same NUMA node
  CrossNuma,      // host memory, same socket, different NUMA node
  CrossSocket,    // across the CPU interconnect
  Network,        // different nodes
  kCount
};
const char* pathName(PathType p);  // "self", "nvlink", ...

// An alpha-beta link: time(bytes) = latencyUs + bytes / (bandwidthGBs * 1e3) us.
struct LinkCost {
  double latencyUs = 1.0;
  double bandwidthGBs = 1.0;  // 1e9 bytes per second
};

// The communicator's view of its ranks. Built identically on every rank
// (a pure function of the all-gathered descriptions), so every rank makes
// the same choices. Immutable after init.
struct CommTopo {
  int rank = 0;
  int nranks = 1;
  int nnodes = 1;
  std::vector<int> nodeOf;                  // rank -> node index; nodes numbered by lowest rank
  std::vector<int> localRankOf;             // rank -> position among its node's ranks
  std::vector<std::vector<int>> nodeRanks;  // node -> its ranks, ascending
  std::vector<int> socketOf;   // rank -> CPU package index within its node (-1 unknown)
  std::vector<PathType> path;  // [a * nranks + b]
  std::vector<LinkCost> link;  // [a * nranks + b], bottleneck of the path
  // Link classes the cost model uses: the slowest intra-node pair and the
  // slowest inter-node pair (interNode is meaningful when nnodes > 1).
  LinkCost intraNode{0.5, 8.0};
  LinkCost interNode{20.0, 1.0};
  double reduceGBs = 10.0;  // host reduction kernel throughput (bytes of output per ns)
  // Ring orders (one per channel): permutations of all ranks, with each
  // node's ranks contiguous. rings[0] is what ring algorithms use.
  // (Trees are pure rank arithmetic over nodeRanks: algorithms/patterns.)
  std::vector<std::vector<int>> rings;
  std::string text;  // multi-line description for TIDE_DEBUG=INFO
  // Facts of the device rows' cost model (algorithms/device/), the same on
  // every rank: all ranks are threads of one process (the device engine's
  // direct mode: no copy-in), and the smallest TIDE_P2P_ONESHOT_MAX of the
  // ranks (~0: unset; one-shot up to it, two-shot above, unless the ring is
  // cheaper).
  bool sameProcess = false;
  uint64_t deviceOneShotMax = ~uint64_t{0};

  bool sameNode(int a, int b) const { return nodeOf[a] == nodeOf[b]; }
  bool singleNode() const { return nnodes == 1; }
};

// Fills the fields every communicator needs from the node identities alone
// (nodeOf, localRankOf, nodeRanks, path Self/SameNuma/Network, default link
// costs, rings[0] = node-major rank order). Used when no provider is
// registered or the provider fails; providers may start from it.
void defaultCommTopo(const std::vector<PeerInfo>& peers, int rank, CommTopo* out);

struct TopologyProvider {
  const char* name;
  // Printable identity of the node this process runs on. Ranks with equal
  // identities share memory. Honours TIDE_HOSTID.
  Status (*nodeIdentity)(std::string* out);
  // Optional (may be null). Describes this rank's node and its place in it
  // (CPU set, NUMA node, GPU/NIC if any) as a byte string the core
  // all-gathers unchanged. Honours TIDE_TOPO_FILE.
  Status (*describeLocal)(const PeerInfo& me, std::string* blob);
  // Optional (may be null). From every rank's blob (indexed by rank) builds
  // the communicator's topology; must give the same result on every rank.
  // Honours TIDE_TOPO_DUMP_FILE.
  Status (*build)(const std::vector<std::string>& blobs, const std::vector<PeerInfo>& peers,
                  int rank, CommTopo* out);
  // Optional (may be null). The blob local rank `localRank` of
  // `ranksPerNode` would contribute on a node described by the topology file
  // `path` (Tide, NCCL or hwloc XML; "" for this node), bound to a socket by
  // block distribution: what tideTopoPredictTime prices without ranks.
  Status (*describeFile)(const std::string& path, int localRank, int ranksPerNode,
                         std::string* blob);
};

void registerTopologyProvider(const TopologyProvider* provider);
const TopologyProvider* topologyProvider();  // null when none registered

}  // namespace tide
