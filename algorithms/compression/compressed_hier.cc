// Compressed All-Reduce on several nodes (fp16/bf16/int8/int4), hierarchical:
//   1. inside each node, a reduce-scatter of the input into one chunk per
//      local rank (chunk l: shard l of the buffer cut in L, L = ranks per node);
//   2. across nodes, among the ranks of the same local index, the phase-wise
//      compressed All-Reduce of that chunk (all-to-all of encoded shards, an
//      fp32 sum at each owner, one encoding of the sum, all-gather);
//   3. inside each node, an all-gather of the chunks.
// The inter-node phase is always compressed; the intra-node phases are too
// unless interNodeOnly is set (then they move fp32 as it is). Only the
// inter-node link carries each node's data once, compressed: the layout that
// pays on slow networks. Every rank ends with the same bytes (each chunk is
// decoded from the same wire bytes everywhere, and the intra-node gather
// copies or decodes identical chunks).
// Buffers above kSegment elements are cut into segments of kSegment (the
// last shorter), each laid out as above by itself, and pipelined: segment
// k's inter-node transfers overlap segment k + 1's intra-node phase.
// Error feedback: one residual per compression point, kept in the
// compressor's sender residual ([0, N) intra reduce-scatter, then each
// segment's inter-node reduce-scatter chunk) and owner residual (each
// segment's inter-node owner shard and intra-node gather chunk).
// Stochastic rounding: positions counter + {0, N, 2N, 3N} + offset per point;
// the counter then advances by 4N.
#include <algorithm>
#include <vector>

#include "algorithms/compression/compressed_phases.h"
#include "core/registry.h"

namespace tide {

namespace {

using namespace cmp;  // NOLINT(google-build-using-namespace): this file's vocabulary

// Elements per pipeline segment (4 MiB of fp32): each is laid out by itself
// (docs/compression.md).
constexpr size_t kSegment = size_t{1} << 20;

// One segment of the buffer as it moves through the four phases.
struct Segment {
  size_t off = 0, count = 0;
  Pieces chunks, shards;
  float *chunk = nullptr, *shard = nullptr, *reduced = nullptr;
  float *interSender = nullptr, *interOwner = nullptr, *intraOwner = nullptr;  // residuals
  Exchange b, c;  // inter-node reduce-scatter and gather
};

Task hierAllReduce(ExecCtx& ctx) {
  const CollArgs a = ctx.args();
  const size_t count = a.count;
  const hier::Layout L = hier::layoutOf(ctx);
  if (!L.equal) {
    // Every rank sees the same layout, so all of them stop here.
    ctx.setError(invalidUsage("cmp_hier needs nodes with equal rank counts"));
    co_return;
  }
  const int nodeRanks = L.intra.size(), nodes = L.inter.size();
  const CodecParams& p = *a.codec.params;
  const Wire inter = Wire::of(a.codec.id, a.codec.params);
  const Wire intra = p.interNodeOnly ? Wire::raw() : inter;
  codec::FeedbackState* st = stateOf(a);
  const float* x = floatInput(ctx, a, count);
  float* result = floatOutput(ctx, a, count);
  if (x == nullptr || result == nullptr || !ctx.error().ok()) co_return;

  // Segments of kSegment elements go through the phases in a pipeline: while
  // segment k's inter-node pieces are on the wire, segment k + 1 is reduced
  // inside the node and segment k - 1 gathered.
  std::vector<Segment> seg((count + kSegment - 1) / kSegment);
  size_t senderNeed = count, ownerNeed = 0;
  for (size_t k = 0; k < seg.size(); ++k) {
    Segment& g = seg[k];
    g.off = k * kSegment;
    g.count = std::min(kSegment, count - g.off);
    g.chunks = shardPieces(g.count, nodeRanks);
    g.shards = shardPieces(g.chunks.len[L.intra.idx], nodes);
    senderNeed += g.chunks.len[0];
    ownerNeed += g.chunks.len[0] + g.shards.len[0];
  }
  float* sender = residual(ctx, a, st->sender, senderNeed);
  float* owner = residual(ctx, a, st->owner, ownerNeed);
  if (!ctx.error().ok()) co_return;
  const bool intraEf = sender != nullptr && !p.interNodeOnly;
  size_t sOff = count, oOff = 0;
  for (Segment& g : seg) {
    const size_t mine = g.chunks.len[L.intra.idx];
    const size_t shardLen = g.shards.len[L.inter.idx];
    g.chunk = static_cast<float*>(ctx.scratch(std::max<size_t>(mine, 1) * sizeof(float)));
    g.shard = static_cast<float*>(ctx.scratch(std::max<size_t>(shardLen, 1) * sizeof(float)));
    g.reduced = static_cast<float*>(ctx.scratch(std::max<size_t>(mine, 1) * sizeof(float)));
    if (g.chunk == nullptr || g.shard == nullptr || g.reduced == nullptr) co_return;
    if (sender != nullptr) g.interSender = sender + sOff;
    if (owner != nullptr) {
      g.interOwner = owner + oOff;
      g.intraOwner = intraEf ? owner + oOff + g.shards.len[0] : nullptr;
    }
    sOff += g.chunks.len[0];
    oOff += g.chunks.len[0] + g.shards.len[0];
  }
  const uint64_t pos = st->counter;
  const size_t K = seg.size();
  for (size_t step = 0; step < K + 2; ++step) {
    if (step < K) {  // A: inside the node; B posted
      Segment& g = seg[step];
      co_await scatterReduce(ctx, &L.intra, intra, x + g.off, intraEf ? sender + g.off : nullptr,
                             pos + g.off, &g.chunks, g.chunk);
      if (!ctx.error().ok()) co_return;
      if (!postScatter(ctx, &L.inter, inter, g.chunk, g.interSender, pos + count + g.off, &g.shards,
                       &g.b)) {
        co_return;
      }
    }
    if (step >= 1 && step <= K) {  // B finished; C posted
      Segment& g = seg[step - 1];
      co_await finishScatter(ctx, &L.inter, inter, g.chunk, &g.shards, &g.b, g.shard);
      if (!ctx.error().ok()) co_return;
      scaleAvg(a, ctx.nranks(), g.shard, g.shards.len[L.inter.idx]);
      if (!postGather(ctx, &L.inter, inter, g.shard, g.interOwner,
                      pos + 2 * count + g.off + g.shards.off[L.inter.idx], &g.shards, &g.c)) {
        co_return;
      }
    }
    if (step >= 2) {  // C finished; D inside the node
      Segment& g = seg[step - 2];
      co_await finishGather(ctx, &L.inter, inter, &g.shards, &g.c, g.reduced);
      if (!ctx.error().ok()) co_return;
      co_await encodeGather(ctx, &L.intra, intra, g.reduced, g.intraOwner,
                            pos + 3 * count + g.off + g.chunks.off[L.intra.idx], &g.chunks,
                            result + g.off);
      if (!ctx.error().ok()) co_return;
    }
  }
  if (a.dtype != tideFloat32) fromFloat(a.dtype, result, count, a.recvbuff);
  if (p.stochastic) st->counter += 4 * static_cast<uint64_t>(count);
}

// Several nodes of equal size, more than one rank in all.
bool supportsHier(const CollArgs& a, int nranks) {
  return a.codec.params != nullptr && a.codec.state != nullptr && nranks > 1 &&
         (a.dtype == tideFloat32 || a.dtype == tideBfloat16 || a.dtype == tideFloat16);
}

// Two intra-node steps over the node's memory link and two inter-node steps
// in which a node's L ranks share its network link, plus the codec work.
double predictHierCmp(const CollArgs& a, const CommTopo& t, size_t /*chunkBytes*/) {
  if (a.codec.params == nullptr || t.nnodes < 2 || t.nodeRanks.empty()) return 1e30;
  for (const auto& nr : t.nodeRanks) {
    if (nr.size() != t.nodeRanks[0].size()) return 1e30;  // unequal nodes: not this row
  }
  const double L = static_cast<double>(t.nodeRanks[0].size());
  const double M = static_cast<double>(t.nnodes);
  const Wire inter = Wire::of(a.codec.id, a.codec.params);
  const Wire intra = a.codec.params->interNodeOnly ? Wire::raw() : inter;
  const size_t chunk = Shards(a.count, static_cast<int>(L)).per;
  const size_t shard = Shards(chunk, static_cast<int>(M)).per;
  auto step = [](const LinkCost& l, double bytes) {
    return l.latencyUs + bytes / (std::max(l.bandwidthGBs, 1e-6) * 1e3);
  };
  const double intraUs =
      L > 1 ? step(t.intraNode, (L - 1) * static_cast<double>(intra.bytes(chunk))) : 0;
  const double interUs = step(t.interNode, L * (M - 1) * static_cast<double>(inter.bytes(shard)));
  const double work = 6.0 * static_cast<double>(a.count) * 4 / codecBytesPerUs(a.codec.id);
  return 2 * intraUs + 2 * interUs + work;
}

constexpr uint32_t kHierCodecs =
    (1u << kCodecFp16) | (1u << kCodecBf16) | (1u << kCodecInt8) | (1u << kCodecInt4);

const AlgorithmInfo kHierCmp = {
    "cmp_hier",
    "Compressed All-Reduce on several nodes: reduce-scatter inside each node, the phase-wise "
    "compressed All-Reduce of each chunk across nodes, all-gather inside each node "
    "(interNodeOnly: the intra-node phases uncompressed).",
    collBit(CollType::AllReduce),
    &supportsHier,
    &hierAllReduce,
    &predictHierCmp,
    MemType::Host,
    0,
    kHierCodecs};

}  // namespace

TIDE_ON_LOAD(registerAlgorithm(&kHierCmp));

}  // namespace tide
