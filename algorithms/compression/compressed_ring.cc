// The hop-by-hop compressed ring All-Reduce (fp16/bf16/int8/int4), kept for
// comparison with the phase-wise rows (TIDE_ALGO=allreduce:cmp_ring; the cost
// model never picks it): a ring reduce-scatter that decodes, adds and
// re-encodes the partial sum at every hop (n - 1 encodings of each chunk, so
// its error grows with the rank count, which is what cmp_a2a avoids), then a
// ring all-gather that forwards the owner's encoded chunk unchanged, so every
// rank still decodes the same bytes. No error feedback (the residual of a
// partial sum belongs to no one's buffer); stochastic rounding draws from
// counter + hop N + offset.
#include <cstring>
#include <vector>

#include "algorithms/compression/compressed_phases.h"
#include "algorithms/patterns/cost.h"
#include "algorithms/patterns/patterns.h"
#include "core/registry.h"

namespace tide {

namespace {

using namespace cmp;  // NOLINT(google-build-using-namespace): this file's vocabulary

Task ringAllReduce(ExecCtx& ctx) {
  const CollArgs a = ctx.args();
  const int n = ctx.nranks();
  const size_t count = a.count;
  const Wire wire = Wire::of(a.codec.id, a.codec.params);
  codec::FeedbackState* st = stateOf(a);
  const std::vector<int> order = pattern::ringOrder(ctx.topo(), n);
  const int me = pattern::positionOf(order, ctx.rank());
  const int next = order[pattern::mod(me + 1, n)], prev = order[pattern::mod(me - 1, n)];
  const Pieces l = shardPieces(count, n);
  const size_t most = l.len[0];
  const float* x = floatInput(ctx, a, count);
  float* result = floatOutput(ctx, a, count);
  auto* part = static_cast<float*>(ctx.scratch(std::max<size_t>(most, 1) * sizeof(float)));
  const size_t wireMax = alignedBytes(wire.bytes(most));
  // Wire pieces: one being sent, one being received (double-buffered), and
  // every encoded reduced chunk for the all-gather.
  auto* sendBuf = static_cast<char*>(ctx.scratch(2 * wireMax));
  auto* gathered = static_cast<char*>(ctx.scratch(static_cast<size_t>(n) * wireMax));
  if (x == nullptr || result == nullptr || part == nullptr || sendBuf == nullptr ||
      gathered == nullptr || !ctx.error().ok()) {
    co_return;
  }
  const uint64_t pos = st->counter;
  // Reduce-scatter: at hop s, position i sends chunk (i - s) and receives
  // chunk (i - s - 1), to which it adds its own input.
  int c = pattern::mod(me, n);
  if (!wire.encode(x + l.off[c], nullptr, l.len[c], pos + l.off[c], sendBuf)) {
    fail(ctx, "encoding");
    co_return;
  }
  for (int s = 0; s < n - 1; ++s) {
    const int out = pattern::mod(me - s, n), in = pattern::mod(me - s - 1, n);
    char* tx = sendBuf + (s % 2) * wireMax;
    char* rx = sendBuf + ((s + 1) % 2) * wireMax;
    Pending ps = ctx.send(next, tx, wire.bytes(l.len[out]));
    Pending pr = ctx.recv(prev, rx, wire.bytes(l.len[in]));
    co_await ctx.wait(ps, pr);
    if (!ctx.error().ok()) co_return;
    std::memcpy(part, x + l.off[in], l.len[in] * sizeof(float));
    if (!wire.decodeAcc(rx, l.len[in], part)) {
      fail(ctx, "decoding");
      co_return;
    }
    if (s == n - 2) {
      scaleAvg(a, n, part, l.len[in]);
      c = in;  // this position's reduced chunk
    }
    // The next hop's message (the last encoding is the reduced chunk's).
    char* dst = s == n - 2 ? gathered + static_cast<size_t>(in) * wireMax : rx;
    if (!wire.encode(part, nullptr, l.len[in], pos + (s + 1) * count + l.off[in], dst)) {
      fail(ctx, "encoding");
      co_return;
    }
  }
  if (n == 1) {
    std::memcpy(part, x, count * sizeof(float));
    scaleAvg(a, n, part, count);
    if (!wire.encode(part, nullptr, count, pos, gathered)) {
      fail(ctx, "encoding");
      co_return;
    }
    c = 0;
  }
  // All-gather: forward the encoded reduced chunks as they are.
  for (int s = 0; s < n - 1; ++s) {
    const int out = pattern::mod(c - s, n), in = pattern::mod(c - s - 1, n);
    Pending ps =
        ctx.send(next, gathered + static_cast<size_t>(out) * wireMax, wire.bytes(l.len[out]));
    Pending pr =
        ctx.recv(prev, gathered + static_cast<size_t>(in) * wireMax, wire.bytes(l.len[in]));
    co_await ctx.wait(ps, pr);
    if (!ctx.error().ok()) co_return;
  }
  for (int q = 0; q < n; ++q) {
    if (!wire.decode(gathered + static_cast<size_t>(q) * wireMax, l.len[q], result + l.off[q])) {
      fail(ctx, "decoding");
      co_return;
    }
  }
  if (a.dtype != tideFloat32) fromFloat(a.dtype, result, count, a.recvbuff);
  if (a.codec.params->stochastic) st->counter += static_cast<uint64_t>(n) * count;
}

bool supportsRing(const CollArgs& a, int /*nranks*/) {
  return a.codec.params != nullptr && a.codec.state != nullptr &&
         (a.dtype == tideFloat32 || a.dtype == tideBfloat16 || a.dtype == tideFloat16);
}

constexpr uint32_t kRingCodecs =
    (1u << kCodecFp16) | (1u << kCodecBf16) | (1u << kCodecInt8) | (1u << kCodecInt4);

const AlgorithmInfo kRingCmp = {
    "cmp_ring",
    "Compressed ring All-Reduce that re-encodes the partial sum at every hop (for comparison "
    "under TIDE_ALGO; its error grows with the rank count).",
    collBit(CollType::AllReduce),
    &supportsRing,
    &ringAllReduce,
    nullptr,  // unmodelled: the cost model never picks it
    MemType::Host,
    0,
    kRingCodecs};

}  // namespace

TIDE_ON_LOAD(registerAlgorithm(&kRingCmp));

}  // namespace tide
