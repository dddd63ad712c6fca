// Device kernels of the gradient-compression codecs (issue 17): the fp16/bf16
// casts and the int8/int4 block quantization of
// algorithms/compression/codec_kernels.h, for device buffers, with the same
// wire layouts and the same bits as the host's scalar reference
// (codec_common.h, codec_scalar.cc). codec_device.cc launches them.
//
// Compiled by nvcc into its own fat binary (sm_80, sm_90, compute_90 PTX;
// src/cuda/meson.build, with --fmad=false --ftz=false). Every fp32
// operation is also written as an explicit round-to-nearest intrinsic
// (__fadd_rn, __fsub_rn, __fmul_rn, __fdiv_rn), which nvcc never contracts
// into a fused multiply-add, and denormals are kept: each operation rounds
// once, as on the host.
//
// Kernels (extern "C"; n, block and counts are unsigned long long; any grid,
// blockDim.x at most 256, a multiple of 32 for tide_cc_amax_cta):
//  * tide_cc_enc16_<c>(x, residual, out, n), c 0 = fp16, 1 = bf16: out =
//    encode(x), or with a non-null residual the fused error feedback.
//  * tide_cc_dec16_<c>(in, y, n, acc): y = decode(in) (acc 0) or y += it.
//  * Quantization (int8 "8", int4 "4") in three launches on one stream, the
//    wire's scale slots holding each block's largest magnitude (fp32 bits)
//    between them, so that no scratch memory is needed:
//      tide_cc_amax_thread (one thread per block) or tide_cc_amax_cta (one
//      CTA per block): slot b = max |v| over block b, v = x (+ residual);
//      tide_cc_codes<k>: the codes (int8 one element, int4 one byte a
//      thread: its two elements may lie in two blocks) and, with a residual,
//      the new residual, from the slots;
//      tide_cc_scales<k>: slot b = the scale of its block.
//  * tide_cc_deq<k>(wire, y, n, block, acc): y = decode (acc 0) or y += it.
//  * tide_cc_draw(seed, counter, out, n): out[i] = drawBits(seed, counter + i).
// Scale slots are accessed byte-wise when the wire is not 4-byte aligned (an
// int codec's wire may have any alignment, as on the host).
#include <cstddef>
#include <cstdint>

#include "reduce_ops.cuh"

namespace {

using u64 = unsigned long long;

constexpr uint32_t kAbsMask = 0x7fffffffu;
constexpr uint32_t kInfBits = 0x7f800000u;
constexpr uint32_t kHalfMaxBits = 0x477fe000u;  // 65504, the largest finite fp16
constexpr uint32_t kBf16MaxBits = 0x7f7f0000u;  // the largest finite bf16
constexpr uint32_t kTinyBits = 0x07800000u;     // 2^-112: smaller blocks encode as zeros
constexpr uint32_t kQuietNaN = 0x7fc00000u;
constexpr float kRound = 12582912.0f;  // 1.5 * 2^23

TIDE_DEV uint64_t globalThread() {
  return static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
TIDE_DEV uint64_t gridThreads() { return static_cast<uint64_t>(gridDim.x) * blockDim.x; }

TIDE_DEV uint32_t absBits(float f) { return floatBits(f) & kAbsMask; }

// i / block, in 32 bits where both fit (block <= 2^20 always does).
TIDE_DEV uint64_t blockOf(uint64_t i, uint64_t block) {
  if ((i >> 32) == 0) return static_cast<uint32_t>(i) / static_cast<uint32_t>(block);
  return i / block;
}

// ---- Casts (codec_common.h's saturate / encodeHalf / encodeBf) ---------------------

TIDE_DEV float saturate(float f, uint32_t maxBits) {
  const uint32_t x = floatBits(f);
  const uint32_t ax = x & kAbsMask;
  const bool sat = ax > maxBits && ax < kInfBits;
  return bitsFloat(sat ? (x & ~kAbsMask) | maxBits : x);
}

template <int kC>
TIDE_DEV uint16_t encode16(float f) {
  if constexpr (kC == 0) {
    return floatToHalf(saturate(f, kHalfMaxBits));
  } else {
    return floatToBf16(saturate(f, kBf16MaxBits));
  }
}

template <int kC>
TIDE_DEV float decode16(uint16_t h) {
  if constexpr (kC == 0) {
    return halfToFloat(h);
  } else {
    return bf16ToFloat(h);
  }
}

// ---- The counter-based generator (codec_common.h's mix64 / mix32 / drawWithKey) ----

TIDE_DEV uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

TIDE_DEV uint32_t mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

struct RngKey {
  uint32_t lo;
  uint32_t hi;
};

TIDE_DEV RngKey rngKey(uint64_t seed) {
  const uint64_t k = mix64(seed);
  return {static_cast<uint32_t>(k), static_cast<uint32_t>(k >> 32)};
}

TIDE_DEV uint32_t drawWithKey(RngKey key, uint64_t pos) {
  const uint32_t h = mix32(static_cast<uint32_t>(pos) ^ key.lo);
  return mix32(h ^ (key.hi + static_cast<uint32_t>(pos >> 32) * 0x9e3779b9u));
}

// u in [0, 1): the upper 24 bits of a draw times 2^-24 (exact).
TIDE_DEV float uniform24(uint32_t bits) {
  return __fmul_rn(__int2float_rn(static_cast<int32_t>(bits >> 8)), 0x1p-24f);
}

// ---- Block quantization (codec_common.h's blockParams / quant* / residualOf) ------

enum BlockKind : int { kZero, kNormal, kInf, kNaN };

struct BlockParams {
  int kind;
  float scale;  // stored on the wire
  float inv;    // qmax / amax (kNormal only)
};

TIDE_DEV BlockParams blockParams(uint32_t amaxBits, int qmax) {
  if (amaxBits > kInfBits) return {kNaN, bitsFloat(kQuietNaN), 0.0f};
  if (amaxBits == kInfBits) return {kInf, bitsFloat(kInfBits), 0.0f};
  if (amaxBits < kTinyBits) return {kZero, 0.0f, 0.0f};
  const float amax = bitsFloat(amaxBits);
  const float q = __int2float_rn(qmax);
  return {kNormal, __fdiv_rn(amax, q), __fdiv_rn(q, amax)};
}

TIDE_DEV int32_t clampCode(int32_t q, int qmax) {
  return q < -qmax ? -qmax : (q > qmax ? qmax : q);
}

// Round to nearest even: (t + 1.5 * 2^23) - 1.5 * 2^23, |t| <= qmax (+ an ulp).
TIDE_DEV int32_t quantNearest(float v, float inv, int qmax) {
  const float t = __fmul_rn(v, inv);
  const float r = __fsub_rn(__fadd_rn(t, kRound), kRound);
  return clampCode(__float2int_rz(r), qmax);
}

// sign(t) (floor(|t|) + (u < |t| - floor(|t|))).
TIDE_DEV int32_t quantStochastic(float v, float inv, int qmax, float u) {
  const float t = __fmul_rn(v, inv);
  const float a = bitsFloat(floatBits(t) & kAbsMask);
  const float r = __fsub_rn(__fadd_rn(a, kRound), kRound);
  const float f = __fsub_rn(r, r > a ? 1.0f : 0.0f);                // floor(a)
  const float m = __fadd_rn(f, u < __fsub_rn(a, f) ? 1.0f : 0.0f);  // f or f + 1
  const float s = bitsFloat(floatBits(m) | (floatBits(t) & ~kAbsMask));
  return clampCode(__float2int_rz(s), qmax);
}

TIDE_DEV int32_t quantSpecial(float v, int kind, int qmax) {
  if (kind != kInf) return 0;
  const uint32_t x = floatBits(v);
  if ((x & kAbsMask) != kInfBits) return 0;
  return (x >> 31) != 0 ? -qmax : qmax;
}

struct Rounding {
  bool stochastic;
  RngKey key;
  uint64_t counter;
};

// The code of element i (value v) of a block with parameters p.
TIDE_DEV int32_t quantOne(float v, const BlockParams& p, int qmax, const Rounding& r, uint64_t i) {
  if (p.kind != kNormal) return quantSpecial(v, p.kind, qmax);
  if (!r.stochastic) return quantNearest(v, p.inv, qmax);
  return quantStochastic(v, p.inv, qmax, uniform24(drawWithKey(r.key, r.counter + i)));
}

// v - q s; 0 in a non-finite block.
TIDE_DEV float residualOf(float v, int32_t q, const BlockParams& p) {
  if (p.kind == kInf || p.kind == kNaN) return 0.0f;
  return __fsub_rn(v, __fmul_rn(__int2float_rn(q), p.scale));
}

// ---- Wire access -----------------------------------------------------------------

// Scale slot b (4 bytes at wire + 4 b), little-endian, any alignment.
TIDE_DEV uint32_t loadSlot(const uint8_t* wire, uint64_t b) {
  const uint8_t* p = wire + 4 * b;
  if ((reinterpret_cast<uintptr_t>(p) & 3u) == 0) return *reinterpret_cast<const uint32_t*>(p);
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

TIDE_DEV void storeSlot(uint8_t* wire, uint64_t b, uint32_t w) {
  uint8_t* p = wire + 4 * b;
  if ((reinterpret_cast<uintptr_t>(p) & 3u) == 0) {
    *reinterpret_cast<uint32_t*>(p) = w;
    return;
  }
  p[0] = static_cast<uint8_t>(w);
  p[1] = static_cast<uint8_t>(w >> 8);
  p[2] = static_cast<uint8_t>(w >> 16);
  p[3] = static_cast<uint8_t>(w >> 24);
}

TIDE_DEV uint64_t blockCount(uint64_t n, uint64_t block) { return (n + block - 1) / block; }

// Element i of v = x + residual (one fp32 addition), or of x.
TIDE_DEV float valueAt(const float* x, const float* residual, uint64_t i) {
  return residual != nullptr ? __fadd_rn(x[i], residual[i]) : x[i];
}

template <int kBits>
constexpr int kQmax = kBits == 8 ? 127 : 7;

// ---- Kernel bodies ---------------------------------------------------------------

template <int kC>
TIDE_DEV void encode16Body(const float* x, float* residual, uint16_t* out, uint64_t n) {
  for (uint64_t i = globalThread(); i < n; i += gridThreads()) {
    if (residual == nullptr) {
      out[i] = encode16<kC>(x[i]);
      continue;
    }
    const float v = __fadd_rn(x[i], residual[i]);
    const uint16_t h = encode16<kC>(v);
    out[i] = h;
    residual[i] = absBits(v) < kInfBits ? __fsub_rn(v, decode16<kC>(h)) : 0.0f;
  }
}

template <int kC>
TIDE_DEV void decode16Body(const uint16_t* in, float* y, uint64_t n, int acc) {
  for (uint64_t i = globalThread(); i < n; i += gridThreads()) {
    const float d = decode16<kC>(in[i]);
    y[i] = acc != 0 ? __fadd_rn(y[i], d) : d;
  }
}

// One thread per block (small blocks): slot b = max |v| of block b.
TIDE_DEV void amaxThreadBody(const float* x, const float* residual, uint8_t* wire, uint64_t n,
                             uint64_t block) {
  const uint64_t nb = blockCount(n, block);
  for (uint64_t b = globalThread(); b < nb; b += gridThreads()) {
    const uint64_t lo = b * block;
    const uint64_t hi = lo + block < n ? lo + block : n;
    uint32_t m = 0;
    for (uint64_t i = lo; i < hi; ++i) m = max(m, absBits(valueAt(x, residual, i)));
    storeSlot(wire, b, m);
  }
}

// One CTA per block: its threads stride over the block, then reduce (warp
// shuffles, then one word per warp in shared memory).
TIDE_DEV void amaxCtaBody(const float* x, const float* residual, uint8_t* wire, uint64_t n,
                          uint64_t block) {
  __shared__ uint32_t warpMax[8];
  const uint64_t nb = blockCount(n, block);
  const unsigned warps = blockDim.x / 32;
  for (uint64_t b = blockIdx.x; b < nb; b += gridDim.x) {
    const uint64_t lo = b * block;
    const uint64_t hi = lo + block < n ? lo + block : n;
    uint32_t m = 0;
    for (uint64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
      m = max(m, absBits(valueAt(x, residual, i)));
    }
    m = __reduce_max_sync(0xffffffffu, m);
    if ((threadIdx.x & 31u) == 0) warpMax[threadIdx.x / 32] = m;
    __syncthreads();
    if (threadIdx.x == 0) {
      for (unsigned w = 1; w < warps; ++w) m = max(m, warpMax[w]);
      storeSlot(wire, b, m);
    }
    __syncthreads();  // warpMax is reused by the next block
  }
}

// The code of element i from its block's slot (largest magnitude); with a
// residual, also the residual's new value.
template <int kBits>
TIDE_DEV int32_t codeOf(const float* x, float* residual, const uint8_t* wire, uint64_t i,
                        uint64_t block, const Rounding& r) {
  constexpr int kQ = kQmax<kBits>;
  const BlockParams p = blockParams(loadSlot(wire, blockOf(i, block)), kQ);
  const float v = valueAt(x, residual, i);
  const int32_t q = quantOne(v, p, kQ, r, i);
  if (residual != nullptr) residual[i] = residualOf(v, q, p);
  return q;
}

template <int kBits>
TIDE_DEV void codesBody(const float* x, float* residual, uint8_t* wire, uint64_t n, uint64_t block,
                        int stochastic, uint64_t seed, uint64_t counter) {
  const Rounding r = {stochastic != 0, rngKey(seed), counter};
  uint8_t* codes = wire + 4 * blockCount(n, block);
  if constexpr (kBits == 8) {
    for (uint64_t i = globalThread(); i < n; i += gridThreads()) {
      codes[i] =
          static_cast<uint8_t>(static_cast<int8_t>(codeOf<8>(x, residual, wire, i, block, r)));
    }
  } else {
    // Byte j: element 2j in the low nibble, 2j + 1 (if any) in the high one.
    const uint64_t bytes = (n + 1) / 2;
    for (uint64_t j = globalThread(); j < bytes; j += gridThreads()) {
      const uint64_t i = 2 * j;
      const uint32_t lo = static_cast<uint32_t>(codeOf<4>(x, residual, wire, i, block, r)) & 0xfu;
      uint32_t hi = 0;
      if (i + 1 < n)
        hi = static_cast<uint32_t>(codeOf<4>(x, residual, wire, i + 1, block, r)) & 0xfu;
      codes[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

template <int kBits>
TIDE_DEV void scalesBody(uint8_t* wire, uint64_t nb) {
  for (uint64_t b = globalThread(); b < nb; b += gridThreads()) {
    storeSlot(wire, b, floatBits(blockParams(loadSlot(wire, b), kQmax<kBits>).scale));
  }
}

template <int kBits>
TIDE_DEV int32_t codeAt(const uint8_t* codes, uint64_t i) {
  if constexpr (kBits == 8) {
    return static_cast<int8_t>(codes[i]);
  } else {
    const uint32_t byte = codes[i >> 1];
    const uint32_t nib = (i & 1) == 0 ? (byte & 0xfu) : (byte >> 4);
    return static_cast<int32_t>(nib ^ 8u) - 8;  // sign-extend 4 bits
  }
}

template <int kBits>
TIDE_DEV void dequantBody(const uint8_t* wire, float* y, uint64_t n, uint64_t block, int acc) {
  const uint8_t* codes = wire + 4 * blockCount(n, block);
  for (uint64_t i = globalThread(); i < n; i += gridThreads()) {
    const float s = bitsFloat(loadSlot(wire, blockOf(i, block)));
    const float d = __fmul_rn(__int2float_rn(codeAt<kBits>(codes, i)), s);
    y[i] = acc != 0 ? __fadd_rn(y[i], d) : d;
  }
}

}  // namespace

#define TIDE_CC_KERNEL extern "C" __global__ void __launch_bounds__(256)

#define TIDE_CC_CAST_KERNELS(C)                                                             \
  TIDE_CC_KERNEL tide_cc_enc16_##C(const float* x, float* residual, uint16_t* out, u64 n) { \
    encode16Body<C>(x, residual, out, n);                                                   \
  }                                                                                         \
  TIDE_CC_KERNEL tide_cc_dec16_##C(const uint16_t* in, float* y, u64 n, int acc) {          \
    decode16Body<C>(in, y, n, acc);                                                         \
  }
TIDE_CC_CAST_KERNELS(0)
TIDE_CC_CAST_KERNELS(1)

TIDE_CC_KERNEL tide_cc_amax_thread(const float* x, const float* residual, uint8_t* wire, u64 n,
                                   u64 block) {
  amaxThreadBody(x, residual, wire, n, block);
}
TIDE_CC_KERNEL tide_cc_amax_cta(const float* x, const float* residual, uint8_t* wire, u64 n,
                                u64 block) {
  amaxCtaBody(x, residual, wire, n, block);
}

#define TIDE_CC_QUANT_KERNELS(K)                                                            \
  TIDE_CC_KERNEL tide_cc_codes##K(const float* x, float* residual, uint8_t* wire, u64 n,    \
                                  u64 block, int stochastic, u64 seed, u64 counter) {       \
    codesBody<K>(x, residual, wire, n, block, stochastic, seed, counter);                   \
  }                                                                                         \
  TIDE_CC_KERNEL tide_cc_scales##K(uint8_t* wire, u64 nb) { scalesBody<K>(wire, nb); }      \
  TIDE_CC_KERNEL tide_cc_deq##K(const uint8_t* wire, float* y, u64 n, u64 block, int acc) { \
    dequantBody<K>(wire, y, n, block, acc);                                                 \
  }
TIDE_CC_QUANT_KERNELS(8)
TIDE_CC_QUANT_KERNELS(4)

TIDE_CC_KERNEL tide_cc_draw(u64 seed, u64 counter, uint32_t* out, u64 n) {
  const RngKey key = rngKey(seed);
  for (uint64_t i = globalThread(); i < n; i += gridThreads())
    out[i] = drawWithKey(key, counter + i);
}
