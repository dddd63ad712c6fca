// Pure helpers shared by the algorithms' alpha-beta predictions and their
// rank orders: a step's time over the topology's link classes, reduction
// time, and the validated ring order of a CommTopo. No I/O; thread-safe.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "core/topology.h"

namespace tide::pattern {

// Microseconds to move `bytes` over `l` once (latency + bytes / bandwidth).
inline double linkUs(const LinkCost& l, double bytes) {
  return l.latencyUs + bytes / (std::max(l.bandwidthGBs, 1e-6) * 1e3);
}
// Bandwidth part only (for bytes that share a link with others in one step).
inline double wireUs(const LinkCost& l, double bytes) {
  return bytes / (std::max(l.bandwidthGBs, 1e-6) * 1e3);
}
// Microseconds for the host kernel to reduce `bytes` of output.
inline double reduceUs(const CommTopo& t, double bytes) {
  return bytes / (std::max(t.reduceGBs, 1e-6) * 1e3);
}
// Chunks of at most `chunk` bytes that `bytes` splits into (>= 1).
inline double numChunks(double bytes, size_t chunk) {
  const double c = static_cast<double>(std::max<size_t>(chunk, 1));
  return std::max(1.0, static_cast<double>(static_cast<size_t>((bytes + c - 1) / c)));
}

// topo.rings[0] when it is a permutation of 0..nranks-1, else rank order.
inline std::vector<int> ringOrder(const CommTopo& t, int nranks) {
  std::vector<int> order;
  if (!t.rings.empty() && static_cast<int>(t.rings[0].size()) == nranks) {
    std::vector<char> seen(nranks, 0);
    bool ok = true;
    for (int r : t.rings[0]) {
      if (r < 0 || r >= nranks || seen[r]) {
        ok = false;
        break;
      }
      seen[r] = 1;
    }
    if (ok) order = t.rings[0];
  }
  if (order.empty()) {
    order.resize(nranks);
    for (int r = 0; r < nranks; ++r) order[r] = r;
  }
  return order;
}

inline int positionOf(const std::vector<int>& order, int rank) {
  for (size_t i = 0; i < order.size(); ++i)
    if (order[i] == rank) return static_cast<int>(i);
  return -1;
}

// Node of rank r, tolerating topologies without node data (one node).
inline int nodeOfRank(const CommTopo& t, int r) {
  return r >= 0 && r < static_cast<int>(t.nodeOf.size()) ? t.nodeOf[r] : 0;
}

// One communication step in which every rank in `from` sends `bytes` to the
// rank at the same index of `to`, all at once: the slowest of the intra-node
// transfers and each node's outgoing inter-node bytes (ranks of a node share
// its network link). Latency: the slower link class used.
inline double stepUs(const CommTopo& t, const std::vector<int>& from, const std::vector<int>& to,
                     double bytes) {
  if (bytes <= 0 || from.empty()) return 0.0;
  std::vector<double> egress(std::max(t.nnodes, 1), 0.0);
  bool intra = false, inter = false;
  for (size_t i = 0; i < from.size(); ++i) {
    const int a = nodeOfRank(t, from[i]), b = nodeOfRank(t, to[i]);
    if (a == b) {
      intra = true;
    } else {
      inter = true;
      if (a >= 0 && a < static_cast<int>(egress.size())) egress[a] += bytes;
    }
  }
  double us = 0;
  if (intra) us = std::max(us, linkUs(t.intraNode, bytes));
  if (inter) {
    const double e = *std::max_element(egress.begin(), egress.end());
    us = std::max(us, t.interNode.latencyUs + wireUs(t.interNode, e));
  }
  return us;
}

}  // namespace tide::pattern
