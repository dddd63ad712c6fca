// Compressed All-Reduce, ReduceScatter and AllGather for the casting (fp16,
// bf16) and quantizing (int8, int4) codecs, phase-wise: each input is encoded
// once per phase, never re-encoded hop by hop.
//   All-Reduce: an all-to-all of encoded shards (shard p of every rank's
//   input to rank p), an fp32 sum of each shard at its owner in rank order
//   (its own shard exact), one encoding of the reduced shard, an all-gather of
//   the encoded shards; every rank, the owner included, decodes the same
//   bytes, so the results are byte-identical everywhere.
//   ReduceScatter: the first phase alone. AllGather: each rank encodes its
//   block once and every rank decodes every block (its own included).
// Error feedback (codec::FeedbackState, one per compressor): the sender's
// residual covers the rank's input and is added before the first encoding;
// the owner's covers its reduced shard and is added before the second.
// Stochastic rounding draws positions counter + offset (first phase) and
// counter + N + offset (second); the counter then advances by 2N.
#include <cstring>
#include <vector>

#include "algorithms/compression/compressed_wire.h"
#include "core/registry.h"

namespace tide {

namespace {

using cmp::Wire;

struct Layout {
  std::vector<size_t> off, len;
};

Layout shardLayout(size_t n, int ranks) {
  Layout l;
  const cmp::Shards s(n, ranks);
  for (int p = 0; p < ranks; ++p) {
    l.off.push_back(s.offset(p));
    l.len.push_back(s.length(p));
  }
  return l;
}

Layout blockLayout(size_t block, int ranks) {
  Layout l;
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
  if (x != nullptr) cmp::toFloat(a.dtype, a.sendbuff, n, x);
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

// Phase 1: block p of x (layout l) goes, encoded, to rank p; this rank's
// block is summed (its own values exact, the peers' decoded) in rank order
// into acc (len[r] floats). resid: the sender's residual over x, or null.
Task scatterReduce(ExecCtx& ctx, Wire wire, const float* x, float* resid, uint64_t pos,
                   const Layout* l, float* acc) {
  const int n = ctx.nranks(), r = ctx.rank();
  const size_t mine = l->len[r];
  std::vector<char*> out(n, nullptr), in(n, nullptr);
  std::vector<Pending> sends;
  for (int s = 1; s < n; ++s) {
    const int p = (r + s) % n;
    out[p] = static_cast<char*>(ctx.scratch(cmp::alignedBytes(wire.bytes(l->len[p]))));
    if (out[p] == nullptr) co_return;
    if (!wire.encode(x + l->off[p], resid != nullptr ? resid + l->off[p] : nullptr, l->len[p],
                     pos + l->off[p], out[p])) {
      fail(ctx, "encoding");
      co_return;
    }
    sends.push_back(ctx.send(p, out[p], wire.bytes(l->len[p])));
  }
  std::vector<Pending> recvs(n);
  for (int s = 1; s < n; ++s) {
    const int q = (r - s + n) % n;
    in[q] = static_cast<char*>(ctx.scratch(cmp::alignedBytes(wire.bytes(mine))));
    if (in[q] == nullptr) co_return;
    recvs[q] = ctx.recv(q, in[q], wire.bytes(mine));
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

// Phase 2 (and AllGather): this rank's block `mine` (len[r] floats) is
// encoded once (resid: a residual over it, or null) and sent to every peer;
// every block, this rank's included, is decoded into result (fp32, layout l).
Task encodeGather(ExecCtx& ctx, Wire wire, const float* mine, float* resid, uint64_t pos,
                  const Layout* l, float* result) {
  const int n = ctx.nranks(), r = ctx.rank();
  char* own = static_cast<char*>(ctx.scratch(cmp::alignedBytes(wire.bytes(l->len[r]))));
  if (own == nullptr) co_return;
  if (!wire.encode(mine, resid, l->len[r], pos, own)) {
    fail(ctx, "encoding");
    co_return;
  }
  std::vector<Pending> sends;
  for (int s = 1; s < n; ++s) sends.push_back(ctx.send((r + s) % n, own, wire.bytes(l->len[r])));
  std::vector<char*> in(n, nullptr);
  std::vector<Pending> recvs(n);
  for (int s = 1; s < n; ++s) {
    const int q = (r - s + n) % n;
    in[q] = static_cast<char*>(ctx.scratch(cmp::alignedBytes(wire.bytes(l->len[q]))));
    if (in[q] == nullptr) co_return;
    recvs[q] = ctx.recv(q, in[q], wire.bytes(l->len[q]));
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

void advance(const CollArgs& a, codec::FeedbackState* st, uint64_t by) {
  if (a.codec.params->stochastic) st->counter += by;
}

Task a2aAllReduce(ExecCtx& ctx) {
  const CollArgs a = ctx.args();
  const int n = ctx.nranks(), r = ctx.rank();
  const size_t count = a.count;
  const Wire wire = Wire::of(a.codec.id, a.codec.params);
  codec::FeedbackState* st = stateOf(a);
  const Layout l = shardLayout(count, n);
  const float* x = floatInput(ctx, a, count);
  float* result = floatOutput(ctx, a, count);
  auto* acc = static_cast<float*>(ctx.scratch(std::max<size_t>(l.len[r], 1) * sizeof(float)));
  if (x == nullptr || result == nullptr || acc == nullptr || !ctx.error().ok()) co_return;
  float* sender = residual(ctx, a, st->sender, count);
  float* owner = residual(ctx, a, st->owner, l.len[r]);
  if (!ctx.error().ok()) co_return;
  const uint64_t pos = st->counter;
  co_await scatterReduce(ctx, wire, x, sender, pos, &l, acc);
  if (!ctx.error().ok()) co_return;
  scaleAvg(a, n, acc, l.len[r]);
  co_await encodeGather(ctx, wire, acc, owner, pos + count + l.off[r], &l, result);
  if (!ctx.error().ok()) co_return;
  if (a.dtype != tideFloat32) cmp::fromFloat(a.dtype, result, count, a.recvbuff);
  advance(a, st, 2 * static_cast<uint64_t>(count));
}

Task a2aReduceScatter(ExecCtx& ctx) {
  const CollArgs a = ctx.args();
  const int n = ctx.nranks(), r = ctx.rank();
  const size_t count = a.count;  // per rank
  const size_t total = count * static_cast<size_t>(n);
  const Wire wire = Wire::of(a.codec.id, a.codec.params);
  codec::FeedbackState* st = stateOf(a);
  const Layout l = blockLayout(count, n);
  const float* x = floatInput(ctx, a, total);
  // The sum is made aside: in place, the result lands on this rank's block
  // of the input, which the sum reads.
  auto* acc = static_cast<float*>(ctx.scratch(std::max<size_t>(count, 1) * sizeof(float)));
  if (x == nullptr || acc == nullptr || !ctx.error().ok()) co_return;
  (void)r;
  float* sender = residual(ctx, a, st->sender, total);
  if (!ctx.error().ok()) co_return;
  co_await scatterReduce(ctx, wire, x, sender, st->counter, &l, acc);
  if (!ctx.error().ok()) co_return;
  scaleAvg(a, n, acc, count);
  cmp::fromFloat(a.dtype, acc, count, a.recvbuff);
  advance(a, st, total);
}

Task a2aAllGather(ExecCtx& ctx) {
  const CollArgs a = ctx.args();
  const int n = ctx.nranks();
  const size_t count = a.count;  // per rank
  const size_t total = count * static_cast<size_t>(n);
  const Wire wire = Wire::of(a.codec.id, a.codec.params);
  codec::FeedbackState* st = stateOf(a);
  const Layout l = blockLayout(count, n);
  const float* x = floatInput(ctx, a, count);
  if (x == nullptr || !ctx.error().ok()) co_return;
  float* result = floatOutput(ctx, a, total);
  if (result == nullptr) co_return;
  if (a.dtype == tideFloat32 && x == result + l.off[ctx.rank()]) {
    // In place (sendbuff is this rank's block of recvbuff): encode a copy.
    auto* copy = static_cast<float*>(ctx.scratch(count * sizeof(float)));
    if (copy == nullptr) co_return;
    std::memcpy(copy, x, count * sizeof(float));
    x = copy;
  }
  float* sender = residual(ctx, a, st->sender, count);
  if (!ctx.error().ok()) co_return;
  co_await encodeGather(ctx, wire, x, sender, st->counter, &l, result);
  if (!ctx.error().ok()) co_return;
  if (a.dtype != tideFloat32) cmp::fromFloat(a.dtype, result, total, a.recvbuff);
  advance(a, st, count);
}

Task a2aRun(ExecCtx& ctx) {
  switch (ctx.args().type) {
    case CollType::ReduceScatter:
      return a2aReduceScatter(ctx);
    case CollType::AllGather:
      return a2aAllGather(ctx);
    default:
      return a2aAllReduce(ctx);
  }
}

// Wire time of the exchange steps plus the codec work (every input element
// encoded and decoded about once per phase).
double predictA2a(const CollArgs& a, const CommTopo& t, size_t /*chunkBytes*/) {
  const int n = std::max(t.nranks, 1);
  if (a.codec.params == nullptr) return 1e30;
  const Wire wire = Wire::of(a.codec.id, a.codec.params);
  const double elems = static_cast<double>(a.count);
  const double rate = cmp::codecBytesPerUs(a.codec.id);
  switch (a.type) {
    case CollType::AllReduce: {
      const double piece = static_cast<double>(wire.bytes(cmp::Shards(a.count, n).per));
      return 2 * cmp::exchangeUs(t, piece) + 4 * elems * 4 / rate;
    }
    case CollType::ReduceScatter:
      return cmp::exchangeUs(t, static_cast<double>(wire.bytes(a.count))) +
             2 * elems * n * 4 / rate;
    default:
      return cmp::exchangeUs(t, static_cast<double>(wire.bytes(a.count))) +
             2 * elems * n * 4 / rate;
  }
}

bool supportsA2a(const CollArgs& a, int /*nranks*/) {
  return a.codec.params != nullptr && a.codec.state != nullptr &&
         (a.dtype == tideFloat32 || a.dtype == tideBfloat16 || a.dtype == tideFloat16);
}

constexpr uint32_t kA2aCodecs =
    (1u << kCodecFp16) | (1u << kCodecBf16) | (1u << kCodecInt8) | (1u << kCodecInt4);

const AlgorithmInfo kA2a = {
    "cmp_a2a",
    "Compressed (fp16/bf16/int8/int4): all-to-all of encoded shards, fp32 sum at each shard's "
    "owner, one encoding of the sum, all-gather of the encoded shards; each input encoded once "
    "per phase, byte-identical results on every rank.",
    collBit(CollType::AllReduce) | collBit(CollType::ReduceScatter) | collBit(CollType::AllGather),
    &supportsA2a,
    &a2aRun,
    &predictA2a,
    MemType::Host,
    0,
    kA2aCodecs};

}  // namespace

TIDE_ON_LOAD(registerAlgorithm(&kA2a));

}  // namespace tide
