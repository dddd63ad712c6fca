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

// Block p of x (pieces l) goes, encoded, to rank p; this rank's
// block is summed (its own values exact, the peers' decoded) in rank order
// into acc (len[r] floats). resid: the sender's residual over x, or null.
Task scatterReduce(ExecCtx& ctx, const hier::Group* g, Wire wire, const float* x, float* resid,
                   uint64_t pos, const Pieces* l, float* acc) {
  const int n = g->size(), r = g->idx;
  const size_t mine = l->len[r];
  std::vector<char*> out(n, nullptr), in(n, nullptr);
  // Receives first, then each piece is sent as soon as it is encoded: the
  // wire carries one piece while the next is encoded.
  std::vector<Pending> recvs(n);
  for (int s = 1; s < n; ++s) {
    const int q = (r - s + n) % n;
    in[q] = static_cast<char*>(ctx.scratch(alignedBytes(wire.bytes(mine))));
    if (in[q] == nullptr) co_return;
    recvs[q] = ctx.recv(g->ranks[q], in[q], wire.bytes(mine));
  }
  std::vector<Pending> sends;
  for (int s = 1; s < n; ++s) {
    const int p = (r + s) % n;
    out[p] = static_cast<char*>(ctx.scratch(alignedBytes(wire.bytes(l->len[p]))));
    if (out[p] == nullptr) co_return;
    if (!wire.encode(x + l->off[p], resid != nullptr ? resid + l->off[p] : nullptr, l->len[p],
                     pos + l->off[p], out[p])) {
      fail(ctx, "encoding");
      co_return;
    }
    sends.push_back(ctx.send(g->ranks[p], out[p], wire.bytes(l->len[p])));
  }
  if (mine > 0) std::memset(acc, 0, mine * sizeof(float));
  for (int q = 0; q < n; ++q) {
    if (q == r) {
      const float* own = x + l->off[r];
      for (size_t i = 0; i < mine; ++i) acc[i] += own[i];
      continue;
    }
    co_await ctx.wait(recvs[q]);
    if (!ctx.error().ok()) co_return;
    if (!wire.decodeAcc(in[q], mine, acc)) {
      fail(ctx, "decoding");
      co_return;
    }
  }
  if (!sends.empty()) co_await ctx.waitAll(sends);
}

void scaleAvg(const CollArgs& a, int n, float* v, size_t count) {
  if (!a.codec.avg) return;
  const float inv = 1.0f / static_cast<float>(n);
  for (size_t i = 0; i < count; ++i) v[i] *= inv;
}

// This member's block `mine` (len[r] floats) is
// encoded once (resid: a residual over it, or null) and sent to every peer;
// every block, this rank's included, is decoded into result (fp32, layout l).
Task encodeGather(ExecCtx& ctx, const hier::Group* g, Wire wire, const float* mine, float* resid,
                  uint64_t pos, const Pieces* l, float* result) {
  const int n = g->size(), r = g->idx;
  std::vector<char*> in(n, nullptr);
  std::vector<Pending> recvs(n);
  for (int s = 1; s < n; ++s) {
    const int q = (r - s + n) % n;
    in[q] = static_cast<char*>(ctx.scratch(alignedBytes(wire.bytes(l->len[q]))));
    if (in[q] == nullptr) co_return;
    recvs[q] = ctx.recv(g->ranks[q], in[q], wire.bytes(l->len[q]));
  }
  char* own = static_cast<char*>(ctx.scratch(alignedBytes(wire.bytes(l->len[r]))));
  if (own == nullptr) co_return;
  if (!wire.encode(mine, resid, l->len[r], pos, own)) {
    fail(ctx, "encoding");
    co_return;
  }
  std::vector<Pending> sends;
  for (int s = 1; s < n; ++s) {
    sends.push_back(ctx.send(g->ranks[(r + s) % n], own, wire.bytes(l->len[r])));
  }
  if (!wire.decode(own, l->len[r], result + l->off[r])) {
    fail(ctx, "decoding");
    co_return;
  }
  for (int q = 0; q < n; ++q) {
    if (q == r) continue;
    co_await ctx.wait(recvs[q]);
    if (!ctx.error().ok()) co_return;
    if (!wire.decode(in[q], l->len[q], result + l->off[q])) {
      fail(ctx, "decoding");
      co_return;
    }
  }
  if (!sends.empty()) co_await ctx.waitAll(sends);
}

// fp32 result space: the receive buffer itself (float32) or scratch.
float* floatOutput(ExecCtx& ctx, const CollArgs& a, size_t n) {
  if (a.dtype == tideFloat32) return static_cast<float*>(a.recvbuff);
  return static_cast<float*>(ctx.scratch(n * sizeof(float)));
}

}  // namespace tide::cmp
