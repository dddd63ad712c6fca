// Hierarchical Broadcast and Reduce (see hier.cc and hier.h): a pipelined
// chain over one leader per node (the root on its node), each leader
// heading a chain over its node. Need no equal node sizes.
#include <algorithm>
#include <vector>

#include "algorithms/hier.h"
#include "algorithms/patterns/cost.h"
#include "algorithms/patterns/patterns.h"
#include "core/algorithm.h"

namespace tide::hier {

namespace {

// ---- Broadcast and Reduce: leader chain + node chains ------------------------------------

// Parent (-1 at the root) and children (at most two) of this rank.
struct TreeLinks {
  int parent = -1;
  std::vector<int> children;
};

TreeLinks rootedLinks(const ExecCtx& ctx, int root) {
  const Layout L = layoutOf(ctx);
  const CommTopo& t = *L.t;
  const int n = ctx.nranks(), r = ctx.rank();
  TreeLinks out;
  if (static_cast<int>(t.nodeOf.size()) != n || t.nodeRanks.empty()) {
    // No node data: a chain in rank order from the root.
    const pattern::Chain c{r, n, root};
    if (!c.first()) out.parent = c.up();
    if (!c.last()) out.children.push_back(c.down());
    return out;
  }
  const int nn = static_cast<int>(t.nodeRanks.size());
  const int rootNode = t.nodeOf[root], rootLocal = t.localRankOf[root];
  auto leaderOf = [&](int node) {
    const auto& nr = t.nodeRanks[node];
    return rootLocal < static_cast<int>(nr.size()) ? nr[rootLocal] : nr[0];
  };
  // Node chain: the node's ranks starting at its leader.
  const auto& mine = t.nodeRanks[L.node];
  const int k = static_cast<int>(mine.size());
  const int lpos = pattern::positionOf(mine, leaderOf(L.node));
  const int my = pattern::mod(L.intra.idx - lpos, k);
  if (my > 0) out.parent = mine[pattern::mod(lpos + my - 1, k)];
  if (my + 1 < k) out.children.push_back(mine[pattern::mod(lpos + my + 1, k)]);
  if (my == 0) {
    // Leader chain over nodes starting at the root's node.
    const int np = pattern::mod(L.node - rootNode, nn);
    if (np > 0) out.parent = leaderOf(pattern::mod(L.node - 1, nn));
    if (np + 1 < nn) out.children.push_back(leaderOf(pattern::mod(L.node + 1, nn)));
  }
  return out;
}

}  // namespace

Task hierBroadcast(ExecCtx& ctx) {
  const CollArgs a = ctx.args();
  const size_t bytes = a.count * a.elemSize;
  const char* in = static_cast<const char*>(a.sendbuff);
  char* out = static_cast<char*>(a.recvbuff);
  const bool isRoot = ctx.rank() == a.root;
  if (isRoot) ctx.copy(out, in, bytes);
  if (ctx.nranks() == 1 || bytes == 0) co_return;
  const TreeLinks tl = rootedLinks(ctx, a.root);
  const size_t chunk = ctx.chunkElems() * a.elemSize;
  std::vector<Pending> recvs, sends;
  if (tl.parent >= 0) {
    for (size_t base = 0; base < bytes; base += chunk)
      recvs.push_back(ctx.recv(tl.parent, out + base, std::min(chunk, bytes - base)));
  }
  size_t c = 0;
  for (size_t base = 0; base < bytes; base += chunk, ++c) {
    if (tl.parent >= 0) co_await ctx.wait(recvs[c]);
    for (int child : tl.children)
      sends.push_back(ctx.send(child, out + base, std::min(chunk, bytes - base)));
  }
  co_await ctx.waitAll(sends);
}

Task hierReduce(ExecCtx& ctx) {
  const CollArgs a = ctx.args();
  const size_t bytes = a.count * a.elemSize;
  const char* in = static_cast<const char*>(a.sendbuff);
  char* out = static_cast<char*>(a.recvbuff);
  const bool isRoot = ctx.rank() == a.root;
  if (ctx.nranks() == 1 || bytes == 0) {
    if (isRoot) ctx.copy(out, in, bytes);
    co_return;
  }
  const TreeLinks tl = rootedLinks(ctx, a.root);
  const size_t chunk = ctx.chunkElems() * a.elemSize;
  const size_t first = std::min(chunk, bytes);
  constexpr int kWindow = 4;  // partial sums in flight towards the parent
  char* win[kWindow] = {};
  char* extra = nullptr;  // the second child's chunk
  if (!isRoot && !tl.children.empty()) {
    for (char*& w : win) {
      w = static_cast<char*>(ctx.scratch(first));
      if (w == nullptr) co_return;
    }
  }
  if (tl.children.size() > 1) {
    extra = static_cast<char*>(ctx.scratch(first));
    if (extra == nullptr) co_return;
  }
  std::vector<Pending> sends;
  size_t c = 0;
  for (size_t base = 0; base < bytes; base += chunk, ++c) {
    const size_t len = std::min(chunk, bytes - base);
    if (tl.children.empty()) {
      sends.push_back(ctx.send(tl.parent, in + base, len));
      continue;
    }
    char* dst = isRoot ? out + base : win[c % kWindow];
    if (!isRoot && c >= kWindow) co_await ctx.wait(sends[c - kWindow]);
    Pending r0 = ctx.recvReduce(tl.children[0], dst, in + base, len);
    Pending r1;
    if (tl.children.size() > 1) r1 = ctx.recv(tl.children[1], extra, len);
    co_await ctx.wait(r0, r1);
    if (tl.children.size() > 1) ctx.reduce(dst, dst, extra, len / a.elemSize);
    if (!isRoot) sends.push_back(ctx.send(tl.parent, dst, len));
  }
  co_await ctx.waitAll(sends);
}

}  // namespace tide::hier
