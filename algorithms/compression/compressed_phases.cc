// The phases of the compressed collectives over a group (compressed_phases.h).
#include "algorithms/compression/compressed_phases.h"

#include <cstring>
#include <vector>

namespace tide::cmp {

Pieces shardPieces(size_t n, int ranks) {
  Pieces l;
  const Shards s(n, ranks);
  for (int p = 0; p < ranks; ++p) {
    l.off.push_back(s.offset(p));
    l.len.push_back(s.length(p));
  }
  return l;
}

Pieces blockPieces(size_t block, int ranks) {
  Pieces l;
  for (int p = 0; p < ranks; ++p) {
    l.off.push_back(block * static_cast<size_t>(p));
    l.len.push_back(block);
  }
  return l;
}

// The call's input as fp32: the buffer itself (float32) or a converted copy.
const float* floatInput(ExecCtx& ctx, const CollArgs& a, size_t n) {
  if (a.dtype == tideFloat32 || n == 0) return static_cast<const float*>(a.sendbuff);
  auto* x = static_cast<float*>(ctx.scratch(n * sizeof(float)));
  if (x != nullptr) toFloat(a.dtype, a.sendbuff, n, x);
  return x;
}

codec::FeedbackState* stateOf(const CollArgs& a) {
  return static_cast<codec::FeedbackState*>(a.codec.state);
}

// Sizes a residual for this call (its count is fixed by the compressor);
// null when error feedback is off.
float* residual(ExecCtx& ctx, const CollArgs& a, codec::Residual& r, size_t n) {
  if (!a.codec.params->errorFeedback || n == 0) return nullptr;
  if (r.size() != n && !r.resize(n)) {
    ctx.setError(systemError("out of memory for a %zu-element error-feedback residual", n));
    return nullptr;
  }
  return r.data();
}

void fail(ExecCtx& ctx, const char* what) {
  ctx.setError(internalError("compressed collective: %s failed", what));
}

hier::Group allRanks(const ExecCtx& ctx) {
  hier::Group g;
  for (int q = 0; q < ctx.nranks(); ++q) g.ranks.push_back(q);
  g.idx = ctx.rank();
  return g;
}

bool postScatter(ExecCtx& ctx, const hier::Group* g, Wire wire, const float* x, float* resid,
                 uint64_t pos, const Pieces* l, Exchange* ex) {
  const int n = g->size(), r = g->idx;
  const size_t mine = l->len[r];
  ex->in.assign(n, nullptr);
  ex->recvs.assign(n, Pending{});
  ex->sends.clear();
  // Receives first, then each piece is sent as soon as it is encoded: the
  // wire carries one piece while the next is encoded.
  for (int s = 1; s < n; ++s) {
    const int q = (r - s + n) % n;
    ex->in[q] = static_cast<char*>(ctx.scratch(alignedBytes(wire.bytes(mine))));
    if (ex->in[q] == nullptr) return false;
    ex->recvs[q] = ctx.recv(g->ranks[q], ex->in[q], wire.bytes(mine));
  }
  for (int s = 1; s < n; ++s) {
    const int p = (r + s) % n;
    auto* out = static_cast<char*>(ctx.scratch(alignedBytes(wire.bytes(l->len[p]))));
    if (out == nullptr) return false;
    if (!wire.encode(x + l->off[p], resid != nullptr ? resid + l->off[p] : nullptr, l->len[p],
                     pos + l->off[p], out)) {
      fail(ctx, "encoding");
      return false;
    }
    ex->sends.push_back(ctx.send(g->ranks[p], out, wire.bytes(l->len[p])));
  }
  return true;
}

Task finishScatter(ExecCtx& ctx, const hier::Group* g, Wire wire, const float* x, const Pieces* l,
                   Exchange* ex, float* acc) {
  const int n = g->size(), r = g->idx;
  const size_t mine = l->len[r];
  // The sum in rank order; rank 0's term is stored, not added to zeros (one
  // pass over the shard less; the same value but for the sign of a zero sum).
  for (int q = 0; q < n; ++q) {
    if (q == r) {
      const float* own = x + l->off[r];
      if (q == 0) {
        if (mine > 0) std::memcpy(acc, own, mine * sizeof(float));
      } else {
        for (size_t i = 0; i < mine; ++i) acc[i] += own[i];
      }
      continue;
    }
    co_await ctx.wait(ex->recvs[q]);
    if (!ctx.error().ok()) co_return;
    if (!(q == 0 ? wire.decode(ex->in[q], mine, acc) : wire.decodeAcc(ex->in[q], mine, acc))) {
      fail(ctx, "decoding");
      co_return;
    }
  }
  if (!ex->sends.empty()) co_await ctx.waitAll(ex->sends);
}

Task scatterReduce(ExecCtx& ctx, const hier::Group* g, Wire wire, const float* x, float* resid,
                   uint64_t pos, const Pieces* l, float* acc) {
  Exchange ex;
  if (!postScatter(ctx, g, wire, x, resid, pos, l, &ex)) co_return;
  co_await finishScatter(ctx, g, wire, x, l, &ex, acc);
}

void scaleAvg(const CollArgs& a, int n, float* v, size_t count) {
  if (!a.codec.avg) return;
  const float inv = 1.0f / static_cast<float>(n);
  for (size_t i = 0; i < count; ++i) v[i] *= inv;
}

bool postGather(ExecCtx& ctx, const hier::Group* g, Wire wire, const float* mine, float* resid,
                uint64_t pos, const Pieces* l, Exchange* ex) {
  const int n = g->size(), r = g->idx;
  ex->in.assign(n, nullptr);
  ex->recvs.assign(n, Pending{});
  ex->sends.clear();
  for (int s = 1; s < n; ++s) {
    const int q = (r - s + n) % n;
    ex->in[q] = static_cast<char*>(ctx.scratch(alignedBytes(wire.bytes(l->len[q]))));
    if (ex->in[q] == nullptr) return false;
    ex->recvs[q] = ctx.recv(g->ranks[q], ex->in[q], wire.bytes(l->len[q]));
  }
  ex->own = static_cast<char*>(ctx.scratch(alignedBytes(wire.bytes(l->len[r]))));
  if (ex->own == nullptr) return false;
  if (!wire.encode(mine, resid, l->len[r], pos, ex->own)) {
    fail(ctx, "encoding");
    return false;
  }
  for (int s = 1; s < n; ++s) {
    ex->sends.push_back(ctx.send(g->ranks[(r + s) % n], ex->own, wire.bytes(l->len[r])));
  }
  return true;
}

Task finishGather(ExecCtx& ctx, const hier::Group* g, Wire wire, const Pieces* l, Exchange* ex,
                  float* result) {
  const int n = g->size(), r = g->idx;
  if (!wire.decode(ex->own, l->len[r], result + l->off[r])) {
    fail(ctx, "decoding");
    co_return;
  }
  for (int q = 0; q < n; ++q) {
    if (q == r) continue;
    co_await ctx.wait(ex->recvs[q]);
    if (!ctx.error().ok()) co_return;
    if (!wire.decode(ex->in[q], l->len[q], result + l->off[q])) {
      fail(ctx, "decoding");
      co_return;
    }
  }
  if (!ex->sends.empty()) co_await ctx.waitAll(ex->sends);
}

Task encodeGather(ExecCtx& ctx, const hier::Group* g, Wire wire, const float* mine, float* resid,
                  uint64_t pos, const Pieces* l, float* result) {
  Exchange ex;
  if (!postGather(ctx, g, wire, mine, resid, pos, l, &ex)) co_return;
  co_await finishGather(ctx, g, wire, l, &ex, result);
}

// fp32 result space: the receive buffer itself (float32) or scratch.
float* floatOutput(ExecCtx& ctx, const CollArgs& a, size_t n) {
  if (a.dtype == tideFloat32) return static_cast<float*>(a.recvbuff);
  return static_cast<float*>(ctx.scratch(n * sizeof(float)));
}

}  // namespace tide::cmp
