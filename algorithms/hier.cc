// Hierarchical algorithms ("hier"): the inter-node part runs only between
// ranks with the same local rank, so each node sends the minimum over the
// network and the rest moves inside nodes.
//   All-Reduce:     intra-node reduce-scatter -> inter-node all-reduce of each
//                   rank's piece among same-local-rank peers -> intra-node
//                   all-gather (in blocks of nodeSize chunks).
//   AllGather:      inter-node all-gather among same-local-rank peers ->
//                   intra-node all-gather of what each rank collected.
//   ReduceScatter:  intra-node reduce-scatter of the segments each local rank
//                   is responsible for -> inter-node reduce-scatter.
//   Broadcast/Reduce: pipelined chain over one leader per node (the root on
//                   its node), each leader heading a chain over its node.
// Nodes with unequal rank counts: All-Reduce, AllGather and ReduceScatter
// fall back to flat rings over the topology's ring order (still correct);
// Broadcast and Reduce need no equal counts. On one node everything runs
// inside the node.
//
// Files: the Broadcast / Reduce chains are in hier_chain.cc, the cost model
// in hier_cost.cc; hier.h joins them.
#include "algorithms/hier.h"

#include <algorithm>
#include <vector>

#include "algorithms/patterns/cost.h"
#include "algorithms/patterns/patterns.h"
#include "core/algorithm.h"
#include "core/registry.h"

namespace tide::hier {

namespace {

using pattern::partBegin;
using pattern::partLen;

using SegList = std::vector<char*>;  // a member's piece: segments of equal size

// ---- Group rings (all members post the same sequence) -----------------------------

// Ring reduce-scatter in All-Reduce layout: afterwards the elements
// partBegin/partLen(count, k, g.idx) of out hold the group's reduction.
Task groupRsAr(ExecCtx& ctx, const Group& g, const char* in, char* out, size_t count) {
  const int k = g.size();
  const size_t es = ctx.args().elemSize;
  if (k == 1) {
    ctx.copy(out, in, count * es);
    co_return;
  }
  const pattern::Ring ring{g.idx, k};
  for (int s = 0; s < k - 1; ++s) {
    const int sp = ring.rsSelfSend(s), rp = ring.rsSelfRecv(s);
    Pending ps = ctx.send(g.next(), (s == 0 ? in : out) + partBegin(count, k, sp) * es,
                          partLen(count, k, sp) * es);
    const size_t ro = partBegin(count, k, rp) * es;
    Pending pr = ctx.recvReduce(g.prev(), out + ro, in + ro, partLen(count, k, rp) * es);
    co_await ctx.wait(ps, pr);
  }
}

// Ring all-gather in All-Reduce layout: piece g.idx of buf is complete on
// entry; every piece is on exit.
Task groupAgAr(ExecCtx& ctx, const Group& g, char* buf, size_t count) {
  const int k = g.size();
  const size_t es = ctx.args().elemSize;
  const pattern::Ring ring{g.idx, k};
  for (int s = 0; s < k - 1; ++s) {
    const int sp = ring.gatherSend(s), rp = ring.gatherRecv(s);
    Pending ps = ctx.send(g.next(), buf + partBegin(count, k, sp) * es, partLen(count, k, sp) * es);
    Pending pr = ctx.recv(g.prev(), buf + partBegin(count, k, rp) * es, partLen(count, k, rp) * es);
    co_await ctx.wait(ps, pr);
  }
}

// In-place ring All-Reduce of count elements of buf, in blocks of k chunks.
Task groupAllReduce(ExecCtx& ctx, const Group& g, const char* in, char* out, size_t count) {
  const size_t es = ctx.args().elemSize;
  if (g.size() == 1) {
    ctx.copy(out, in, count * es);
    co_return;
  }
  const size_t block = ctx.chunkElems() * static_cast<size_t>(g.size());
  for (size_t base = 0; base < count; base += block) {
    const size_t b = std::min(block, count - base);
    co_await groupRsAr(ctx, g, in + base * es, out + base * es, b);
    co_await groupAgAr(ctx, g, out + base * es, b);
  }
}

// Ring all-gather of pieces: pieces[j] (member j's segments) is filled on
// member j on entry and everywhere on exit.
Task groupAllGather(ExecCtx& ctx, const Group& g, const std::vector<SegList>& pieces, size_t seg) {
  const int k = g.size();
  const pattern::Ring ring{g.idx, k};
  std::vector<Pending> ps;
  for (int s = 0; s < k - 1; ++s) {
    ps.clear();
    for (char* p : pieces[ring.gatherSend(s)]) ps.push_back(ctx.send(g.next(), p, seg));
    for (char* p : pieces[ring.gatherRecv(s)]) ps.push_back(ctx.recv(g.prev(), p, seg));
    co_await ctx.waitAll(ps);
  }
}

// Ring reduce-scatter of pieces: member j ends with the group's reduction of
// pieces[j] (segment-wise) in dst. Partial sums travel in two scratch lists.
Task groupReduceScatter(ExecCtx& ctx, const Group& g, const std::vector<SegList>& pieces,
                        const SegList& dst, size_t seg) {
  const int k = g.size();
  const size_t m = dst.size();
  if (k == 1) {
    for (size_t i = 0; i < m; ++i) ctx.copy(dst[i], pieces[g.idx][i], seg);
    co_return;
  }
  SegList acc[2];
  if (k > 2) {
    for (SegList& l : acc) {
      char* base = static_cast<char*>(ctx.scratch(m * seg));
      if (base == nullptr) co_return;
      for (size_t i = 0; i < m; ++i) l.push_back(base + i * seg);
    }
  }
  const pattern::Ring ring{g.idx, k};
  std::vector<Pending> ps;
  for (int s = 0; s < k - 1; ++s) {
    const SegList& from = s == 0 ? pieces[ring.rsSelfSend(s)] : acc[(s - 1) % 2];
    const SegList& to = s == k - 2 ? dst : acc[s % 2];
    const SegList& mine = pieces[ring.rsSelfRecv(s)];
    ps.clear();
    for (size_t i = 0; i < m; ++i) ps.push_back(ctx.send(g.next(), from[i], seg));
    for (size_t i = 0; i < m; ++i) ps.push_back(ctx.recvReduce(g.prev(), to[i], mine[i], seg));
    co_await ctx.waitAll(ps);
  }
}

}  // namespace

// ---- Layout ----------------------------------------------------------------------------

Layout layoutOf(const ExecCtx& ctx) {
  const CommTopo& t = ctx.topo();
  const int r = ctx.rank(), n = ctx.nranks();
  Layout L;
  L.t = &t;
  const bool haveNodes = static_cast<int>(t.nodeOf.size()) == n &&
                         static_cast<int>(t.localRankOf.size()) == n && !t.nodeRanks.empty();
  L.node = haveNodes ? t.nodeOf[r] : 0;
  L.local = haveNodes ? t.localRankOf[r] : r;
  L.nnodes = haveNodes ? static_cast<int>(t.nodeRanks.size()) : 1;
  L.equal = true;
  if (haveNodes) {
    for (const auto& nr : t.nodeRanks) L.equal = L.equal && nr.size() == t.nodeRanks[0].size();
    L.intra.ranks = t.nodeRanks[L.node];
    for (int i = 0; i < L.nnodes; ++i) {
      if (L.local < static_cast<int>(t.nodeRanks[i].size()))
        L.inter.ranks.push_back(t.nodeRanks[i][L.local]);
    }
  } else {
    for (int q = 0; q < n; ++q) L.intra.ranks.push_back(q);
    L.inter.ranks = {r};
  }
  L.intra.idx = pattern::positionOf(L.intra.ranks, r);
  L.inter.idx = pattern::positionOf(L.inter.ranks, r);
  L.flat.ranks = pattern::ringOrder(t, n);
  L.flat.idx = pattern::positionOf(L.flat.ranks, r);
  return L;
}

namespace {

// ---- All-Reduce --------------------------------------------------------------------------

// Posts step `step` of one block's hierarchical All-Reduce (count elements
// at in/out): steps [0, k-1) intra reduce-scatter, then nn-1 inter
// reduce-scatter and nn-1 inter all-gather steps on this rank's piece, then
// k-1 intra all-gather steps. Returns false when the block has no such step.
bool postHierStep(ExecCtx& ctx, const Layout& L, const char* in, char* out, size_t count, int step,
                  std::vector<Pending>* ps) {
  const size_t es = ctx.args().elemSize;
  const int k = L.intra.size(), nn = L.inter.size();
  auto piece = [&](size_t cnt, int parts, int q) { return partBegin(cnt, parts, q) * es; };
  auto plen = [&](size_t cnt, int parts, int q) { return partLen(cnt, parts, q) * es; };
  if (step < 0) return false;
  if (step < k - 1) {
    const pattern::Ring ring{L.intra.idx, k};
    const int sp = ring.rsSelfSend(step), rp = ring.rsSelfRecv(step);
    ps->push_back(
        ctx.send(L.intra.next(), (step == 0 ? in : out) + piece(count, k, sp), plen(count, k, sp)));
    ps->push_back(ctx.recvReduce(L.intra.prev(), out + piece(count, k, rp),
                                 in + piece(count, k, rp), plen(count, k, rp)));
    return true;
  }
  if (k == 1 && step == 0) ctx.copy(out, in, count * es);
  step -= k - 1;
  char* mine = out + piece(count, k, L.intra.idx);
  const size_t mc = partLen(count, k, L.intra.idx);
  const pattern::Ring ir{L.inter.idx, nn};
  if (step < nn - 1) {
    const int sp = ir.rsSelfSend(step), rp = ir.rsSelfRecv(step);
    ps->push_back(ctx.send(L.inter.next(), mine + piece(mc, nn, sp), plen(mc, nn, sp)));
    ps->push_back(ctx.recvReduce(L.inter.prev(), mine + piece(mc, nn, rp), mine + piece(mc, nn, rp),
                                 plen(mc, nn, rp)));
    return true;
  }
  step -= nn - 1;
  if (step < nn - 1) {
    const int sp = ir.gatherSend(step), rp = ir.gatherRecv(step);
    ps->push_back(ctx.send(L.inter.next(), mine + piece(mc, nn, sp), plen(mc, nn, sp)));
    ps->push_back(ctx.recv(L.inter.prev(), mine + piece(mc, nn, rp), plen(mc, nn, rp)));
    return true;
  }
  step -= nn - 1;
  if (step < k - 1) {
    const pattern::Ring ring{L.intra.idx, k};
    const int sp = ring.gatherSend(step), rp = ring.gatherRecv(step);
    ps->push_back(ctx.send(L.intra.next(), out + piece(count, k, sp), plen(count, k, sp)));
    ps->push_back(ctx.recv(L.intra.prev(), out + piece(count, k, rp), plen(count, k, rp)));
    return true;
  }
  return false;
}

Task hierAllReduce(ExecCtx& ctx) {
  const CollArgs a = ctx.args();
  const size_t es = a.elemSize;
  const char* in = static_cast<const char*>(a.sendbuff);
  char* out = static_cast<char*>(a.recvbuff);
  if (ctx.nranks() == 1 || a.count == 0) {
    ctx.copy(out, in, a.count * es);
    co_return;
  }
  const Layout L = layoutOf(ctx);
  if (!L.equal) {
    co_await groupAllReduce(ctx, L.flat, in, out, a.count);
    co_return;
  }
  // Blocks of k chunks, software-pipelined: block b's step s is posted in
  // iteration b + s, so one block's inter-node steps overlap other blocks'
  // intra-node steps. Every rank posts the same (iteration, block, step)
  // sequence, so each pipe sees its messages in the same order on both ends.
  // There is no barrier per iteration: a step waits only for the previous
  // step of its own block (whose sends read, and whose receives write, the
  // data it moves on). Within an iteration the newest block goes first, so
  // when a step waits for the network, the next block's inter-node transfer
  // is already queued behind the one in flight: the link does not idle while
  // this rank wakes up and posts.
  const int k = L.intra.size();
  const size_t block = ctx.chunkElems() * static_cast<size_t>(k);
  const size_t nblocks = (a.count + block - 1) / block;
  const size_t steps = 2 * (k - 1) + 2 * (L.inter.size() - 1);  // per block
  // The transfers of each block's latest posted step.
  std::vector<std::vector<Pending>> last(nblocks);
  for (size_t it = 0; it + 1 < nblocks + steps; ++it) {
    const size_t lo = it >= steps ? it - steps + 1 : 0;
    for (size_t bi = std::min(it, nblocks - 1) + 1; bi-- > lo;) {
      if (!last[bi].empty()) co_await ctx.waitAll(last[bi]);
      const size_t base = bi * block;
      const size_t b = std::min(block, a.count - base);
      last[bi].clear();
      postHierStep(ctx, L, in + base * es, out + base * es, b, static_cast<int>(it - bi),
                   &last[bi]);
    }
  }
  for (const auto& ps : last) {
    if (!ps.empty()) co_await ctx.waitAll(ps);
  }
}

// ---- AllGather -----------------------------------------------------------------------------

Task hierAllGather(ExecCtx& ctx) {
  const CollArgs a = ctx.args();
  const size_t seg = a.count * a.elemSize;
  char* out = static_cast<char*>(a.recvbuff);
  ctx.copy(out + static_cast<size_t>(ctx.rank()) * seg, a.sendbuff, seg);
  if (ctx.nranks() == 1 || seg == 0) co_return;
  const Layout L = layoutOf(ctx);
  auto at = [&](int rank) { return out + static_cast<size_t>(rank) * seg; };
  if (!L.equal) {
    std::vector<SegList> pieces;
    for (int q : L.flat.ranks) pieces.push_back({at(q)});
    co_await groupAllGather(ctx, L.flat, pieces, seg);
    co_return;
  }
  const auto& nodes = L.t->nodeRanks;
  std::vector<SegList> inter, intra;
  for (int q : L.inter.ranks) inter.push_back({at(q)});
  co_await groupAllGather(ctx, L.inter, inter, seg);
  for (int j = 0; j < L.intra.size(); ++j) {
    SegList l;
    for (const auto& nr : nodes) l.push_back(at(nr[j]));
    intra.push_back(std::move(l));
  }
  co_await groupAllGather(ctx, L.intra, intra, seg);
}

// ---- ReduceScatter -------------------------------------------------------------------------

Task hierReduceScatter(ExecCtx& ctx) {
  const CollArgs a = ctx.args();
  const size_t seg = a.count * a.elemSize;
  char* in = const_cast<char*>(static_cast<const char*>(a.sendbuff));
  char* out = static_cast<char*>(a.recvbuff);
  if (ctx.nranks() == 1 || seg == 0) {
    ctx.copy(out, in + static_cast<size_t>(ctx.rank()) * seg, seg);
    co_return;
  }
  const Layout L = layoutOf(ctx);
  auto at = [&](int rank) { return in + static_cast<size_t>(rank) * seg; };
  if (!L.equal) {
    std::vector<SegList> pieces;
    for (int q : L.flat.ranks) pieces.push_back({at(q)});
    const SegList dst(1, out);
    co_await groupReduceScatter(ctx, L.flat, pieces, dst, seg);
    co_return;
  }
  const auto& nodes = L.t->nodeRanks;
  const int nn = L.nnodes;
  // Intra: local rank j collects its node's sums of segments (i, j), every node i.
  char* part = static_cast<char*>(ctx.scratch(static_cast<size_t>(nn) * seg));
  if (part == nullptr) co_return;
  SegList mine;
  for (int i = 0; i < nn; ++i) mine.push_back(part + static_cast<size_t>(i) * seg);
  std::vector<SegList> intra;
  for (int j = 0; j < L.intra.size(); ++j) {
    SegList l;
    for (const auto& nr : nodes) l.push_back(at(nr[j]));
    intra.push_back(std::move(l));
  }
  co_await groupReduceScatter(ctx, L.intra, intra, mine, seg);
  // Inter: node i's partial of segment (i, j) goes to (i, j).
  std::vector<SegList> inter;
  inter.reserve(nn);
  for (int i = 0; i < nn; ++i) inter.push_back({mine[i]});
  const SegList dst(1, out);
  co_await groupReduceScatter(ctx, L.inter, inter, dst, seg);
}

Task runHier(ExecCtx& ctx) {
  switch (ctx.args().type) {
    case CollType::AllReduce:
      return hierAllReduce(ctx);
    case CollType::AllGather:
      return hierAllGather(ctx);
    case CollType::ReduceScatter:
      return hierReduceScatter(ctx);
    case CollType::Broadcast:
      return hierBroadcast(ctx);
    case CollType::Reduce:
      return hierReduce(ctx);
    default:
      return Task();
  }
}

const AlgorithmInfo kHier = {
    "hier",
    "Hierarchical: intra-node reduce-scatter / inter-node among same-local-rank peers / "
    "intra-node all-gather for All-Reduce; two-level AllGather, ReduceScatter, Broadcast and "
    "Reduce. Cuts inter-node traffic to one share per node.",
    collBit(CollType::AllReduce) | collBit(CollType::AllGather) | collBit(CollType::ReduceScatter) |
        collBit(CollType::Broadcast) | collBit(CollType::Reduce),
    nullptr,
    runHier,
    predictHier,
};

}  // namespace

TIDE_ON_LOAD(registerAlgorithm(&kHier));

}  // namespace tide::hier
