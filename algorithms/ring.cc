// Ring algorithms on host or device buffers: pipelined All-Reduce
// (reduce-scatter then all-gather, in blocks of nranks chunks), AllGather
// and ReduceScatter; and the pipelined chain Broadcast and Reduce, which are
// a ring with one link cut (hence the same table name, "ring"). Ranks follow
// the topology's ring order (CommTopo::rings[0]: each node's ranks adjacent),
// so a ring crosses each node boundary once.
#include <algorithm>
#include <cmath>
#include <vector>

#include "algorithms/patterns/cost.h"
#include "algorithms/patterns/patterns.h"
#include "core/algorithm.h"
#include "core/registry.h"

namespace tide {

namespace {

using pattern::partBegin;
using pattern::partLen;

// This rank's place in the ring order: pieces and segments are numbered by
// position; order[] turns positions into ranks.
struct RingMap {
  std::vector<int> order;
  pattern::Ring ring;
  explicit RingMap(const ExecCtx& ctx)
      : order(pattern::ringOrder(ctx.topo(), ctx.nranks())),
        ring{pattern::positionOf(order, ctx.rank()), ctx.nranks()} {}
  int next() const { return order[ring.next()]; }
  int prev() const { return order[ring.prev()]; }
};

// ---- All-Reduce ------------------------------------------------------------------

Task ringAllReduce(ExecCtx& ctx) {
  const CollArgs a = ctx.args();
  const int n = ctx.nranks();
  const size_t es = a.elemSize;
  const char* in = static_cast<const char*>(a.sendbuff);
  char* out = static_cast<char*>(a.recvbuff);
  if (n == 1 || a.count == 0) {
    ctx.copy(out, in, a.count * es);
    co_return;
  }
  const RingMap map(ctx);
  const pattern::Ring& ring = map.ring;
  const size_t block = ctx.chunkElems() * static_cast<size_t>(n);
  std::vector<Pending> sends;
  for (size_t base = 0; base < a.count; base += block) {
    const size_t b = std::min(block, a.count - base);
    auto off = [&](int k) { return (base + partBegin(b, n, k)) * es; };
    auto len = [&](int k) { return partLen(b, n, k) * es; };
    // Reduce-scatter: the piece sent at step s was completed at step s-1.
    sends.clear();
    for (int s = 0; s < n - 1; ++s) {
      int sp = ring.rsSend(s), rp = ring.rsRecv(s);
      sends.push_back(ctx.send(map.next(), (s == 0 ? in : out) + off(sp), len(sp)));
      Pending r = ctx.recvReduce(map.prev(), out + off(rp), in + off(rp), len(rp));
      co_await ctx.wait(r);
    }
    co_await ctx.waitAll(sends);
    // All-gather, starting from the piece this rank completed.
    sends.clear();
    for (int s = 0; s < n - 1; ++s) {
      int sp = ring.agSend(s), rp = ring.agRecv(s);
      sends.push_back(ctx.send(map.next(), out + off(sp), len(sp)));
      Pending r = ctx.recv(map.prev(), out + off(rp), len(rp));
      co_await ctx.wait(r);
    }
    co_await ctx.waitAll(sends);
  }
}

// ---- AllGather ---------------------------------------------------------------------

Task ringAllGather(ExecCtx& ctx) {
  const CollArgs a = ctx.args();
  const int n = ctx.nranks();
  const size_t seg = a.count * a.elemSize;
  char* out = static_cast<char*>(a.recvbuff);
  const RingMap map(ctx);
  const pattern::Ring& ring = map.ring;
  const std::vector<int>& order = map.order;
  ctx.copy(out + static_cast<size_t>(ctx.rank()) * seg, a.sendbuff, seg);
  if (n == 1 || seg == 0) co_return;
  const size_t chunk = ctx.chunkElems() * a.elemSize;
  std::vector<Pending> sends;
  for (size_t base = 0; base < seg; base += chunk) {
    const size_t len = std::min(chunk, seg - base);
    for (int s = 0; s < n - 1; ++s) {
      sends.push_back(ctx.send(map.next(), out + order[ring.gatherSend(s)] * seg + base, len));
      Pending r = ctx.recv(map.prev(), out + order[ring.gatherRecv(s)] * seg + base, len);
      co_await ctx.wait(r);
    }
  }
  co_await ctx.waitAll(sends);
}

// ---- ReduceScatter ----------------------------------------------------------------

Task ringReduceScatter(ExecCtx& ctx) {
  const CollArgs a = ctx.args();
  const int n = ctx.nranks();
  const size_t es = a.elemSize;
  const size_t seg = a.count * es;
  const char* in = static_cast<const char*>(a.sendbuff);
  char* out = static_cast<char*>(a.recvbuff);
  const RingMap map(ctx);
  const pattern::Ring& ring = map.ring;
  const std::vector<int>& order = map.order;
  if (n == 1 || seg == 0) {
    ctx.copy(out, in + static_cast<size_t>(ctx.rank()) * seg, seg);
    co_return;
  }
  const size_t chunk = ctx.chunkElems() * es;
  char* acc[2] = {nullptr, nullptr};
  if (n > 2) {
    acc[0] = static_cast<char*>(ctx.scratch(std::min(chunk, seg)));
    acc[1] = static_cast<char*>(ctx.scratch(std::min(chunk, seg)));
    if (!acc[0] || !acc[1]) co_return;
  }
  for (size_t base = 0; base < seg; base += chunk) {
    const size_t len = std::min(chunk, seg - base);
    // Partial sums travel round the ring in two scratch buffers; the last
    // step lands in the output. Both sides of a step finish before the next.
    for (int s = 0; s < n - 1; ++s) {
      const int sp = order[ring.rsSelfSend(s)], rp = order[ring.rsSelfRecv(s)];
      const char* src = s == 0 ? in + sp * seg + base : acc[(s - 1) % 2];
      char* dst = s == n - 2 ? out + base : acc[s % 2];
      Pending ps = ctx.send(map.next(), src, len);
      Pending pr = ctx.recvReduce(map.prev(), dst, in + rp * seg + base, len);
      co_await ctx.wait(ps, pr);
    }
  }
}

// ---- Broadcast (chain) ---------------------------------------------------------------

Task chainBroadcast(ExecCtx& ctx) {
  const CollArgs a = ctx.args();
  const RingMap map(ctx);
  const pattern::Chain chain{map.ring.rank, ctx.nranks(), pattern::positionOf(map.order, a.root)};
  auto up = [&] { return map.order[chain.up()]; };
  auto down = [&] { return map.order[chain.down()]; };
  const size_t bytes = a.count * a.elemSize;
  const char* in = static_cast<const char*>(a.sendbuff);
  char* out = static_cast<char*>(a.recvbuff);
  if (chain.first()) ctx.copy(out, in, bytes);
  if (ctx.nranks() == 1 || bytes == 0) co_return;
  const size_t chunk = ctx.chunkElems() * a.elemSize;
  const char* src = chain.first() ? in : out;
  std::vector<Pending> recvs, sends;
  if (!chain.first()) {
    for (size_t base = 0; base < bytes; base += chunk)
      recvs.push_back(ctx.recv(up(), out + base, std::min(chunk, bytes - base)));
  }
  size_t c = 0;
  for (size_t base = 0; base < bytes; base += chunk, ++c) {
    if (!chain.first()) co_await ctx.wait(recvs[c]);
    if (!chain.last()) sends.push_back(ctx.send(down(), src + base, std::min(chunk, bytes - base)));
  }
  co_await ctx.waitAll(sends);
}

// ---- Reduce (chain) -------------------------------------------------------------------

Task chainReduce(ExecCtx& ctx) {
  const CollArgs a = ctx.args();
  const int n = ctx.nranks();
  const RingMap map(ctx);
  const pattern::Chain chain{map.ring.rank, n, pattern::positionOf(map.order, a.root)};
  auto up = [&] { return map.order[chain.up()]; };
  auto down = [&] { return map.order[chain.down()]; };
  const size_t bytes = a.count * a.elemSize;
  const char* in = static_cast<const char*>(a.sendbuff);
  char* out = static_cast<char*>(a.recvbuff);
  if (n == 1 || bytes == 0) {
    if (chain.first()) ctx.copy(out, in, bytes);
    co_return;
  }
  const size_t chunk = ctx.chunkElems() * a.elemSize;
  constexpr int kWindow = 4;  // partial sums in flight per middle rank
  char* win[kWindow] = {};
  if (!chain.first() && !chain.last()) {
    for (char*& w : win) {
      w = static_cast<char*>(ctx.scratch(std::min(chunk, bytes)));
      if (w == nullptr) co_return;
    }
  }
  std::vector<Pending> sends;
  size_t c = 0;
  for (size_t base = 0; base < bytes; base += chunk, ++c) {
    const size_t len = std::min(chunk, bytes - base);
    if (chain.last()) {
      sends.push_back(ctx.send(up(), in + base, len));
      continue;
    }
    char* dst = chain.first() ? out + base : win[c % kWindow];
    if (!chain.first() && c >= kWindow) co_await ctx.wait(sends[c - kWindow]);
    Pending r = ctx.recvReduce(down(), dst, in + base, len);
    co_await ctx.wait(r);
    if (!chain.first()) sends.push_back(ctx.send(up(), dst, len));
  }
  co_await ctx.waitAll(sends);
}

Task runRing(ExecCtx& ctx) {
  switch (ctx.args().type) {
    case CollType::AllReduce:
      return ringAllReduce(ctx);
    case CollType::AllGather:
      return ringAllGather(ctx);
    case CollType::ReduceScatter:
      return ringReduceScatter(ctx);
    case CollType::Broadcast:
      return chainBroadcast(ctx);
    case CollType::Reduce:
      return chainReduce(ctx);
    default:
      return Task();
  }
}

// ---- Cost model ----------------------------------------------------------------------

// Every rank sends `bytes` to its ring successor at once (a cut ring for
// chains costs the same: its slowest link is still used).
double ringStepUs(const CommTopo& t, const std::vector<int>& order, double bytes) {
  std::vector<int> to(order.size());
  for (size_t i = 0; i < order.size(); ++i) to[i] = order[(i + 1) % order.size()];
  return pattern::stepUs(t, order, to, bytes);
}

double predictRing(const CollArgs& a, const CommTopo& t, size_t chunkBytes) {
  const int n = std::max(t.nranks, 1);
  const double es = static_cast<double>(a.elemSize);
  const double chunk = std::max(1.0, std::floor(chunkBytes / es)) * es;
  const double bytes = static_cast<double>(a.count) * es;
  if (n == 1 || bytes == 0) return bytes / 1e4;  // a local copy at ~10 GB/s
  const std::vector<int> order = pattern::ringOrder(t, n);
  switch (a.type) {
    case CollType::AllReduce: {
      // Blocks of n chunks; each block: n-1 reduce-scatter + n-1 all-gather steps.
      const double blocks = pattern::numChunks(bytes, static_cast<size_t>(chunk) * n);
      const double piece = bytes / (n * blocks);
      return blocks * 2 * (n - 1) * ringStepUs(t, order, piece) +
             pattern::reduceUs(t, bytes * (n - 1) / n);
    }
    case CollType::AllGather:
    case CollType::ReduceScatter: {
      const double chunks = pattern::numChunks(bytes, static_cast<size_t>(chunk));
      double us = chunks * (n - 1) * ringStepUs(t, order, bytes / chunks);
      if (a.type == CollType::ReduceScatter) us += pattern::reduceUs(t, bytes * (n - 1));
      return us;
    }
    case CollType::Broadcast:
    case CollType::Reduce: {
      // Pipelined chain: n-1 hops to fill, then one chunk per stage.
      const double chunks = pattern::numChunks(bytes, static_cast<size_t>(chunk));
      double us = (n - 1 + chunks - 1) * ringStepUs(t, order, bytes / chunks);
      if (a.type == CollType::Reduce) us += pattern::reduceUs(t, bytes);
      return us;
    }
    default:
      return 1e30;
  }
}

const AlgorithmInfo kRing = {
    "ring",
    "Pipelined ring: All-Reduce as reduce-scatter + all-gather, ring AllGather and "
    "ReduceScatter, chain Broadcast and Reduce. Bandwidth-optimal; 2(n-1) steps.",
    collBit(CollType::AllReduce) | collBit(CollType::AllGather) | collBit(CollType::ReduceScatter) |
        collBit(CollType::Broadcast) | collBit(CollType::Reduce),
    nullptr,
    runRing,
    predictRing,
};

}  // namespace

TIDE_ON_LOAD(registerAlgorithm(&kRing));

}  // namespace tide
