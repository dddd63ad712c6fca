// The check of one compressed call (CompressVerify): the fp64 reference and
// the per-element bound of docs/compression.md ("Error bounds"), on the first
// call of a compressor (residual zero).
//
// Notation, per output element i: n ranks (AllGather: n = 1, the one rank
// whose block holds i), x_r the input of rank r, S the exact sum in fp64,
// A = sum_r |x_r|, F = (n + 2) 2^-23 A (fp32 slack). u = 2^-11 (fp16),
// 2^-8 (bf16). int8/int4: qmax 127/7, s_r = (max |x_r| over the block of i)
// / qmax, h = 1/2 (nearest) or 1 (stochastic rounding). Top-k: t_r the k-th
// largest |x_r| among the M elements rank r selects from, k = max(1,
// ceil(ratio M)).
//   All-Reduce:    fp16/bf16 u A + u |S| + F (+ (n + 1) 2^-25 fp16)
//                  int       sum_r h s_r + h s_out + F,
//                            s_out = (max_blk |S| + max_blk sum_r h s_r) / qmax
//                  top-k     sum_r t_r + F          (M = N)
//   ReduceScatter: fp16/bf16 u A + F (+ n 2^-25 fp16); int sum_r h s_r + F;
//                  top-k sum_r t_r + F (M = recvcount, the destination shard)
//   AllGather:     fp16/bf16 u |x| + F (+ 2^-25 fp16); int h s + F; top-k
//                  t_r + F (M = sendcount)
//   none:          the plain collective: F + n u_dt A (+ n 2^-25 for half)
//                  for All-Reduce and ReduceScatter, 0 for AllGather
//   auto:          the largest of the none, fp16, bf16 and int8 bounds.
// Avg: the reference is S / n and every term above except the 2^-25 ones is
// divided by n. A bfloat16 or half result adds its own rounding:
// + u_dt (|reference| + bound) (+ 2^-25 for half), u_dt = 2^-8 / 2^-11
// (u_dt = 0 for float).
// Blocks (int codecs): All-Reduce shard p = [p S, min(N, (p + 1) S)),
// S = ceil(N / n), blocks of B from each shard's start; ReduceScatter: the
// destination shard, blocks from its start; AllGather: each rank's sendcount
// elements, blocks from its start.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include "common/compress.h"
#include "common/compress_hier.h"
#include "common/harness.h"

namespace tide_perf {
namespace {

constexpr double kSub16 = 0x1p-25;  // half precision's subnormal rounding
constexpr size_t kChunk = 4096;     // elements per pass of the per-element codecs
// The compressed All-Reduce's pipeline segment: each is laid out by itself.
constexpr size_t kSegment = size_t{1} << 20;

struct Ctx {
  const DType* dt = nullptr;
  uint64_t seed = 0;
  int n = 1;  // ranks of the communicator
  CompressKind kind = CompressKind::kNone;
  tideCodec_t codec = tideCodecNone;
  size_t block = 256;
  double h = 0.5;  // 1/2: nearest; 1: stochastic rounding
  bool avg = false;
  double u_out = 0;    // rounding of the result's datatype
  double abs_out = 0;  // its subnormal term
};

// One checked range: result elements out[0..len) are the reduction (or, with
// one contributing rank, the copy) of input elements [in0, in0 + len) of the
// ranks [r0, r1). Blocks of the int codecs start at in0.
struct Range {
  const char* out;
  size_t len;
  size_t in0;
  int r0, r1;
  // Per result element, another row's bound to take the larger of (the
  // hierarchical All-Reduce's), or null.
  const double* pre = nullptr;
};

// Element `index` of rank `rank`'s input.
using Source = std::function<double(int rank, size_t index)>;

double Got(const DType& dt, const char* p) {
  if (dt.id == tideFloat32) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  return Decode(dt, p);
}

bool IntCodec(tideCodec_t c) { return c == tideCodecInt8 || c == tideCodecInt4; }

// Per-element quantities of one element of a range.
struct Elem {
  double sum;   // S (fp64)
  double abs;   // A
  double hs8;   // sum_r h s_r of the element's block, int8's qmax
  double hs4;   // the same with int4's qmax
  double maxS;  // max |S| over the block
  double topk;  // sum_r t_r
};

// The codecs a call of `codec` may have used: auto chooses among none, bf16
// and int8 (fp16 added: its bound differs from bf16's in the 2^-25 terms).
std::vector<tideCodec_t> Candidates(tideCodec_t codec) {
  if (codec == tideCodecAuto) return {tideCodecNone, tideCodecFp16, tideCodecBf16, tideCodecInt8};
  return {codec};
}

// The bound of `codec` at element e, before the result's own rounding.
double CodecBound(const Ctx& c, tideCodec_t codec, const Elem& e) {
  const bool reduce = c.kind != CompressKind::kAllGather;
  const bool twice = c.kind == CompressKind::kAllReduce;  // the result is encoded too
  const int n = reduce ? c.n : 1;
  const double f = (n + 2) * 0x1p-23 * e.abs;
  double rel = 0, abs = 0;
  switch (codec) {
    case tideCodecNone:
      // The plain collective: a bfloat16 or half reduction rounds its partial
      // sums in the datatype (the result's own rounding is added by Bound).
      rel = reduce ? f + n * c.u_out * e.abs : 0;
      if (reduce) abs = n * c.abs_out;
      break;
    case tideCodecFp16:
    case tideCodecBf16: {
      const double u = codec == tideCodecFp16 ? 0x1p-11 : 0x1p-8;
      rel = u * e.abs + (twice ? u * std::fabs(e.sum) : 0) + f;
      if (codec == tideCodecFp16) abs = (twice ? n + 1 : n) * kSub16;
      break;
    }
    case tideCodecInt8:
    case tideCodecInt4: {
      const double qmax = codec == tideCodecInt8 ? 127 : 7;
      // sum_r h s_r is one value per block, so it is also its block maximum.
      const double hs = codec == tideCodecInt8 ? e.hs8 : e.hs4;
      rel = hs + f;
      if (twice) rel += c.h * (e.maxS + hs) / qmax;
      break;
    }
    case tideCodecTopK:
      rel = e.topk + f;
      break;
    default:
      break;
  }
  // Avg: the fp32 sum is scaled by 1/n (one more rounding).
  return c.avg ? rel / c.n + 0x1p-23 * std::fabs(e.sum) / c.n + abs : rel + abs;
}

// The largest bound of the codecs the call may have used, `pre` included,
// plus the rounding of the result's datatype.
double Bound(const Ctx& c, const Elem& e, double ref, double pre) {
  double b = pre;
  for (tideCodec_t k : Candidates(c.codec)) b = std::max(b, CodecBound(c, k, e));
  return b + c.u_out * (std::fabs(ref) + b) + c.abs_out;
}

// k-th largest magnitude of rank r's inputs [lo, lo + m): t_r of top-k.
double TopkThreshold(const Ctx& c, double ratio, int r, size_t lo, size_t m) {
  if (m == 0) return 0;
  size_t k = static_cast<size_t>(std::ceil(ratio * static_cast<double>(m)));
  k = std::min(std::max<size_t>(k, 1), m);
  std::vector<float> mag(m);
  for (size_t i = 0; i < m; ++i) {
    mag[i] = static_cast<float>(std::fabs(CompressValue(*c.dt, c.seed, r, lo + i)));
  }
  std::nth_element(mag.begin(), mag.begin() + static_cast<std::ptrdiff_t>(k - 1), mag.end(),
                   std::greater<float>());
  return mag[k - 1];
}

void CheckRange(const Ctx& c, const Range& rg, const Source& input, double topk_sum,
                CompressCheck* res) {
  const bool blocks = IntCodec(c.codec) || c.codec == tideCodecAuto;
  const size_t seg = blocks ? c.block : kChunk;
  const int nr = rg.r1 - rg.r0;
  std::vector<double> x(static_cast<size_t>(nr) * std::min(seg, rg.len));
  std::vector<Elem> el(std::min(seg, rg.len));
  const size_t es = c.dt->size;
  for (size_t a = 0; a < rg.len; a += seg) {
    const size_t len = std::min(seg, rg.len - a);
    double hs8 = 0, hs4 = 0;
    for (int r = 0; r < nr; ++r) {
      double amax = 0;
      double* xr = &x[static_cast<size_t>(r) * len];
      for (size_t j = 0; j < len; ++j) {
        xr[j] = input(rg.r0 + r, rg.in0 + a + j);
        amax = std::max(amax, std::fabs(xr[j]));
      }
      hs8 += c.h * amax / 127;
      hs4 += c.h * amax / 7;
    }
    double max_s = 0;
    for (size_t j = 0; j < len; ++j) {
      Elem& e = el[j];
      e.sum = e.abs = 0;
      for (int r = 0; r < nr; ++r) {
        const double v = x[static_cast<size_t>(r) * len + j];
        e.sum += v;
        e.abs += std::fabs(v);
      }
      max_s = std::max(max_s, std::fabs(e.sum));
    }
    // Per-element codecs: segments are not blocks (the block terms are unused).
    for (size_t j = 0; j < len; ++j) {
      Elem& e = el[j];
      e.hs8 = hs8;
      e.hs4 = hs4;
      e.maxS = max_s;
      e.topk = topk_sum;
      const double ref = c.avg ? e.sum / c.n : e.sum;
      const double got = Got(*c.dt, rg.out + (a + j) * es);
      const double err = std::isnan(got) ? INFINITY : std::fabs(got - ref);
      const double pre = rg.pre != nullptr ? rg.pre[a + j] : 0;
      if (!(err <= Bound(c, e, ref, pre))) ++res->wrong;
      res->maxabs = std::max(res->maxabs, err);
      if (ref != 0) res->maxrel = std::max(res->maxrel, err / std::fabs(ref));
    }
  }
}

// All-Reduce, non-top-k codecs: segment by segment (the layout), every
// rank's input of the segment at hand, the one-level bound by shards and,
// on several nodes of equal size, the larger of it and the hierarchical one.
void CheckAllReduce(const Ctx& c, const char* out, size_t count, const CompressNodes& nodes,
                    CompressCheck* res) {
  const size_t n = static_cast<size_t>(c.n);
  const bool hier = nodes.nodes > 1 && nodes.equal && nodes.node_of.size() == n;
  std::vector<double> x, pre;
  for (size_t g0 = 0; g0 < count; g0 += kSegment) {
    const size_t len = std::min(kSegment, count - g0);
    x.resize(n * len);
    for (size_t r = 0; r < n; ++r) {
      for (size_t j = 0; j < len; ++j) {
        x[r * len + j] = CompressValue(*c.dt, c.seed, static_cast<int>(r), g0 + j);
      }
    }
    pre.assign(len, 0);
    for (tideCodec_t k : Candidates(c.codec)) {
      if (hier && k != tideCodecNone) {
        HierBound(HierCodec{k, c.block, c.h, c.avg}, nodes, x.data(), len, pre.data());
      }
    }
    const Source input = [&](int r, size_t i) {
      return x[static_cast<size_t>(r) * len + (i - g0)];
    };
    const size_t shard = (len + n - 1) / n;
    for (size_t lo = 0; lo < len; lo += shard) {
      const size_t m = std::min(shard, len - lo);
      CheckRange(c, Range{out + (g0 + lo) * c.dt->size, m, g0 + lo, 0, c.n, pre.data() + lo}, input,
                 0, res);
    }
  }
}

}  // namespace

CompressCheck CompressVerify(CompressKind kind, const Bench& b, const CompressOptions& o,
                             const CompressNodes& nodes, uint64_t seed) {
  Ctx c;
  c.dt = b.dt;
  c.seed = seed;
  c.n = b.nranks;
  c.kind = kind;
  c.codec = o.codec;
  c.block = static_cast<size_t>(std::max(o.block, 1));
  c.h = o.stochastic ? 1.0 : 0.5;
  c.avg = kind != CompressKind::kAllGather && b.op == tideAvg;
  if (b.dt->id == tideBfloat16) c.u_out = 0x1p-8;
  if (b.dt->id == tideFloat16) {
    c.u_out = 0x1p-11;
    c.abs_out = kSub16;
  }
  const bool topk = o.codec == tideCodecTopK;
  const double ratio = o.topk_ratio;
  const size_t es = b.dt->size;
  const Source gen = [&c](int r, size_t i) { return CompressValue(*c.dt, c.seed, r, i); };
  CompressCheck res;
  const char* out = static_cast<const char*>(b.recv);
  switch (kind) {
    case CompressKind::kAllReduce: {
      if (!topk) {
        CheckAllReduce(c, out, b.count, nodes, &res);
        break;
      }
      double tsum = 0;
      for (int r = 0; r < c.n; ++r) tsum += TopkThreshold(c, ratio, r, 0, b.count);
      for (size_t lo = 0; lo < b.count; lo += kChunk) {
        const size_t len = std::min(kChunk, b.count - lo);
        CheckRange(c, Range{out + lo * es, len, lo, 0, c.n}, gen, tsum, &res);
      }
      break;
    }
    case CompressKind::kReduceScatter: {
      const size_t lo = static_cast<size_t>(b.rank) * b.count;
      double tsum = 0;
      for (int r = 0; topk && r < c.n; ++r) tsum += TopkThreshold(c, ratio, r, lo, b.count);
      CheckRange(c, Range{out, b.count, lo, 0, c.n}, gen, tsum, &res);
      break;
    }
    case CompressKind::kAllGather: {
      const char* base = b.recv_base;
      for (int r = 0; r < c.n; ++r) {
        const double t = topk ? TopkThreshold(c, ratio, r, 0, b.count) : 0;
        CheckRange(c, Range{base + static_cast<size_t>(r) * b.count * es, b.count, 0, r, r + 1},
                   gen, t, &res);
      }
      break;
    }
    case CompressKind::kNone:
      break;
  }
  return res;
}

}  // namespace tide_perf
