// Recursive halving-doubling ("rhd", Rabenseifner): All-Reduce as a
// recursive-halving reduce-scatter followed by a recursive-doubling
// all-gather; ReduceScatter and AllGather as the halves alone. Any rank
// count: the first 2*(n - p) ranks fold pairwise onto p = 2^k participants
// first and get the result back at the end (patterns/tree.h, Rhd).
// log2(p) steps each way, so latency grows with log2(n); bandwidth term as
// the ring's plus the fold.
#include <algorithm>
#include <vector>

#include "algorithms/patterns/cost.h"
#include "algorithms/patterns/patterns.h"
#include "algorithms/patterns/tree.h"
#include "core/algorithm.h"
#include "core/registry.h"

namespace tide {

namespace {

using pattern::Rhd;

// ---- Shared halving and doubling loops ------------------------------------------------

// Byte offsets of the p participant parts: part q is [off[q], off[q + 1]).
using PartOffsets = std::vector<size_t>;

// Recursive halving among the p participants (a reduce-scatter): at distance
// d = p/2 .. 1 a participant sends the half of its current range that its
// partner keeps, taken from src, and reduces the half it keeps into acc
// (acc = src + incoming); from the second step on, src is acc. On return,
// this participant's part of acc holds the participants' reduction. The
// caller keeps R and off alive until the returned task completes.
Task halvingLoop(ExecCtx& ctx, const Rhd& R, const PartOffsets& off, const char* src, char* acc) {
  auto span = [&](int lo, int d) { return off[lo + d] - off[lo]; };
  for (int d = R.p() / 2; d >= 1; d /= 2) {
    const int peer = R.partner(d), keep = R.keepLo(d), give = R.sendLo(d);
    Pending s = ctx.send(peer, src + off[give], span(give, d));
    Pending v = ctx.recvReduce(peer, acc + off[keep], src + off[keep], span(keep, d));
    co_await ctx.wait(s, v);
    src = acc;
  }
}

// Recursive doubling among the participants (an all-gather in place): at
// distance d = 1 .. p/2 a participant sends the range it holds and receives
// its partner's. On entry buf holds this participant's part, on return every
// part. Same lifetime rule as halvingLoop.
Task doublingLoop(ExecCtx& ctx, const Rhd& R, const PartOffsets& off, char* buf) {
  auto span = [&](int lo, int d) { return off[lo + d] - off[lo]; };
  for (int d = 1; d < R.p(); d *= 2) {
    const int peer = R.partner(d), mine = R.keepLo(d), theirs = R.sendLo(d);
    Pending s = ctx.send(peer, buf + off[mine], span(mine, d));
    Pending v = ctx.recv(peer, buf + off[theirs], span(theirs, d));
    co_await ctx.wait(s, v);
  }
}

// ---- All-Reduce ----------------------------------------------------------------------

Task rhdAllReduce(ExecCtx& ctx) {
  const CollArgs a = ctx.args();
  const int n = ctx.nranks(), r = ctx.rank();
  const size_t es = a.elemSize, bytes = a.count * es;
  const char* in = static_cast<const char*>(a.sendbuff);
  char* out = static_cast<char*>(a.recvbuff);
  if (n == 1 || bytes == 0) {
    ctx.copy(out, in, bytes);
    co_return;
  }
  const Rhd R{r, n};
  const int p = R.p();
  PartOffsets off(p + 1);
  for (int q = 0; q <= p; ++q) off[q] = pattern::partBegin(a.count, p, q) * es;
  if (R.folded()) {
    Pending s = ctx.send(r + 1, in, bytes);
    Pending v = ctx.recv(r + 1, out, bytes);
    co_await ctx.wait(s, v);
    co_return;
  }
  const char* src = in;
  if (R.absorbs()) {
    Pending v = ctx.recvReduce(r - 1, out, in, bytes);
    co_await ctx.wait(v);
    src = out;
  }
  co_await halvingLoop(ctx, R, off, src, out);
  co_await doublingLoop(ctx, R, off, out);
  if (R.absorbs()) {
    Pending s = ctx.send(r - 1, out, bytes);
    co_await ctx.wait(s);
  }
}

// ---- ReduceScatter -----------------------------------------------------------------

Task rhdReduceScatter(ExecCtx& ctx) {
  const CollArgs a = ctx.args();
  const int n = ctx.nranks(), r = ctx.rank();
  const size_t seg = a.count * a.elemSize, total = seg * static_cast<size_t>(n);
  const char* in = static_cast<const char*>(a.sendbuff);
  char* out = static_cast<char*>(a.recvbuff);
  if (n == 1 || seg == 0) {
    ctx.copy(out, in + static_cast<size_t>(r) * seg, seg);
    co_return;
  }
  const Rhd R{r, n};
  const int p = R.p();
  PartOffsets off(p + 1);
  for (int q = 0; q <= p; ++q) off[q] = static_cast<size_t>(R.segBegin(q)) * seg;
  if (R.folded()) {
    Pending s = ctx.send(r + 1, in, total);
    Pending v = ctx.recv(r + 1, out, seg);
    co_await ctx.wait(s, v);
    co_return;
  }
  char* acc = static_cast<char*>(ctx.scratch(total));
  if (acc == nullptr) co_return;
  const char* src = in;
  if (R.absorbs()) {
    Pending v = ctx.recvReduce(r - 1, acc, in, total);
    co_await ctx.wait(v);
    src = acc;
  }
  co_await halvingLoop(ctx, R, off, src, acc);
  if (R.absorbs()) {
    Pending s = ctx.send(r - 1, acc + static_cast<size_t>(r - 1) * seg, seg);
    co_await ctx.wait(s);
  }
  ctx.copy(out, acc + static_cast<size_t>(r) * seg, seg);
}

// ---- AllGather ------------------------------------------------------------------------

Task rhdAllGather(ExecCtx& ctx) {
  const CollArgs a = ctx.args();
  const int n = ctx.nranks(), r = ctx.rank();
  const size_t seg = a.count * a.elemSize, total = seg * static_cast<size_t>(n);
  char* out = static_cast<char*>(a.recvbuff);
  ctx.copy(out + static_cast<size_t>(r) * seg, a.sendbuff, seg);
  if (n == 1 || seg == 0) co_return;
  const Rhd R{r, n};
  const int p = R.p();
  PartOffsets off(p + 1);
  for (int q = 0; q <= p; ++q) off[q] = static_cast<size_t>(R.segBegin(q)) * seg;
  if (R.folded()) {
    Pending s = ctx.send(r + 1, out + static_cast<size_t>(r) * seg, seg);
    Pending v = ctx.recv(r + 1, out, total);
    co_await ctx.wait(s, v);
    co_return;
  }
  if (R.absorbs()) {
    Pending v = ctx.recv(r - 1, out + static_cast<size_t>(r - 1) * seg, seg);
    co_await ctx.wait(v);
  }
  co_await doublingLoop(ctx, R, off, out);
  if (R.absorbs()) {
    Pending s = ctx.send(r - 1, out, total);
    co_await ctx.wait(s);
  }
}

// ---- Cost model --------------------------------------------------------------------

// Sums the steps: fold, log2(p) halving and/or doubling steps (each a
// simultaneous exchange between partners, priced by pattern::stepUs), unfold.
double predictRhd(const CollArgs& a, const CommTopo& t, size_t /*chunkBytes*/) {
  const int n = std::max(t.nranks, 1);
  const double es = static_cast<double>(a.elemSize);
  const double count = static_cast<double>(a.count);
  if (n == 1 || count == 0) return count * es / 1e4;
  const Rhd R0{0, n};
  const int p = R0.p(), rem = R0.rem();
  double total = count * es;  // bytes every participant holds
  double foldBytes = total, unfoldBytes = total;
  bool halve = true, dbl = true;
  switch (a.type) {
    case CollType::AllReduce:
      break;
    case CollType::ReduceScatter:
      total = count * es * n;
      foldBytes = total;
      unfoldBytes = count * es;
      dbl = false;
      break;
    case CollType::AllGather:
      total = count * es * n;
      foldBytes = count * es;
      unfoldBytes = total;
      halve = false;
      break;
    default:
      return 1e30;
  }
  std::vector<int> evens, odds;
  for (int q = 0; q < rem; ++q) {
    evens.push_back(2 * q);
    odds.push_back(2 * q + 1);
  }
  double us = 0;
  if (rem > 0) {
    us += pattern::stepUs(t, evens, odds, foldBytes) + pattern::stepUs(t, odds, evens, unfoldBytes);
    if (halve) us += pattern::reduceUs(t, foldBytes);
  }
  for (int d = 1; d < p; d *= 2) {
    std::vector<int> from, to;
    for (int q = 0; q < p; ++q) {
      from.push_back(R0.realRank(q));
      to.push_back(R0.realRank(q ^ d));
    }
    const double b = total * d / p;
    if (halve) us += pattern::stepUs(t, from, to, b) + pattern::reduceUs(t, b);
    if (dbl) us += pattern::stepUs(t, from, to, b);
  }
  return us;
}

Task runRhd(ExecCtx& ctx) {
  switch (ctx.args().type) {
    case CollType::AllReduce:
      return rhdAllReduce(ctx);
    case CollType::ReduceScatter:
      return rhdReduceScatter(ctx);
    case CollType::AllGather:
      return rhdAllGather(ctx);
    default:
      return Task();
  }
}

const AlgorithmInfo kRhd = {
    "rhd",
    "Recursive halving-doubling (Rabenseifner) All-Reduce, ReduceScatter and AllGather for "
    "any rank count (extra ranks fold in first). 2*log2(n) steps.",
    collBit(CollType::AllReduce) | collBit(CollType::ReduceScatter) | collBit(CollType::AllGather),
    nullptr,
    runRhd,
    predictRhd,
};

}  // namespace

TIDE_ON_LOAD(registerAlgorithm(&kRhd));

}  // namespace tide
