// Pairwise-exchange AlltoAll: every transfer is posted at once, so each pair
// of ranks moves its block concurrently over its own pipe.
#include <vector>

#include "core/algorithm.h"
#include "core/registry.h"
#include "algorithms/patterns/patterns.h"

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

const AlgorithmInfo kPairwise = {
    "pairwise",
    "AlltoAll by pairwise exchange, all n-1 transfers in flight at once.",
    collBit(CollType::AlltoAll),
    nullptr,
    pairwiseAlltoAll,
};

}  // namespace

TIDE_ON_LOAD(registerAlgorithm(&kPairwise));

}  // namespace tide
