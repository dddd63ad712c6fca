// The hierarchical compressed All-Reduce's bound. Layout of one segment of G
// elements on M nodes of L ranks: chunk l = [l C, min(G, (l + 1) C)),
// C = ceil(G / L) (the intra-node reduce-scatter's pieces), each chunk cut
// into M shards of ceil(len / M) (the inter-node pieces). int8/int4 blocks
// start at each chunk's start in the intra-node phases ("chunk blocks") and
// at each shard's start in the inter-node ones ("shard blocks"). Four
// compression points, each adding h s (int: s = block maximum / qmax of what
// it encodes, that value's bound so far included) or u |value| (+ 2^-25 for
// fp16) per element:
//   e1 = sum_r h maxCB|x_r| / qmax               (every input, chunk blocks)
//   e2 = e1 + sum_m h (maxSB|P_m| + maxSB e1) / qmax
//                                  (every node's partial sum P_m, shard blocks)
//   e3 = e2 + h (maxSB|S| + maxSB e2) / qmax      (the reduced shard)
//   e4 = e3 + h (maxCB|S| + maxCB e3) / qmax      (the reduced chunk)
//   bound = e4 + (n + 4) 2^-23 A; fp16/bf16: u |x_r|, u (|P_m| + e1),
//   u (|S| + e2), u (|S| + e3) in place of the int terms.
// Avg: bound / n + 2^-23 |S| / n, the 2^-25 terms not divided.
#include "common/compress_hier.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace tide_perf {
namespace {

// f(b0, b1) for each block of B elements from lo (the last may be short).
template <class F>
void ForBlocks(size_t lo, size_t hi, size_t block, F f) {
  for (size_t b0 = lo; b0 < hi; b0 += block) f(b0, std::min(hi, b0 + block));
}

double MaxAbs(const double* v, size_t b0, size_t b1) {
  double m = 0;
  for (size_t j = b0; j < b1; ++j) m = std::max(m, std::fabs(v[j]));
  return m;
}

// One compression point over [lo, hi) in blocks: e[j] += h (maxBlk|v| +
// maxBlk prev) / qmax, every element of the block alike.
void IntPoint(const double* v, const double* prev, size_t lo, size_t hi, size_t block, double h,
              double qmax, double* e) {
  ForBlocks(lo, hi, block, [&](size_t b0, size_t b1) {
    const double t = h * (MaxAbs(v, b0, b1) + (prev != nullptr ? MaxAbs(prev, b0, b1) : 0)) / qmax;
    for (size_t j = b0; j < b1; ++j) e[j] += t;
  });
}

}  // namespace

void HierBound(const HierCodec& k, const CompressNodes& nodes, const double* x, size_t len,
               double* out) {
  const bool is_int = k.codec == tideCodecInt8 || k.codec == tideCodecInt4;
  if (!is_int && k.codec != tideCodecFp16 && k.codec != tideCodecBf16) return;
  const int n = static_cast<int>(nodes.node_of.size());
  const int m_nodes = nodes.nodes;
  const size_t per_node = static_cast<size_t>(n / m_nodes);
  const double qmax = k.codec == tideCodecInt4 ? 7 : 127;
  const double u = k.codec == tideCodecFp16 ? 0x1p-11 : 0x1p-8;
  const double sub = k.codec == tideCodecFp16 ? 0x1p-25 : 0;
  const int nsub = n + m_nodes + 2;  // 2^-25 terms per element (fp16)
  std::vector<double> sum(len, 0), abs(len, 0), e1(len, 0), e2, e3, e4;
  std::vector<std::vector<double>> part(static_cast<size_t>(m_nodes), std::vector<double>(len, 0));
  for (int r = 0; r < n; ++r) {
    const double* xr = x + static_cast<size_t>(r) * len;
    std::vector<double>& p = part[static_cast<size_t>(nodes.node_of[static_cast<size_t>(r)])];
    for (size_t j = 0; j < len; ++j) {
      sum[j] += xr[j];
      abs[j] += std::fabs(xr[j]);
      p[j] += xr[j];
    }
  }
  const size_t chunk = (len + per_node - 1) / per_node;
  // Point 1: every input over chunk blocks.
  for (int r = 0; r < n; ++r) {
    const double* xr = x + static_cast<size_t>(r) * len;
    if (is_int) {
      for (size_t c0 = 0; c0 < len; c0 += chunk) {
        IntPoint(xr, nullptr, c0, std::min(len, c0 + chunk), k.block, k.h, qmax, e1.data());
      }
    } else {
      for (size_t j = 0; j < len; ++j) e1[j] += u * std::fabs(xr[j]) + sub;
    }
  }
  // Points 2 and 3 (shard blocks), then 4 (chunk blocks).
  e2 = e1;
  for (size_t c0 = 0; c0 < len; c0 += chunk) {
    const size_t c1 = std::min(len, c0 + chunk);
    const size_t shard =
        (c1 - c0 + static_cast<size_t>(m_nodes) - 1) / static_cast<size_t>(m_nodes);
    for (size_t s0 = c0; s0 < c1; s0 += shard) {
      const size_t s1 = std::min(c1, s0 + shard);
      for (const std::vector<double>& p : part) {
        if (is_int) {
          IntPoint(p.data(), e1.data(), s0, s1, k.block, k.h, qmax, e2.data());
        } else {
          for (size_t j = s0; j < s1; ++j) e2[j] += u * (std::fabs(p[j]) + e1[j]) + sub;
        }
      }
    }
  }
  e3 = e2;
  for (size_t c0 = 0; c0 < len; c0 += chunk) {
    const size_t c1 = std::min(len, c0 + chunk);
    const size_t shard =
        (c1 - c0 + static_cast<size_t>(m_nodes) - 1) / static_cast<size_t>(m_nodes);
    for (size_t s0 = c0; s0 < c1; s0 += shard) {
      const size_t s1 = std::min(c1, s0 + shard);
      if (is_int) {
        IntPoint(sum.data(), e2.data(), s0, s1, k.block, k.h, qmax, e3.data());
      } else {
        for (size_t j = s0; j < s1; ++j) e3[j] += u * (std::fabs(sum[j]) + e2[j]) + sub;
      }
    }
  }
  e4 = e3;
  for (size_t c0 = 0; c0 < len; c0 += chunk) {
    const size_t c1 = std::min(len, c0 + chunk);
    if (is_int) {
      IntPoint(sum.data(), e3.data(), c0, c1, k.block, k.h, qmax, e4.data());
    } else {
      for (size_t j = c0; j < c1; ++j) e4[j] += u * (std::fabs(sum[j]) + e3[j]) + sub;
    }
  }
  for (size_t j = 0; j < len; ++j) {
    double b = e4[j] + (n + 4) * 0x1p-23 * abs[j];
    if (k.avg) b = b / n + 0x1p-23 * std::fabs(sum[j]) / n + nsub * sub;
    out[j] = std::max(out[j], b);
  }
}

}  // namespace tide_perf
