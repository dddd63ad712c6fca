// Ring search over the ranks of one node.
//
// A ring (or, across nodes, the path a ring takes through this node) is
// scored lexicographically: highest bottleneck bandwidth, then fewest
// socket crossings, then the best path classes (sum of PathType ranks),
// then the smallest rank order. Exact branch-and-bound up to kExactLimit
// ranks, greedy plus 2-opt above. Pure and deterministic.
#pragma once

#include <vector>

#include "core/topology.h"

namespace tide::topo {

constexpr int kExactLimit = 10;

struct RingCost {
  PathType type = PathType::Self;
  double gbs = 0;
  bool crossSocket = false;
};

// `cost[i * n + j]` describes the path from local index i to j. The result
// is a permutation of 0..n-1 starting with `start`. When `closed`, the edge
// from the last back to `start` counts (a single-node ring); otherwise the
// ring leaves the node after the last element.
std::vector<int> searchRing(int n, const std::vector<RingCost>& cost, int start, bool closed);

// Score of an order, for tests and logs: bottleneck GB/s and socket crossings.
double ringBottleneck(const std::vector<int>& order, const std::vector<RingCost>& cost, int n,
                      bool closed);
int ringCrossings(const std::vector<int>& order, const std::vector<RingCost>& cost, int n,
                  bool closed);

}  // namespace tide::topo
