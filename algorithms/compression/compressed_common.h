// What the compressed collectives (compressed_a2a.cc, compressed_topk.cc)
// share: the kernel codec of a call, the shard layout (a contract documented
// in docs/compression.md), conversions between the call's datatype and the
// fp32 the codecs work in, and the cost model's pieces.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "algorithms/compression/codec_kernels.h"
#include "algorithms/compression/error_feedback.h"
#include "core/algorithm.h"
#include "core/codec.h"
#include "core/topology.h"

namespace tide::cmp {

// The kernel codec of a quantizing or casting call (not top-k).
inline codec::Codec kernelCodec(int id) {
  switch (id) {
    case kCodecFp16:
      return codec::Codec::kFp16;
    case kCodecBf16:
      return codec::Codec::kBf16;
    case kCodecInt4:
      return codec::Codec::kInt4;
    default:
      return codec::Codec::kInt8;
  }
}

// All-Reduce shards: n shards of S = ceil(N / n) elements, shard p covering
// [p S, min(N, (p + 1) S)); the last ones may be short or empty.
struct Shards {
  size_t total;
  size_t per;
  Shards(size_t n, int ranks)
      : total(n), per(ranks > 0 ? (n + static_cast<size_t>(ranks) - 1) / ranks : n) {}
  size_t offset(int p) const { return std::min(total, per * static_cast<size_t>(p)); }
  size_t length(int p) const { return std::min(total, offset(p) + per) - offset(p); }
};

// Elements of `a`'s datatype (float32, bfloat16, float16) to fp32 and back
// (round to nearest even; fp16/bf16 saturate finite values, like the codecs).
inline void toFloat(tideDataType_t dt, const void* in, size_t n, float* out) {
  if (dt == tideBfloat16) {
    codec::decodeBf16(static_cast<const uint16_t*>(in), out, n);
  } else if (dt == tideFloat16) {
    codec::decodeFp16(static_cast<const uint16_t*>(in), out, n);
  } else {
    std::copy_n(static_cast<const float*>(in), n, out);
  }
}
inline void fromFloat(tideDataType_t dt, const float* in, size_t n, void* out) {
  if (dt == tideBfloat16) {
    codec::encodeBf16(in, static_cast<uint16_t*>(out), n);
  } else if (dt == tideFloat16) {
    codec::encodeFp16(in, static_cast<uint16_t*>(out), n);
  } else {
    std::copy_n(in, n, static_cast<float*>(out));
  }
}

// Top-k: the pairs a rank keeps of m elements.
inline size_t topkCount(double ratio, size_t m) {
  if (m == 0) return 0;
  const double k = ratio * static_cast<double>(m);
  size_t kk = k >= static_cast<double>(m) ? m : static_cast<size_t>(k);
  if (static_cast<double>(kk) < k) ++kk;  // ceil
  return std::clamp<size_t>(kk, 1, m);
}

// Bytes of one encoded piece of n elements (CodecProvider::wireBytes).
inline uint64_t pieceBytes(int id, const CodecParams& p, uint64_t n) {
  if (id == kCodecTopK) return codec::topkWireBytes(topkCount(p.topkRatio, n));
  return codec::wireBytes(kernelCodec(id), n, p.block);
}

// Host throughput of the codec kernels for the cost model, bytes of fp32
// input per microsecond (perf/codec_bench: 8-11 GB/s per core for the
// casts and the quantizers; selection for top-k is slower).
inline double codecBytesPerUs(int id) { return id == kCodecTopK ? 2.5e3 : 8e3; }

// One all-to-all step in which every rank sends `bytes` to each peer: the
// busiest link's time (intra-node ranks share their memory link, a node's
// ranks share its network link).
inline double exchangeUs(const CommTopo& t, double bytes) {
  const int n = std::max(t.nranks, 1);
  if (n == 1 || bytes <= 0) return 0;
  double intraUs = 0, interUs = 0;
  for (int node = 0; node < std::max(t.nnodes, 1); ++node) {
    const double k = node < static_cast<int>(t.nodeRanks.size())
                         ? static_cast<double>(t.nodeRanks[node].size())
                         : static_cast<double>(n);
    if (k > 1) {
      intraUs =
          std::max(intraUs, t.intraNode.latencyUs +
                                (k - 1) * bytes / (std::max(t.intraNode.bandwidthGBs, 1e-6) * 1e3));
    }
    if (n - k > 0) {
      interUs = std::max(
          interUs, t.interNode.latencyUs +
                       k * (n - k) * bytes / (std::max(t.interNode.bandwidthGBs, 1e-6) * 1e3));
    }
  }
  return std::max(intraUs, interUs);
}

}  // namespace tide::cmp
