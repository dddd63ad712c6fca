// Core side of the topology interface: path names and the default topology
// every communicator starts from (node grouping from the peers' identities).
#include "core/topology.h"

#include <algorithm>
#include <map>

namespace tide {

const char* pathName(PathType p) {
  switch (p) {
    case PathType::Self:
      return "self";
    case PathType::SameGpu:
      return "same-gpu";
    case PathType::NVLink:
      return "nvlink";
    case PathType::PciSwitch:
      return "pci-switch";
    case PathType::PciHostBridge:
      return "pci-host-bridge";
    case PathType::SameNuma:
      return "same-numa";
    case PathType::CrossNuma:
      return "cross-numa";
    case PathType::CrossSocket:
      return "cross-socket";
    case PathType::Network:
      return "network";
    case PathType::kCount:
      break;
  }
  return "unknown";
}

void defaultCommTopo(const std::vector<PeerInfo>& peers, int rank, CommTopo* out) {
  const int n = static_cast<int>(peers.size());
  out->rank = rank;
  out->nranks = n;
  out->nodeOf.assign(n, 0);
  out->localRankOf.assign(n, 0);
  out->socketOf.assign(n, -1);
  out->nodeRanks.clear();
  std::map<uint64_t, int> nodeIndex;  // host hash -> node, numbered by lowest rank
  for (int r = 0; r < n; ++r) {
    auto it = nodeIndex.find(peers[r].hostHash);
    if (it == nodeIndex.end()) {
      it = nodeIndex.emplace(peers[r].hostHash, static_cast<int>(out->nodeRanks.size())).first;
      out->nodeRanks.emplace_back();
    }
    out->nodeOf[r] = it->second;
    out->localRankOf[r] = static_cast<int>(out->nodeRanks[it->second].size());
    out->nodeRanks[it->second].push_back(r);
  }
  out->nnodes = static_cast<int>(out->nodeRanks.size());
  out->path.assign(static_cast<size_t>(n) * n, PathType::Network);
  out->link.assign(static_cast<size_t>(n) * n, out->interNode);
  for (int a = 0; a < n; ++a) {
    for (int b = 0; b < n; ++b) {
      size_t i = static_cast<size_t>(a) * n + b;
      if (a == b) {
        out->path[i] = PathType::Self;
        out->link[i] = LinkCost{0.0, 1e3};
      } else if (out->nodeOf[a] == out->nodeOf[b]) {
        out->path[i] = PathType::SameNuma;
        out->link[i] = out->intraNode;
      }
    }
  }
  out->rings.assign(1, {});
  for (const auto& node : out->nodeRanks) {
    out->rings[0].insert(out->rings[0].end(), node.begin(), node.end());
  }
  out->text = std::to_string(out->nnodes) + " node(s), " + std::to_string(n) + " rank(s)";
}

}  // namespace tide
