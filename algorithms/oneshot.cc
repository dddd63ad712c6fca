// One-shot algorithms for small messages: every rank exchanges its whole
// contribution directly with every peer that needs it, in one step, so the
// latency is one transfer instead of the ring's 2(n-1) dependent steps.
// Bandwidth cost grows with n (each rank moves (n-1) x the buffer), so the
// cost model (predictUs) hands larger sizes to the ring.
//
// Determinism: reductions combine contributions in rank order (rank 0's
// first), so every rank produces the same bits for any commutative op. With
// two ranks the combine happens inside the transport's reducing receive
// (a OP b == b OP a bit for bit).
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/algorithm.h"
#include "core/config.h"
#include "core/registry.h"

namespace tide {

namespace {

// Largest message (bytes per rank buffer) this algorithm accepts; beyond it
// the (n-1)-fold traffic makes it a poor choice whatever the model says.
constexpr size_t kMaxBytes = 1 << 20;

bool overlaps(const void* a, const void* b, size_t bytes) {
  const char* x = static_cast<const char*>(a);
  const char* y = static_cast<const char*>(b);
  return bytes > 0 && x < y + bytes && y < x + bytes;
}

// out = part(0) OP part(1) OP ... OP part(n-1), left to right, where part(r)
// is block r of `all` (one block of `bytes` per rank, received) and part(me)
// is `own`. When `own` overlaps `out` (in-place calls) it is first copied into
// its unused block of `all`, so writing `out` never clobbers an operand that
// is still to be read.
void combineInRankOrder(ExecCtx& ctx, char* out, const char* own, char* all, int me, int n,
                        size_t bytes, size_t count) {
  if (overlaps(own, out, bytes)) {
    char* slot = all + static_cast<size_t>(me) * bytes;
    std::memcpy(slot, own, bytes);
    own = slot;
  }
  auto part = [&](int r) -> const void* {
    return r == me ? static_cast<const void*>(own) : all + static_cast<size_t>(r) * bytes;
  };
  reduceInRankOrder(ctx.args().reduce, out, n, count, part);
}

// ---- All-Reduce ----------------------------------------------------------------

Task oneshotAllReduce(ExecCtx& ctx) {
  const CollArgs a = ctx.args();
  const int n = ctx.nranks();
  const int me = ctx.rank();
  const size_t bytes = a.count * a.elemSize;
  const char* in = static_cast<const char*>(a.sendbuff);
  char* out = static_cast<char*>(a.recvbuff);
  if (n == 1 || bytes == 0) {
    ctx.copy(out, in, bytes);
    co_return;
  }
  if (n == 2) {
    const int peer = 1 - me;
    // The send may still read `in` while the reducing receive writes `out`:
    // an in-place call sends from a private copy.
    if (overlaps(in, out, bytes)) {
      char* tmp = static_cast<char*>(ctx.scratch(bytes));
      if (tmp == nullptr) co_return;
      std::memcpy(tmp, in, bytes);
      in = tmp;
    }
    Pending s = ctx.send(peer, in, bytes);
    Pending r = ctx.recvReduce(peer, out, in, bytes);
    co_await ctx.wait(s, r);
    co_return;
  }
  // n > 2: gather every peer's buffer, then combine in rank order.
  char* all = static_cast<char*>(ctx.scratch(bytes * static_cast<size_t>(n)));
  if (all == nullptr) co_return;
  std::vector<Pending> ps;
  ps.reserve(2 * static_cast<size_t>(n));
  for (int k = 1; k < n; ++k) {
    const int to = (me + k) % n;
    const int from = (me - k + n) % n;
    ps.push_back(ctx.send(to, in, bytes));
    ps.push_back(ctx.recv(from, all + static_cast<size_t>(from) * bytes, bytes));
  }
  co_await ctx.waitAll(ps);
  combineInRankOrder(ctx, out, in, all, me, n, bytes, a.count);
}

// ---- Reduce --------------------------------------------------------------------

Task oneshotReduce(ExecCtx& ctx) {
  const CollArgs a = ctx.args();
  const int n = ctx.nranks();
  const int me = ctx.rank();
  const size_t bytes = a.count * a.elemSize;
  const char* in = static_cast<const char*>(a.sendbuff);
  char* out = static_cast<char*>(a.recvbuff);
  if (bytes == 0) co_return;
  if (n == 1) {
    ctx.copy(out, in, bytes);
    co_return;
  }
  if (me != a.root) {
    Pending s = ctx.send(a.root, in, bytes);
    co_await ctx.wait(s);
    co_return;
  }
  char* all = static_cast<char*>(ctx.scratch(bytes * static_cast<size_t>(n)));
  if (all == nullptr) co_return;
  std::vector<Pending> ps;
  ps.reserve(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    if (r != me) ps.push_back(ctx.recv(r, all + static_cast<size_t>(r) * bytes, bytes));
  }
  co_await ctx.waitAll(ps);
  combineInRankOrder(ctx, out, in, all, me, n, bytes, a.count);
}

// ---- Broadcast -----------------------------------------------------------------

Task oneshotBroadcast(ExecCtx& ctx) {
  const CollArgs a = ctx.args();
  const int n = ctx.nranks();
  const int me = ctx.rank();
  const size_t bytes = a.count * a.elemSize;
  if (bytes == 0) co_return;
  if (me == a.root) {
    ctx.copy(a.recvbuff, a.sendbuff, bytes);
    if (n == 1) co_return;
    std::vector<Pending> ps;
    ps.reserve(static_cast<size_t>(n));
    for (int k = 1; k < n; ++k) ps.push_back(ctx.send((me + k) % n, a.sendbuff, bytes));
    co_await ctx.waitAll(ps);
    co_return;
  }
  Pending r = ctx.recv(a.root, a.recvbuff, bytes);
  co_await ctx.wait(r);
}

// ---- AllGather -----------------------------------------------------------------

Task oneshotAllGather(ExecCtx& ctx) {
  const CollArgs a = ctx.args();
  const int n = ctx.nranks();
  const int me = ctx.rank();
  const size_t block = a.count * a.elemSize;
  char* out = static_cast<char*>(a.recvbuff);
  if (block == 0) co_return;
  const char* mine = out + static_cast<size_t>(me) * block;
  if (static_cast<const char*>(a.sendbuff) != mine) ctx.copy(out + me * block, a.sendbuff, block);
  std::vector<Pending> ps;
  ps.reserve(2 * static_cast<size_t>(n));
  for (int k = 1; k < n; ++k) {
    const int to = (me + k) % n;
    const int from = (me - k + n) % n;
    ps.push_back(ctx.send(to, mine, block));
    ps.push_back(ctx.recv(from, out + static_cast<size_t>(from) * block, block));
  }
  co_await ctx.waitAll(ps);
}

// ---- ReduceScatter -------------------------------------------------------------

Task oneshotReduceScatter(ExecCtx& ctx) {
  const CollArgs a = ctx.args();
  const int n = ctx.nranks();
  const int me = ctx.rank();
  const size_t block = a.count * a.elemSize;
  const char* in = static_cast<const char*>(a.sendbuff);
  char* out = static_cast<char*>(a.recvbuff);
  if (block == 0) co_return;
  if (n == 1) {
    ctx.copy(out, in, block);
    co_return;
  }
  char* all = static_cast<char*>(ctx.scratch(block * static_cast<size_t>(n)));
  if (all == nullptr) co_return;
  std::vector<Pending> ps;
  ps.reserve(2 * static_cast<size_t>(n));
  for (int k = 1; k < n; ++k) {
    const int to = (me + k) % n;
    const int from = (me - k + n) % n;
    ps.push_back(ctx.send(to, in + static_cast<size_t>(to) * block, block));
    ps.push_back(ctx.recv(from, all + static_cast<size_t>(from) * block, block));
  }
  // The output may overlap the input (in place: out is block `me` of in);
  // nothing is written before every send has copied its block.
  co_await ctx.waitAll(ps);
  combineInRankOrder(ctx, out, in + static_cast<size_t>(me) * block, all, me, n, block, a.count);
}

Task runOneshot(ExecCtx& ctx) {
  switch (ctx.args().type) {
    case CollType::AllReduce:
      return oneshotAllReduce(ctx);
    case CollType::Reduce:
      return oneshotReduce(ctx);
    case CollType::Broadcast:
      return oneshotBroadcast(ctx);
    case CollType::AllGather:
      return oneshotAllGather(ctx);
    case CollType::ReduceScatter:
      return oneshotReduceScatter(ctx);
    default:
      return Task();
  }
}

// Bytes of the buffer each rank contributes (and receives from each peer).
size_t unitBytes(const CollArgs& a) { return a.count * a.elemSize; }

bool oneshotSupports(const CollArgs& a, int nranks) {
  const size_t limit = static_cast<size_t>(knobSize(Knob::OneshotMaxBytes));
  return nranks >= 1 && unitBytes(a) * static_cast<size_t>(nranks) <= std::min(limit, kMaxBytes);
}

// One step: a message to each peer, sent back to back by one thread (the
// sender copies (n-1) buffers), and (n-1) combines at the reduction rate.
double oneshotPredictUs(const CollArgs& a, const CommTopo& topo, size_t /*chunkBytes*/) {
  const int n = topo.nranks;
  if (n <= 1) return 0;
  const LinkCost& l = topo.singleNode() ? topo.intraNode : topo.interNode;
  const double bytes = static_cast<double>(unitBytes(a));
  const double peers = n - 1;
  double us = l.latencyUs + peers * bytes / (l.bandwidthGBs * 1e3);
  const bool reduces = a.type == CollType::AllReduce || a.type == CollType::Reduce ||
                       a.type == CollType::ReduceScatter;
  if (reduces && topo.reduceGBs > 0) us += peers * bytes / (topo.reduceGBs * 1e3);
  return us;
}

const AlgorithmInfo kOneshot = {
    "oneshot",
    "Small messages: every rank exchanges its whole buffer with every peer in one step, then "
    "combines in rank order. One latency; (n-1)x the ring's traffic.",
    collBit(CollType::AllReduce) | collBit(CollType::Reduce) | collBit(CollType::Broadcast) |
        collBit(CollType::AllGather) | collBit(CollType::ReduceScatter),
    oneshotSupports,
    runOneshot,
    oneshotPredictUs,
};

}  // namespace

TIDE_ON_LOAD(registerAlgorithm(&kOneshot));

}  // namespace tide
