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
// Error feedback: one residual per compression point, kept in the
// compressor's sender residual ([0, N) intra reduce-scatter, [N, N + C)
// inter-node reduce-scatter) and owner residual ([0, C) inter-node owner,
// [C, 2 C) intra-node gather), C being the chunk bound ceil(N / L).
// Stochastic rounding: positions counter + {0, N, 2N, 3N} + offset per point;
// the counter then advances by 4N.
#include <algorithm>
#include <vector>

#include "algorithms/compression/compressed_phases.h"
#include "core/registry.h"

namespace tide {

namespace {

using namespace cmp;  // NOLINT(google-build-using-namespace): this file's vocabulary

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

  const Pieces chunks = shardPieces(count, nodeRanks);
  const size_t chunkMax = chunks.len[0];
  const size_t mine = chunks.len[L.intra.idx];
  const Pieces shards = shardPieces(mine, nodes);
  const size_t shardLen = shards.len[L.inter.idx];

  const float* x = floatInput(ctx, a, count);
  float* result = floatOutput(ctx, a, count);
  auto* chunk = static_cast<float*>(ctx.scratch(std::max<size_t>(mine, 1) * sizeof(float)));
  auto* shard = static_cast<float*>(ctx.scratch(std::max<size_t>(shardLen, 1) * sizeof(float)));
  auto* reduced = static_cast<float*>(ctx.scratch(std::max<size_t>(mine, 1) * sizeof(float)));
  if (x == nullptr || result == nullptr || chunk == nullptr || shard == nullptr ||
      reduced == nullptr || !ctx.error().ok()) {
    co_return;
  }
  float* sender = residual(ctx, a, st->sender, count + chunkMax);
  float* owner = residual(ctx, a, st->owner, 2 * chunkMax);
  if (!ctx.error().ok()) co_return;
  const bool intraEf = sender != nullptr && !p.interNodeOnly;
  const uint64_t pos = st->counter;

  co_await scatterReduce(ctx, &L.intra, intra, x, intraEf ? sender : nullptr, pos, &chunks, chunk);
  if (!ctx.error().ok()) co_return;
  co_await scatterReduce(ctx, &L.inter, inter, chunk, sender != nullptr ? sender + count : nullptr,
                         pos + count, &shards, shard);
  if (!ctx.error().ok()) co_return;
  scaleAvg(a, ctx.nranks(), shard, shardLen);
  co_await encodeGather(ctx, &L.inter, inter, shard, owner,
                        pos + 2 * count + shards.off[L.inter.idx], &shards, reduced);
  if (!ctx.error().ok()) co_return;
  co_await encodeGather(ctx, &L.intra, intra, reduced, intraEf ? owner + chunkMax : nullptr,
                        pos + 3 * count + chunks.off[L.intra.idx], &chunks, result);
  if (!ctx.error().ok()) co_return;
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
