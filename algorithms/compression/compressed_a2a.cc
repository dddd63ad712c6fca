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
#include <algorithm>
#include <cstring>
#include <vector>

#include "algorithms/compression/compressed_phases.h"
#include "core/registry.h"

namespace tide {

namespace {

using namespace cmp;  // NOLINT(google-build-using-namespace): this file's vocabulary

void advance(const CollArgs& a, codec::FeedbackState* st, uint64_t by) {
  if (a.codec.params->stochastic) st->counter += by;
}

// Elements per pipeline segment of the All-Reduce (4 MiB of fp32); each is
// laid out by itself (docs/compression.md).
constexpr size_t kSegment = size_t{1} << 20;

struct Segment {
  size_t off = 0, count = 0;
  Pieces pieces;
  float* acc = nullptr;
  float* owner = nullptr;  // this segment's owner residual, or null
  Exchange rs, ag;
};

// Segments are pipelined: while segment k's pieces are on the wire, segment
// k + 1 is encoded and segment k - 1 gathered.
Task a2aAllReduce(ExecCtx& ctx) {
  const CollArgs a = ctx.args();
  const int n = ctx.nranks(), r = ctx.rank();
  const size_t count = a.count;
  const Wire wire = Wire::of(a.codec.id, a.codec.params);
  codec::FeedbackState* st = stateOf(a);
  const hier::Group all = allRanks(ctx);
  const float* x = floatInput(ctx, a, count);
  float* result = floatOutput(ctx, a, count);
  if (x == nullptr || result == nullptr || !ctx.error().ok()) co_return;
  std::vector<Segment> seg((count + kSegment - 1) / kSegment);
  size_t ownerNeed = 0;
  for (size_t k = 0; k < seg.size(); ++k) {
    Segment& g = seg[k];
    g.off = k * kSegment;
    g.count = std::min(kSegment, count - g.off);
    g.pieces = shardPieces(g.count, n);
    ownerNeed += g.pieces.len[r];
  }
  float* sender = residual(ctx, a, st->sender, count);
  float* owner = residual(ctx, a, st->owner, ownerNeed);
  if (!ctx.error().ok()) co_return;
  size_t oOff = 0;
  for (Segment& g : seg) {
    g.acc = static_cast<float*>(ctx.scratch(std::max<size_t>(g.pieces.len[r], 1) * sizeof(float)));
    if (g.acc == nullptr) co_return;
    if (owner != nullptr) g.owner = owner + oOff;
    oOff += g.pieces.len[r];
  }
  const uint64_t pos = st->counter;
  const size_t K = seg.size();
  for (size_t step = 0; step < K + 2; ++step) {
    if (step < K) {
      Segment& g = seg[step];
      if (!postScatter(ctx, &all, wire, x + g.off, sender != nullptr ? sender + g.off : nullptr,
                       pos + g.off, &g.pieces, &g.rs)) {
        co_return;
      }
    }
    if (step >= 1 && step <= K) {
      Segment& g = seg[step - 1];
      co_await finishScatter(ctx, &all, wire, x + g.off, &g.pieces, &g.rs, g.acc);
      if (!ctx.error().ok()) co_return;
      scaleAvg(a, n, g.acc, g.pieces.len[r]);
      if (!postGather(ctx, &all, wire, g.acc, g.owner, pos + count + g.off + g.pieces.off[r],
                      &g.pieces, &g.ag)) {
        co_return;
      }
    }
    if (step >= 2) {
      Segment& g = seg[step - 2];
      co_await finishGather(ctx, &all, wire, &g.pieces, &g.ag, result + g.off);
      if (!ctx.error().ok()) co_return;
    }
  }
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
  const Pieces l = blockPieces(count, n);
  const hier::Group all = allRanks(ctx);
  const float* x = floatInput(ctx, a, total);
  // The sum is made aside: in place, the result lands on this rank's block
  // of the input, which the sum reads.
  auto* acc = static_cast<float*>(ctx.scratch(std::max<size_t>(count, 1) * sizeof(float)));
  if (x == nullptr || acc == nullptr || !ctx.error().ok()) co_return;
  (void)r;
  float* sender = residual(ctx, a, st->sender, total);
  if (!ctx.error().ok()) co_return;
  co_await scatterReduce(ctx, &all, wire, x, sender, st->counter, &l, acc);
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
  const Pieces l = blockPieces(count, n);
  const hier::Group all = allRanks(ctx);
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
  co_await encodeGather(ctx, &all, wire, x, sender, st->counter, &l, result);
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
  if (a.type == CollType::AllReduce) {
    const double piece = static_cast<double>(wire.bytes(cmp::Shards(a.count, n).per));
    return 2 * cmp::exchangeUs(t, piece) + 4 * elems * 4 / rate;
  }
  // ReduceScatter and AllGather: one exchange of count-element pieces.
  return cmp::exchangeUs(t, static_cast<double>(wire.bytes(a.count))) + 2 * elems * n * 4 / rate;
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
