// Compressed collectives with the top-k codec: each rank keeps the k
// largest magnitudes of what it sends (k = ceil(ratio x elements), at least
// one) as (index, value) pairs, and the pairs are summed densely in rank
// order, so every rank of an All-Reduce ends with the same bytes.
//   All-Reduce: an all-gather of every rank's pairs, then a dense fp32 sum.
//   When the pairs of all ranks would outweigh a dense exchange
//   (n k 8 bytes received against about 8 N (n-1)/n), the sparse inputs are
//   summed densely instead: an all-to-all of fp32 shards and an all-gather
//   of the summed shards, the same sum.
//   ReduceScatter: the pairs of each destination block go to its owner,
//   which adds them to its own block (exact) in rank order.
//   AllGather: each rank's pairs go to every rank, which writes each block
//   densely (zero where nothing was kept), its own included.
// Error feedback: the sender's residual over the input; what was not sent
// stays in it for the next call (codec::topkFeedback).
#include <cstring>
#include <vector>

#include "algorithms/compression/compressed_phases.h"
#include "core/registry.h"

namespace tide {

namespace {

using cmp::fail;
using cmp::floatInput;
using cmp::scaleAvg;
using codec::TopkPair;

thread_local codec::TopkScratch tTopk;

// Selects the top-k of x[0..m) (plus *resid, when not null) into out.
bool select(const float* x, float* resid, size_t m, size_t k, TopkPair* out) {
  return resid != nullptr ? codec::topkFeedback(x, resid, m, k, out, tTopk)
                          : codec::topk(x, m, k, out, tTopk);
}

// The dense fallback: an fp32 all-to-all of shards, summed in rank order at
// each shard's owner, then an all-gather of the summed shards.
Task denseAllReduce(ExecCtx& ctx, float* v, size_t count, bool avg) {
  const int n = ctx.nranks(), r = ctx.rank();
  const cmp::Shards sh(count, n);
  std::vector<Pending> sends;
  for (int s = 1; s < n; ++s) {
    const int p = (r + s) % n;
    sends.push_back(ctx.send(p, v + sh.offset(p), sh.length(p) * sizeof(float)));
  }
  const size_t mine = sh.length(r);
  auto* in = static_cast<float*>(ctx.scratch(std::max<size_t>(mine, 1) * n * sizeof(float)));
  auto* acc = static_cast<float*>(ctx.scratch(std::max<size_t>(mine, 1) * sizeof(float)));
  if (in == nullptr || acc == nullptr) co_return;
  std::vector<Pending> recvs(n);
  for (int s = 1; s < n; ++s) {
    const int q = (r - s + n) % n;
    recvs[q] = ctx.recv(q, in + mine * q, mine * sizeof(float));
  }
  std::memset(acc, 0, std::max<size_t>(mine, 1) * sizeof(float));
  for (int q = 0; q < n; ++q) {
    const float* src = v + sh.offset(r);
    if (q != r) {
      co_await ctx.wait(recvs[q]);
      if (!ctx.error().ok()) co_return;
      src = in + mine * q;
    }
    for (size_t i = 0; i < mine; ++i) acc[i] += src[i];
  }
  if (!sends.empty()) co_await ctx.waitAll(sends);
  if (avg) {
    const float inv = 1.0f / static_cast<float>(n);
    for (size_t i = 0; i < mine; ++i) acc[i] *= inv;
  }
  std::memcpy(v + sh.offset(r), acc, mine * sizeof(float));
  std::vector<Pending> all;
  for (int s = 1; s < n; ++s) {
    all.push_back(ctx.send((r + s) % n, v + sh.offset(r), mine * sizeof(float)));
    const int q = (r - s + n) % n;
    all.push_back(ctx.recv(q, v + sh.offset(q), sh.length(q) * sizeof(float)));
  }
  if (!all.empty()) co_await ctx.waitAll(all);
}

// Whether the dense fallback moves fewer bytes than the pairs of every rank.
bool denseIsCheaper(size_t k, size_t count, int n) {
  const double pairs = 8.0 * static_cast<double>(k) * (n - 1);
  const double dense = 8.0 * static_cast<double>(count) * (n - 1) / n;
  return n > 1 && pairs >= dense;
}

Task topkAllReduce(ExecCtx& ctx) {
  const CollArgs a = ctx.args();
  const int n = ctx.nranks(), r = ctx.rank();
  const size_t count = a.count;
  const size_t k = cmp::topkCount(a.codec.params->topkRatio, count);
  const float* x = floatInput(ctx, a, count);
  auto* dense = static_cast<float*>(ctx.scratch(count * sizeof(float)));
  auto* pairs = static_cast<TopkPair*>(ctx.scratch(k * n * sizeof(TopkPair)));
  if (x == nullptr || dense == nullptr || pairs == nullptr || !ctx.error().ok()) co_return;
  float* resid = cmp::residual(ctx, a, cmp::stateOf(a)->sender, count);
  if (!ctx.error().ok()) co_return;
  TopkPair* mine = pairs + k * r;
  if (!select(x, resid, count, k, mine)) {
    fail(ctx, "selection");
    co_return;
  }
  std::memset(dense, 0, count * sizeof(float));
  if (denseIsCheaper(k, count, n)) {
    codec::scatterAcc(mine, k, dense, count);
    co_await denseAllReduce(ctx, dense, count, a.codec.avg);
  } else {
    std::vector<Pending> all;
    for (int s = 1; s < n; ++s) {
      all.push_back(ctx.send((r + s) % n, mine, codec::topkWireBytes(k)));
      const int q = (r - s + n) % n;
      all.push_back(ctx.recv(q, pairs + k * q, codec::topkWireBytes(k)));
    }
    if (!all.empty()) co_await ctx.waitAll(all);
    if (!ctx.error().ok()) co_return;
    for (int q = 0; q < n; ++q) codec::scatterAcc(pairs + k * q, k, dense, count);
    scaleAvg(a, n, dense, count);
  }
  if (!ctx.error().ok()) co_return;
  cmp::fromFloat(a.dtype, dense, count, a.recvbuff);
}

Task topkReduceScatter(ExecCtx& ctx) {
  const CollArgs a = ctx.args();
  const int n = ctx.nranks(), r = ctx.rank();
  const size_t count = a.count;  // per rank
  const size_t k = cmp::topkCount(a.codec.params->topkRatio, count);
  const float* x = floatInput(ctx, a, count * n);
  auto* pairs = static_cast<TopkPair*>(ctx.scratch(k * n * sizeof(TopkPair)));
  auto* in = static_cast<TopkPair*>(ctx.scratch(k * n * sizeof(TopkPair)));
  auto* acc = static_cast<float*>(ctx.scratch(count * sizeof(float)));
  if (x == nullptr || pairs == nullptr || in == nullptr || acc == nullptr || !ctx.error().ok())
    co_return;
  float* resid = cmp::residual(ctx, a, cmp::stateOf(a)->sender, count * n);
  if (!ctx.error().ok()) co_return;
  std::vector<Pending> sends;
  for (int s = 1; s < n; ++s) {
    const int p = (r + s) % n;
    const size_t off = count * p;
    if (!select(x + off, resid != nullptr ? resid + off : nullptr, count, k, pairs + k * p)) {
      fail(ctx, "selection");
      co_return;
    }
    sends.push_back(ctx.send(p, pairs + k * p, codec::topkWireBytes(k)));
  }
  std::vector<Pending> recvs(n);
  for (int s = 1; s < n; ++s) {
    const int q = (r - s + n) % n;
    recvs[q] = ctx.recv(q, in + k * q, codec::topkWireBytes(k));
  }
  std::memset(acc, 0, count * sizeof(float));
  for (int q = 0; q < n; ++q) {
    if (q == r) {
      const float* own = x + count * r;
      for (size_t i = 0; i < count; ++i) acc[i] += own[i];
      continue;
    }
    co_await ctx.wait(recvs[q]);
    if (!ctx.error().ok()) co_return;
    codec::scatterAcc(in + k * q, k, acc, count);
  }
  if (!sends.empty()) co_await ctx.waitAll(sends);
  if (!ctx.error().ok()) co_return;
  scaleAvg(a, n, acc, count);
  cmp::fromFloat(a.dtype, acc, count, a.recvbuff);
}

Task topkAllGather(ExecCtx& ctx) {
  const CollArgs a = ctx.args();
  const int n = ctx.nranks(), r = ctx.rank();
  const size_t count = a.count;  // per rank
  const size_t k = cmp::topkCount(a.codec.params->topkRatio, count);
  const float* x = floatInput(ctx, a, count);
  auto* pairs = static_cast<TopkPair*>(ctx.scratch(k * n * sizeof(TopkPair)));
  auto* dense = static_cast<float*>(ctx.scratch(count * n * sizeof(float)));
  if (x == nullptr || pairs == nullptr || dense == nullptr || !ctx.error().ok()) co_return;
  float* resid = cmp::residual(ctx, a, cmp::stateOf(a)->sender, count);
  if (!ctx.error().ok()) co_return;
  if (!select(x, resid, count, k, pairs + k * r)) {
    fail(ctx, "selection");
    co_return;
  }
  std::vector<Pending> all;
  for (int s = 1; s < n; ++s) {
    all.push_back(ctx.send((r + s) % n, pairs + k * r, codec::topkWireBytes(k)));
    const int q = (r - s + n) % n;
    all.push_back(ctx.recv(q, pairs + k * q, codec::topkWireBytes(k)));
  }
  if (!all.empty()) co_await ctx.waitAll(all);
  if (!ctx.error().ok()) co_return;
  std::memset(dense, 0, count * n * sizeof(float));
  for (int q = 0; q < n; ++q) codec::scatterAcc(pairs + k * q, k, dense + count * q, count);
  cmp::fromFloat(a.dtype, dense, count * n, a.recvbuff);
}

Task topkRun(ExecCtx& ctx) {
  switch (ctx.args().type) {
    case CollType::ReduceScatter:
      return topkReduceScatter(ctx);
    case CollType::AllGather:
      return topkAllGather(ctx);
    default:
      return topkAllReduce(ctx);
  }
}

double predictTopk(const CollArgs& a, const CommTopo& t, size_t /*chunkBytes*/) {
  if (a.codec.params == nullptr) return 1e30;
  const int n = std::max(t.nranks, 1);
  const size_t k = cmp::topkCount(a.codec.params->topkRatio, a.count);
  const double elems = static_cast<double>(a.count) * (a.type == CollType::AllReduce ? 1 : n);
  const double select = elems * 4 / cmp::codecBytesPerUs(kCodecTopK);
  if (a.type == CollType::AllReduce && denseIsCheaper(k, a.count, n)) {
    const double shard = 4.0 * static_cast<double>(cmp::Shards(a.count, n).per);
    return select + 2 * cmp::exchangeUs(t, shard);
  }
  return select + cmp::exchangeUs(t, static_cast<double>(codec::topkWireBytes(k)));
}

bool supportsTopk(const CollArgs& a, int /*nranks*/) {
  return a.codec.params != nullptr && a.codec.state != nullptr && a.count <= (size_t{1} << 32) &&
         (a.dtype == tideFloat32 || a.dtype == tideBfloat16 || a.dtype == tideFloat16);
}

const AlgorithmInfo kTopk = {
    "cmp_topk",
    "Compressed (top-k): all-gather of every rank's (index, value) pairs and a dense sum in rank "
    "order (a dense fp32 exchange of the sparse inputs when that moves fewer bytes).",
    collBit(CollType::AllReduce) | collBit(CollType::ReduceScatter) | collBit(CollType::AllGather),
    &supportsTopk,
    &topkRun,
    &predictTopk,
    MemType::Host,
    0,
    1u << kCodecTopK};

}  // namespace

TIDE_ON_LOAD(registerAlgorithm(&kTopk));

}  // namespace tide
