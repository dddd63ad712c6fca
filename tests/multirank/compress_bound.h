// The documented per-element error bounds of the compressed collectives
// (docs/compression.md), computed from every rank's input in fp64, written
// independently of the library. Used by compress_test.cc.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "tide/compress.h"

namespace tide_test {

enum class CColl { kAllReduce, kReduceScatter, kAllGather };

struct CSpec {
  CColl coll = CColl::kAllReduce;
  tideCodec_t codec = tideCodecInt8;
  int block = 256;
  double ratio = 0.01;
  bool stochastic = false;
  bool avg = false;
  tideDataType_t dtype = tideFloat32;
  int nranks = 2;
  size_t count = 0;  // the collective's count argument
  // The hierarchical All-Reduce (cmp_hier): each rank's node; empty: the
  // one-level algorithms.
  std::vector<int> nodeOf;
  bool interNodeOnly = false;
  double loosen = 1;  // the checks allow loosen x the bound (the hop-by-hop ring)
};

inline size_t TopkK(double ratio, size_t m) {
  if (m == 0) return 0;
  const double k = ratio * static_cast<double>(m);
  size_t kk = k >= static_cast<double>(m) ? m : static_cast<size_t>(k);
  if (static_cast<double>(kk) < k) ++kk;
  return std::clamp<size_t>(kk, 1, m);
}

// The k-th largest magnitude of v[lo, hi).
inline double KthMagnitude(const std::vector<double>& v, size_t lo, size_t hi, size_t k) {
  std::vector<double> m;
  for (size_t i = lo; i < hi; ++i) m.push_back(std::fabs(v[i]));
  std::sort(m.begin(), m.end(), [](double a, double b) { return a > b; });
  return m.empty() ? 0 : m[std::min(k, m.size()) - 1];
}

// The hierarchical All-Reduce: chunk l = shard l of N in L (ranks per node),
// each chunk in M (nodes) shards; quantization blocks start at chunk starts
// in the intra-node phases and at shard starts in the inter-node ones. Four
// compression points (two with interNodeOnly): the intra-node reduce-scatter
// of every input, the inter-node reduce-scatter of every node's partial sum,
// the encoding of the reduced shard, and the intra-node gather of the
// reduced chunk; each adds its s/2 (int) or u |value| (fp16/bf16).
inline std::vector<double> CBoundHier(const CSpec& s, const std::vector<std::vector<double>>& x) {
  const int n = s.nranks;
  const size_t N = s.count;
  int M = 0;
  for (int m : s.nodeOf) M = std::max(M, m + 1);
  const int L = n / M;
  const bool isInt = s.codec == tideCodecInt8 || s.codec == tideCodecInt4;
  const double qmax = s.codec == tideCodecInt4 ? 7 : 127;
  const double mult = s.stochastic ? 1.0 : 0.5;
  const double u = s.codec == tideCodecFp16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
  const double sub = s.codec == tideCodecFp16 ? std::ldexp(1.0, -25) : 0;
  const size_t B = static_cast<size_t>(s.block);
  const size_t C = (N + L - 1) / L;
  auto chunkBlock = [&](size_t i) {
    const size_t c0 = i / C * C, c1 = std::min(N, c0 + C);
    const size_t b0 = c0 + (i - c0) / B * B;
    return std::make_pair(b0, std::min(c1, b0 + B));
  };
  auto shardBlock = [&](size_t i) {
    const size_t c0 = i / C * C, c1 = std::min(N, c0 + C);
    const size_t S = (c1 - c0 + M - 1) / M;
    const size_t s0 = c0 + (i - c0) / S * S, s1 = std::min(c1, s0 + S);
    const size_t b0 = s0 + (i - s0) / B * B;
    return std::make_pair(b0, std::min(s1, b0 + B));
  };
  std::vector<double> sum(N, 0), abs(N, 0), e(N, 0);
  std::vector<std::vector<double>> part(M, std::vector<double>(N, 0));
  for (size_t i = 0; i < N; ++i) {
    for (int r = 0; r < n; ++r) {
      sum[i] += x[r][i];
      abs[i] += std::fabs(x[r][i]);
      part[s.nodeOf[r]][i] += x[r][i];
    }
  }
  auto maxOf = [](const std::vector<double>& v, std::pair<size_t, size_t> b) {
    double m = 0;
    for (size_t j = b.first; j < b.second; ++j) m = std::max(m, std::fabs(v[j]));
    return m;
  };
  // Point 1: every input over chunk blocks.
  if (!s.interNodeOnly) {
    for (size_t i = 0; i < N; ++i) {
      for (int r = 0; r < n; ++r) {
        e[i] += isInt ? mult * maxOf(x[r], chunkBlock(i)) / qmax : u * std::fabs(x[r][i]) + sub;
      }
    }
  }
  // Point 2: every node's partial sum over shard blocks (its error so far
  // included in the block maximum).
  std::vector<double> e2 = e;
  for (size_t i = 0; i < N; ++i) {
    for (int m = 0; m < M; ++m) {
      e2[i] += isInt ? mult * (maxOf(part[m], shardBlock(i)) + maxOf(e, shardBlock(i))) / qmax
                     : u * (std::fabs(part[m][i]) + e[i]) + sub;
    }
  }
  // Points 3 and 4: the reduced shard, then the reduced chunk.
  std::vector<double> e3 = e2;
  for (size_t i = 0; i < N; ++i) {
    e3[i] += isInt ? mult * (maxOf(sum, shardBlock(i)) + maxOf(e2, shardBlock(i))) / qmax
                   : u * (std::fabs(sum[i]) + e2[i]) + sub;
  }
  std::vector<double> e4 = e3;
  if (!s.interNodeOnly) {
    for (size_t i = 0; i < N; ++i) {
      e4[i] += isInt ? mult * (maxOf(sum, chunkBlock(i)) + maxOf(e3, chunkBlock(i))) / qmax
                     : u * (std::fabs(sum[i]) + e3[i]) + sub;
    }
  }
  const double dtU = s.dtype == tideBfloat16  ? std::ldexp(1.0, -8)
                     : s.dtype == tideFloat16 ? std::ldexp(1.0, -11)
                                              : 0;
  std::vector<double> out(N);
  for (size_t i = 0; i < N; ++i) {
    double b = e4[i] + (n + 4) * std::ldexp(1.0, -23) * abs[i];
    double ref = std::fabs(sum[i]);
    if (s.avg) {
      b = b / n + std::ldexp(1.0, -23) * ref / n;
      ref /= n;
    }
    out[i] = b + dtU * (ref + b);
  }
  return out;
}

// Per-element bound of rank `me`'s output (its length: AllReduce count,
// ReduceScatter count, AllGather count x nranks). x[r]: rank r's input as the
// library sees it (already rounded to the datatype).
inline std::vector<double> CBound(const CSpec& s, const std::vector<std::vector<double>>& x,
                                  int me) {
  const int n = s.nranks;
  const size_t N = s.count;
  const double qmax = s.codec == tideCodecInt4 ? 7 : 127;
  const double mult = s.stochastic ? 1.0 : 0.5;
  const double u = s.codec == tideCodecFp16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
  const double sub = s.codec == tideCodecFp16 ? std::ldexp(1.0, -25) : 0;
  const bool isInt = s.codec == tideCodecInt8 || s.codec == tideCodecInt4;
  const size_t B = static_cast<size_t>(s.block);
  // Element range [lo, hi) of the input that forms output element range of
  // rank p's output piece, and the start of each block within it.
  auto blockOf = [&](size_t i, size_t lo, size_t hi) {
    const size_t b0 = lo + (i - lo) / B * B;
    return std::make_pair(b0, std::min(hi, b0 + B));
  };
  auto blockMax = [&](const std::vector<double>& v, size_t b0, size_t b1) {
    double m = 0;
    for (size_t j = b0; j < b1; ++j) m = std::max(m, std::fabs(v[j]));
    return m;
  };
  const double dtU = s.dtype == tideBfloat16  ? std::ldexp(1.0, -8)
                     : s.dtype == tideFloat16 ? std::ldexp(1.0, -11)
                                              : 0;
  std::vector<double> out;
  if (s.coll == CColl::kAllGather) {
    for (int q = 0; q < n; ++q) {
      const double t = s.codec == tideCodecTopK ? KthMagnitude(x[q], 0, N, TopkK(s.ratio, N)) : 0;
      for (size_t i = 0; i < N; ++i) {
        double b;
        if (s.codec == tideCodecTopK) {
          b = t;
        } else if (isInt) {
          auto [b0, b1] = blockOf(i, 0, N);
          b = mult * blockMax(x[q], b0, b1) / qmax;
        } else {
          b = u * std::fabs(x[q][i]) + sub;
        }
        b += 3 * std::ldexp(1.0, -23) * std::fabs(x[q][i]);  // fp32 slack (n = 1)
        out.push_back(b + dtU * (std::fabs(x[q][i]) + b));
      }
    }
    return out;
  }
  if (s.coll == CColl::kAllReduce && !s.nodeOf.empty() && s.codec != tideCodecTopK) {
    return CBoundHier(s, x);
  }
  // Reductions: the input range each output element comes from.
  const bool ar = s.coll == CColl::kAllReduce;
  const size_t len = N;  // output elements (All-Reduce and ReduceScatter alike)
  const size_t per = ar ? (N + n - 1) / n : N;
  std::vector<double> sum(ar ? N : N * n, 0), abs(sum.size(), 0), e1(sum.size(), 0);
  for (size_t i = 0; i < sum.size(); ++i) {
    for (int r = 0; r < n; ++r) {
      sum[i] += x[r][i];
      abs[i] += std::fabs(x[r][i]);
    }
  }
  auto pieceOf = [&](size_t i) {  // [lo, hi) of the shard / block holding input index i
    const size_t lo = i / per * per;
    return std::make_pair(lo, std::min(sum.size(), lo + per));
  };
  std::vector<double> tk(n, 0);
  for (size_t i = 0; i < sum.size(); ++i) {
    if (!isInt) continue;
    auto [lo, hi] = pieceOf(i);
    auto [b0, b1] = blockOf(i, lo, hi);
    for (int r = 0; r < n; ++r) e1[i] += mult * blockMax(x[r], b0, b1) / qmax;
  }
  const size_t base = ar ? 0 : static_cast<size_t>(me) * N;
  if (s.codec == tideCodecTopK) {
    for (int r = 0; r < n; ++r) {
      tk[r] = ar ? KthMagnitude(x[r], 0, N, TopkK(s.ratio, N))
                 : KthMagnitude(x[r], base, base + N, TopkK(s.ratio, N));
    }
  }
  for (size_t j = 0; j < len; ++j) {
    const size_t i = base + j;
    const double F = (n + 2) * std::ldexp(1.0, -23) * abs[i];
    double b;
    if (s.codec == tideCodecTopK) {
      b = 0;
      for (int r = 0; r < n; ++r) b += tk[r];
    } else if (isInt) {
      b = e1[i];
      if (ar) {
        auto [lo, hi] = pieceOf(i);
        auto [b0, b1] = blockOf(i, lo, hi);
        double smax = 0, emax = 0;
        for (size_t k = b0; k < b1; ++k) {
          smax = std::max(smax, std::fabs(sum[k]));
          emax = std::max(emax, e1[k]);
        }
        b += mult * (smax + emax) / qmax;
      }
    } else {
      b = u * abs[i] + (ar ? u * std::fabs(sum[i]) + (n + 1) * sub : n * sub);
    }
    b += F;
    double ref = std::fabs(sum[i]);
    if (s.avg) {
      b = b / n + std::ldexp(1.0, -23) * ref / n;
      ref /= n;
    }
    out.push_back(b + dtU * (ref + b));
  }
  return out;
}

}  // namespace tide_test
