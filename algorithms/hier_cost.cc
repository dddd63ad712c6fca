// Cost model of the hierarchical algorithms (see hier.cc and hier.h):
// alpha-beta predictions per collective from the topology's link classes.
#include <algorithm>
#include <cmath>
#include <vector>

#include "algorithms/hier.h"
#include "algorithms/patterns/cost.h"
#include "core/algorithm.h"

namespace tide::hier {

namespace {

// ---- Cost model -----------------------------------------------------------------------------

// Every rank sends to its successor in its node (intra) or to its
// same-local-rank peer on the next node (inter), all at once. With unequal
// nodes, a rank whose local rank the next node lacks has no inter peer.
void ringPairs(const CommTopo& t, bool inter, std::vector<int>* from, std::vector<int>* to) {
  const int nn = static_cast<int>(t.nodeRanks.size());
  for (int i = 0; i < nn; ++i) {
    const auto& nr = t.nodeRanks[i];
    const int k = static_cast<int>(nr.size());
    for (int j = 0; j < k; ++j) {
      if (inter && j >= static_cast<int>(t.nodeRanks[(i + 1) % nn].size())) continue;
      from->push_back(nr[j]);
      to->push_back(inter ? t.nodeRanks[(i + 1) % nn][j] : nr[(j + 1) % k]);
    }
  }
}

// Flat ring over the ring order (the unequal-nodes fallback).
double flatRingUs(const CollArgs& a, const CommTopo& t, double chunk) {
  const int n = t.nranks;
  const std::vector<int> order = pattern::ringOrder(t, n);
  std::vector<int> to(n);
  for (int i = 0; i < n; ++i) to[i] = order[(i + 1) % n];
  const double es = static_cast<double>(a.elemSize);
  const double bytes = static_cast<double>(a.count) * es;
  if (a.type == CollType::AllReduce) {
    const double blocks = pattern::numChunks(bytes, static_cast<size_t>(chunk) * n);
    return blocks * 2 * (n - 1) * pattern::stepUs(t, order, to, bytes / (n * blocks)) +
           pattern::reduceUs(t, bytes * (n - 1) / n);
  }
  double us = (n - 1) * pattern::stepUs(t, order, to, bytes);
  if (a.type == CollType::ReduceScatter) us += pattern::reduceUs(t, bytes * (n - 1));
  return us;
}

}  // namespace

// Sums the phases (they run one after another); inter-node steps price each
// node's concurrent same-local-rank flows together on its network link.
double predictHier(const CollArgs& a, const CommTopo& t, size_t chunkBytes) {
  const int n = std::max(t.nranks, 1);
  const double es = static_cast<double>(a.elemSize);
  const double bytes = static_cast<double>(a.count) * es;
  if (n == 1 || bytes == 0) return bytes / 1e4;
  const double chunk = std::max(1.0, std::floor(chunkBytes / es)) * es;
  if (static_cast<int>(t.nodeRanks.size()) < 1 || static_cast<int>(t.nodeOf.size()) != n)
    return 1e30;
  const int nn = static_cast<int>(t.nodeRanks.size());
  bool equal = true;
  for (const auto& nr : t.nodeRanks) equal = equal && nr.size() == t.nodeRanks[0].size();
  const int k = static_cast<int>(t.nodeRanks[0].size());
  std::vector<int> fi, ti, fe, te;
  ringPairs(t, false, &fi, &ti);
  ringPairs(t, true, &fe, &te);
  auto intraStep = [&](double b) { return k > 1 ? pattern::stepUs(t, fi, ti, b) : 0.0; };
  auto interStep = [&](double b) { return nn > 1 ? pattern::stepUs(t, fe, te, b) : 0.0; };
  switch (a.type) {
    case CollType::AllReduce: {
      if (!equal) return flatRingUs(a, t, chunk);
      if (nn == 1) return 1.05 * flatRingUs(a, t, chunk);  // a ring that also waits on sends
      const double blocks = pattern::numChunks(bytes, static_cast<size_t>(chunk) * k);
      const double piece = bytes / blocks / k;  // one rank's share of a block
      // First block: its steps one after another. Then one block per
      // pipeline iteration, in which all 2(k-1) intra and 2(nn-1) inter
      // steps of different blocks share the links. A waiting rank has the
      // next block's inter-node transfer queued, so per block the network
      // costs its wire time, or the link latency when that is longer.
      const double first = 2 * (k - 1) * intraStep(piece) + 2 * (nn - 1) * interStep(piece / nn);
      const double interWire = interStep(2 * (nn - 1) * piece / nn) - t.interNode.latencyUs;
      const double steady =
          std::max(intraStep(2 * (k - 1) * piece), std::max(interWire, t.interNode.latencyUs));
      return first + (blocks - 1) * steady + pattern::reduceUs(t, bytes * (k - 1) / k) +
             pattern::reduceUs(t, piece * blocks * (nn - 1) / nn);
    }
    case CollType::AllGather:
    case CollType::ReduceScatter: {
      if (!equal) return flatRingUs(a, t, chunk);
      if (nn == 1) return 1.05 * flatRingUs(a, t, chunk);
      // Inter: nn-1 steps of one segment; intra: k-1 steps of nn segments.
      double us = (nn - 1) * interStep(bytes) +
                  (k - 1) * (intraStep(nn * bytes) + (nn - 1) * t.intraNode.latencyUs);
      if (a.type == CollType::ReduceScatter)
        us += pattern::reduceUs(t, bytes * ((k - 1) * nn + (nn - 1)));
      return us;
    }
    case CollType::Broadcast:
    case CollType::Reduce: {
      // Pipelined: fill along nn-1 leader hops and k-1 node hops, then one
      // chunk per stage at the slower class in use.
      const double chunks = pattern::numChunks(bytes, static_cast<size_t>(chunk));
      const double c = bytes / chunks;
      double stage = 0;
      if (k > 1) stage = std::max(stage, pattern::linkUs(t.intraNode, c));
      if (nn > 1) stage = std::max(stage, pattern::linkUs(t.interNode, c));
      double us = (nn - 1 + k - 1 + chunks - 1) * stage;
      if (a.type == CollType::Reduce) us += pattern::reduceUs(t, 2 * bytes);
      return us;
    }
    default:
      return 1e30;
  }
}

}  // namespace tide::hier
