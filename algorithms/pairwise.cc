// Pairwise-exchange AlltoAll: every transfer is posted at once, so each pair
// of ranks moves its block concurrently over its own pipe.
#include <algorithm>
#include <vector>

#include "algorithms/patterns/cost.h"
#include "algorithms/patterns/patterns.h"
#include "core/algorithm.h"
#include "core/registry.h"

namespace tide {

namespace {

Task pairwiseAlltoAll(ExecCtx& ctx) {
  const CollArgs a = ctx.args();
  const int n = ctx.nranks();
  const int r = ctx.rank();
  const size_t block = a.count * a.elemSize;
  const char* in = static_cast<const char*>(a.sendbuff);
  char* out = static_cast<char*>(a.recvbuff);
  ctx.copy(out + r * block, in + r * block, block);
  if (n == 1 || block == 0) co_return;
  const pattern::Pairwise pw{r, n};
  std::vector<Pending> all;
  for (int s = 1; s < n; ++s) {
    int to = pw.sendPeer(s), from = pw.recvPeer(s);
    all.push_back(ctx.send(to, in + to * block, block));
    all.push_back(ctx.recv(from, out + from * block, block));
  }
  co_await ctx.waitAll(all);
}

// All transfers at once: each rank's intra-node blocks share its memory
// link, each node's outgoing inter-node blocks share its network link.
double predictPairwise(const CollArgs& a, const CommTopo& t, size_t /*chunkBytes*/) {
  const int n = std::max(t.nranks, 1);
  const double block = static_cast<double>(a.count) * static_cast<double>(a.elemSize);
  if (n == 1 || block == 0) return block / 1e4;
  double intraUs = 0, interUs = 0;
  for (int node = 0; node < std::max(t.nnodes, 1); ++node) {
    const double k = node < static_cast<int>(t.nodeRanks.size())
                         ? static_cast<double>(t.nodeRanks[node].size())
                         : static_cast<double>(n);
    if (k > 1) intraUs = std::max(intraUs, pattern::linkUs(t.intraNode, (k - 1) * block));
    if (n - k > 0) interUs = std::max(interUs, pattern::linkUs(t.interNode, k * (n - k) * block));
  }
  return std::max(intraUs, interUs);
}

const AlgorithmInfo kPairwise = {
    "pairwise",
    "AlltoAll by pairwise exchange, all n-1 transfers in flight at once.",
    collBit(CollType::AlltoAll),
    nullptr,
    pairwiseAlltoAll,
    predictPairwise,
};

}  // namespace

TIDE_ON_LOAD(registerAlgorithm(&kPairwise));

}  // namespace tide
