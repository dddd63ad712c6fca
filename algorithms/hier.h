// The hierarchical algorithms ("hier", see hier.cc) across their files: the
// groups and the node layout that every part works on (hier.cc), the
// Broadcast / Reduce chains (hier_chain.cc) and the cost model
// (hier_cost.cc). Internal to algorithms/.
#pragma once

#include <cstddef>
#include <vector>

#include "algorithms/patterns/patterns.h"
#include "core/algorithm.h"

namespace tide::hier {

// Ranks taking part in a sub-collective, in ring order, and this rank's index.
struct Group {
  std::vector<int> ranks;
  int idx = 0;
  int size() const { return static_cast<int>(ranks.size()); }
  int next() const { return ranks[pattern::mod(idx + 1, size())]; }
  int prev() const { return ranks[pattern::mod(idx - 1, size())]; }
};

// This rank's place in the nodes, and the groups it takes part in: its node
// (intra), the same local rank on every node (inter), the flat ring order.
struct Layout {
  const CommTopo* t;
  int node, local, nnodes;
  bool equal;  // every node has the same number of ranks
  Group intra, inter, flat;
};

Layout layoutOf(const ExecCtx& ctx);

// Broadcast and Reduce: a pipelined chain over one leader per node, each
// leader heading a chain over its node (hier_chain.cc).
Task hierBroadcast(ExecCtx& ctx);
Task hierReduce(ExecCtx& ctx);

// The cost model (AlgorithmInfo::predictUs; hier_cost.cc).
double predictHier(const CollArgs& a, const CommTopo& t, size_t chunkBytes);

}  // namespace tide::hier
