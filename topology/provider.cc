// The topology provider: describes this rank's node (detected or loaded),
// and turns every rank's description into the communicator's CommTopo.
#include "topology/provider.h"

#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>

#include "core/config.h"
#include "core/log.h"
#include "core/registry.h"
#include "topology/formats.h"
#include "topology/search.h"

namespace tide::topo {

namespace {

constexpr const char* kBlobMagic = "tide-topo-blob 1\n";
constexpr int kMaxChannels = 8;

// Host-memory links between ranks of one node (no GPU): what a shared-memory
// copy sustains, before any calibration.
constexpr LinkCost kHostSameNuma{0.5, 8.0};
constexpr LinkCost kHostCrossSocket{0.8, 6.0};

std::string affinityList() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return "";
  std::vector<bool> cpus(CPU_SETSIZE, false);
  for (int c = 0; c < CPU_SETSIZE; ++c) cpus[c] = CPU_ISSET(c, &set);
  return formatCpuList(cpus);
}

Status parseBlob(const std::string& blob, std::string* cpus, std::string* xml) {
  size_t m = strlen(kBlobMagic);
  if (blob.compare(0, m, kBlobMagic) != 0) return invalidArgument("topology blob: bad header");
  size_t eol = blob.find('\n', m);
  if (eol == std::string::npos || blob.compare(m, 5, "cpus=") != 0)
    return invalidArgument("topology blob: no cpus line");
  *cpus = blob.substr(m + 5, eol - m - 5);
  *xml = blob.substr(eol + 1);
  return Status::Ok();
}

std::string hostOf(const PeerInfo& p) {
  return std::string(p.host, strnlen(p.host, sizeof(p.host)));
}

// Never fails communicator creation: a bad TIDE_TOPO_FILE falls back to
// detection, failed detection to a single CPU holding this rank's CPUs.
Status describeLocal(const PeerInfo& /*me*/, std::string* blob) {
  NodeTopo node;
  Status s = localNodeTopo(&node);
  if (!s.ok()) {
    TIDE_WARN("topology: %s; detecting this node instead", s.message().c_str());
    s = detectLocal(&node);
  }
  std::string cpus = affinityList();
  if (!s.ok()) {
    TIDE_WARN("topology detection failed: %s", s.message().c_str());
    node = NodeTopo{};
    Device cpu;
    cpu.kind = DevKind::Cpu;
    cpu.cpuset = cpus;
    node.devs.push_back(cpu);
    TIDE_TRY(normalize(&node));
  }
  *blob = makeBlob(node, cpus);
  return Status::Ok();
}

// Writes TIDE_TOPO_DUMP_FILE: with %h in the name, every node's first rank
// writes its node; otherwise rank 0 writes its node.
void dumpIfAsked(const CommTopo& topo, const BuildResult& detail,
                 const std::vector<PeerInfo>& peers) {
  if (!knobIsSet(Knob::TopoDumpFile)) return;
  std::string path = knobString(Knob::TopoDumpFile);
  int node = topo.nodeOf[topo.rank];
  bool perNode = path.find("%h") != std::string::npos;
  bool writer = perNode ? topo.nodeRanks[node].front() == topo.rank : topo.rank == 0;
  if (!writer || path.empty()) return;
  if (perNode) {
    std::string host =
        detail.nodes[node].host.empty() ? hostOf(peers[topo.rank]) : detail.nodes[node].host;
    for (char& c : host) {
      if (c == '/') c = '_';
    }
    path.replace(path.find("%h"), 2, host);
  }
  Status s = writeFile(path, writeTideXml(detail.nodes[node]));
  if (!s.ok()) TIDE_WARN("TIDE_TOPO_DUMP_FILE: %s", s.message().c_str());
}

Status build(const std::vector<std::string>& blobs, const std::vector<PeerInfo>& peers, int rank,
             CommTopo* out) {
  BuildResult detail;
  TIDE_TRY(buildCommTopo(blobs, peers, rank, out, &detail));
  dumpIfAsked(*out, detail, peers);
  return Status::Ok();
}

Status describeFile(const std::string& path, int localRank, int ranksPerNode, std::string* blob) {
  NodeTopo node;
  TIDE_TRY(path.empty() ? localNodeTopo(&node) : loadTopoFile(path, &node));
  const std::vector<int> cpuDevs = node.indicesOf(DevKind::Cpu);
  std::string cpus;
  if (!cpuDevs.empty() && ranksPerNode > 0) {
    cpus = node.devs[cpuDevs[static_cast<size_t>(localRank) * cpuDevs.size() /
                             static_cast<size_t>(ranksPerNode)]]
               .cpuset;
  }
  *blob = makeBlob(node, cpus);
  return Status::Ok();
}

const TopologyProvider kProvider = {"topology", nodeIdentity, describeLocal, build, describeFile};

// Per node: the ranks' placements (GPU round-robin by local rank, NIC of the
// GPU or of the rank's socket, socket of the GPU or of the CPU affinity).
void place(const NodeTopo& node, const std::vector<int>& ranks,
           const std::vector<std::string>& cpus, std::vector<Placement>* placement) {
  std::vector<int> gpus = node.indicesOf(DevKind::Gpu);
  std::vector<int> nics = node.indicesOf(DevKind::Nic);
  std::vector<int> gpuNic = gpuNics(node);
  int ncpu = node.count(DevKind::Cpu);
  for (size_t l = 0; l < ranks.size(); ++l) {
    Placement& p = (*placement)[ranks[l]];
    if (!gpus.empty()) {
      size_t g = l % gpus.size();
      p.gpu = gpus[g];
      p.nic = gpuNic[g];
      p.socket = node.devs[p.gpu].socket;
      continue;
    }
    p.socket = socketOfCpus(node, cpus[ranks[l]]);
    if (p.socket < 0 && ncpu == 1) p.socket = 0;
    for (int nic : nics) {
      if (p.nic < 0 || (p.socket >= 0 && node.devs[nic].socket == p.socket &&
                        node.devs[p.nic].socket != p.socket))
        p.nic = nic;
    }
  }
}

// CommTopo::text: nodes, each rank's place, the link classes and rings.
void describe(CommTopo* t, const BuildResult& d, const std::vector<PeerInfo>& peers) {
  std::string s;
  char line[512];
  for (int nd = 0; nd < t->nnodes; ++nd) {
    const NodeTopo& node = d.nodes[nd];
    snprintf(line, sizeof(line), "node %d (%s): %d socket(s), %d GPU(s), %d NIC(s), %s, ranks", nd,
             hostOf(peers[t->nodeRanks[nd].front()]).c_str(), node.count(DevKind::Cpu),
             node.count(DevKind::Gpu), node.count(DevKind::Nic),
             node.count(DevKind::NvSwitch) > 0 ? "NVSwitch" : "no NVSwitch");
    s += line;
    for (int r : t->nodeRanks[nd]) s += " " + std::to_string(r);
    s += '\n';
    for (int r : t->nodeRanks[nd]) {
      const Placement& p = d.placement[r];
      int len = snprintf(line, sizeof(line), "  rank %d: local %d socket %d", r, t->localRankOf[r],
                         p.socket);
      if (p.gpu >= 0 && len < static_cast<int>(sizeof(line)))
        len += snprintf(line + len, sizeof(line) - len, " gpu %s", node.devs[p.gpu].bus.c_str());
      if (p.nic >= 0 && len < static_cast<int>(sizeof(line)))
        snprintf(line + len, sizeof(line) - len, " nic %s (%.1f GB/s)",
                 node.devs[p.nic].name.empty() ? node.devs[p.nic].bus.c_str()
                                               : node.devs[p.nic].name.c_str(),
                 node.devs[p.nic].speedGBs);
      s += line;
      s += '\n';
    }
  }
  snprintf(line, sizeof(line), "intra-node %.2f us %.1f GB/s, inter-node %.2f us %.1f GB/s\n",
           t->intraNode.latencyUs, t->intraNode.bandwidthGBs, t->interNode.latencyUs,
           t->interNode.bandwidthGBs);
  s += line;
  for (size_t c = 0; c < t->rings.size(); ++c) {
    s += "ring " + std::to_string(c) + ":";
    for (int r : t->rings[c]) s += " " + std::to_string(r);
    s += '\n';
  }
  t->text = std::move(s);
}

}  // namespace

std::string makeBlob(const NodeTopo& node, const std::string& cpus) {
  return std::string(kBlobMagic) + "cpus=" + cpus + "\n" + writeTideXml(node);
}

Status localNodeTopo(NodeTopo* out) {
  if (!knobIsSet(Knob::TopoFile) || knobString(Knob::TopoFile).empty()) return detectLocal(out);
  static std::mutex mu;
  static std::map<std::string, NodeTopo> cache;
  std::string path = knobString(Knob::TopoFile);
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(path);
  if (it == cache.end()) {
    NodeTopo t;
    TIDE_TRY(loadTopoFile(path, &t));
    // A loaded model keeps this machine's host name for the logs.
    NodeTopo live;
    if (t.host.empty() && detectLocal(&live).ok()) t.host = live.host;
    it = cache.emplace(path, std::move(t)).first;
  }
  *out = it->second;
  return Status::Ok();
}

Status buildCommTopo(const std::vector<std::string>& blobs, const std::vector<PeerInfo>& peers,
                     int rank, CommTopo* out, BuildResult* detail) {
  const int n = static_cast<int>(peers.size());
  if (static_cast<int>(blobs.size()) != n)
    return invalidArgument("topology: %zu blobs for %d ranks", blobs.size(), n);
  defaultCommTopo(peers, rank, out);
  // Parse each distinct description once; a node uses its lowest rank's.
  std::vector<std::string> cpus(n), xml(n);
  for (int r = 0; r < n; ++r) TIDE_TRY(parseBlob(blobs[r], &cpus[r], &xml[r]));
  detail->nodes.assign(out->nnodes, NodeTopo{});
  detail->placement.assign(n, Placement{});
  for (int nd = 0; nd < out->nnodes; ++nd) {
    const std::vector<int>& ranks = out->nodeRanks[nd];
    XmlNode root;
    TIDE_TRY(parseXml(xml[ranks.front()], &root));
    TIDE_TRY(readTideXml(root, &detail->nodes[nd]));
    for (int r : ranks) {
      if (xml[r] != xml[ranks.front()])
        TIDE_INFO("rank %d describes node %d differently from rank %d; using rank %d's", r, nd,
                  ranks.front(), ranks.front());
    }
    place(detail->nodes[nd], ranks, cpus, &detail->placement);
  }
  const std::vector<Placement>& pl = detail->placement;
  for (int r = 0; r < n; ++r) out->socketOf[r] = pl[r].socket;
  // Pairs.
  bool haveIntra = false, haveInter = false;
  LinkCost intra{0, 1e9}, inter{0, 1e9};
  for (int a = 0; a < n; ++a) {
    for (int b = 0; b < n; ++b) {
      size_t i = static_cast<size_t>(a) * n + b;
      if (a == b) continue;
      const Placement& pa = pl[a];
      const Placement& pb = pl[b];
      LinkCost c;
      PathType type;
      if (out->sameNode(a, b)) {
        const NodeTopo& node = detail->nodes[out->nodeOf[a]];
        if (pa.gpu >= 0 && pa.gpu == pb.gpu) {
          type = PathType::SameGpu;
          c = LinkCost{0.5, 500.0};
        } else if (pa.gpu >= 0 && pb.gpu >= 0) {
          const DevPath& p = node.path(pa.gpu, pb.gpu);
          type = p.type;
          c = LinkCost{std::max(0.5, p.latUs), p.gbs};
        } else if (pa.socket >= 0 && pb.socket >= 0 && pa.socket != pb.socket) {
          type = PathType::CrossSocket;
          c = kHostCrossSocket;
        } else {
          type = PathType::SameNuma;
          c = kHostSameNuma;
        }
        if (!haveIntra || c.bandwidthGBs < intra.bandwidthGBs) intra.bandwidthGBs = c.bandwidthGBs;
        intra.latencyUs = std::max(intra.latencyUs, c.latencyUs);
        haveIntra = true;
      } else {
        type = PathType::Network;
        c = out->interNode;
        const NodeTopo& na = detail->nodes[out->nodeOf[a]];
        const NodeTopo& nb = detail->nodes[out->nodeOf[b]];
        double sa = pa.nic >= 0 ? na.devs[pa.nic].speedGBs : 0;
        double sb = pb.nic >= 0 ? nb.devs[pb.nic].speedGBs : 0;
        if (sa > 0 && sb > 0) c.bandwidthGBs = std::min(sa, sb);
        if (!haveInter || c.bandwidthGBs < inter.bandwidthGBs) inter.bandwidthGBs = c.bandwidthGBs;
        inter.latencyUs = std::max(inter.latencyUs, c.latencyUs);
        haveInter = true;
      }
      out->path[i] = type;
      out->link[i] = c;
    }
  }
  if (haveIntra) out->intraNode = intra;
  if (haveInter) out->interNode = inter;
  // Rings: per node a path (or, on one node, a cycle) through its ranks,
  // channel c starting at the rank nearest NIC c; nodes in order.
  int channels = 1;
  for (int nd = 0; nd < out->nnodes; ++nd) {
    std::vector<int> used;
    for (int r : out->nodeRanks[nd]) {
      if (pl[r].nic >= 0 && std::find(used.begin(), used.end(), pl[r].nic) == used.end())
        used.push_back(pl[r].nic);
    }
    channels = std::max(channels, static_cast<int>(used.size()));
  }
  channels = std::min(channels, kMaxChannels);
  out->rings.assign(channels, {});
  const bool closed = out->nnodes == 1;
  for (int nd = 0; nd < out->nnodes; ++nd) {
    const std::vector<int>& ranks = out->nodeRanks[nd];
    const int m = static_cast<int>(ranks.size());
    std::vector<RingCost> cost(static_cast<size_t>(m) * m);
    for (int i = 0; i < m; ++i) {
      for (int j = 0; j < m; ++j) {
        size_t k = static_cast<size_t>(ranks[i]) * n + ranks[j];
        cost[static_cast<size_t>(i) * m + j] =
            RingCost{out->path[k], out->link[k].bandwidthGBs,
                     pl[ranks[i]].socket >= 0 && pl[ranks[j]].socket >= 0 &&
                         pl[ranks[i]].socket != pl[ranks[j]].socket};
      }
    }
    // NICs in first-use order; channel c starts at the first rank on NIC c.
    std::vector<int> nicStart;
    std::vector<int> nicSeen;
    for (int i = 0; i < m; ++i) {
      int nic = pl[ranks[i]].nic;
      if (nic >= 0 && std::find(nicSeen.begin(), nicSeen.end(), nic) == nicSeen.end()) {
        nicSeen.push_back(nic);
        nicStart.push_back(i);
      }
    }
    // A closed ring scores the same from any start: search once, rotate.
    std::vector<int> cycle;
    if (closed) cycle = searchRing(m, cost, 0, true);
    std::map<int, std::vector<int>> memo;  // start -> order (channels often share a start)
    for (int c = 0; c < channels; ++c) {
      int start = nicStart.empty() ? (c * m / channels) % m : nicStart[c % nicStart.size()];
      auto it = memo.find(start);
      if (it == memo.end()) {
        std::vector<int> order;
        if (closed) {
          size_t at = std::find(cycle.begin(), cycle.end(), start) - cycle.begin();
          for (int k = 0; k < m; ++k) order.push_back(cycle[(at + k) % m]);
        } else {
          order = searchRing(m, cost, start, false);
        }
        it = memo.emplace(start, std::move(order)).first;
      }
      for (int i : it->second) out->rings[c].push_back(ranks[i]);
    }
  }
  describe(out, *detail, peers);
  return Status::Ok();
}

TIDE_ON_LOAD(registerTopologyProvider(&kProvider));

}  // namespace tide::topo
