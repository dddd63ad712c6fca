// Internals shared by the scalar and AVX2 codec kernels: the element formulas
// of codec_kernels.h written once, so that both variants (and the AVX2
// variant's scalar tails) compute the same bits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "algorithms/compression/codec_kernels.h"
#include "algorithms/kernels/float_conv.h"

#define TIDE_CODEC_INLINE inline __attribute__((always_inline))

namespace tide::codec::detail {

using fp::bitsFloat;
using fp::floatBits;
using fp::select;

constexpr uint32_t kAbsMask = 0x7fffffffu;
constexpr uint32_t kInfBits = 0x7f800000u;
constexpr uint32_t kHalfMaxBits = 0x477fe000u;  // 65504, the largest finite fp16
constexpr uint32_t kBf16MaxBits = 0x7f7f0000u;  // the largest finite bf16
// Blocks whose largest magnitude is below this (2^-112) encode as zeros.
constexpr uint32_t kTinyBits = 0x07800000u;
// 1.5 * 2^23: (t + kRound) - kRound rounds |t| < 2^22 to an integer, ties to even.
constexpr float kRound = 12582912.0f;

// ---- Casts ---------------------------------------------------------------------

// Finite magnitudes above `maxBits` become +-maxBits; Inf and NaN unchanged.
TIDE_CODEC_INLINE float saturate(float f, uint32_t maxBits) {
  const uint32_t x = floatBits(f);
  const uint32_t ax = x & kAbsMask;
  const bool sat = (ax > maxBits) & (ax < kInfBits);
  return bitsFloat(select(sat, (x & ~kAbsMask) | maxBits, x));
}

TIDE_CODEC_INLINE uint16_t encodeHalf(float f) {
  return fp::floatToHalf(saturate(f, kHalfMaxBits));
}
TIDE_CODEC_INLINE uint16_t encodeBf(float f) { return fp::floatToBf16(saturate(f, kBf16MaxBits)); }

// ---- Stochastic rounding: the counter-based generator ---------------------------

// splitmix64's finalizer (with its increment): the key of a seed.
TIDE_CODEC_INLINE uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// A 32-bit avalanche mix (xorshift-multiply, a bijection of uint32).
TIDE_CODEC_INLINE uint32_t mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

constexpr uint32_t kGolden32 = 0x9e3779b9u;

struct RngKey {
  uint32_t lo;
  uint32_t hi;
};

TIDE_CODEC_INLINE RngKey rngKey(uint64_t seed) {
  const uint64_t k = mix64(seed);
  return {static_cast<uint32_t>(k), static_cast<uint32_t>(k >> 32)};
}

// drawBits(seed, pos) with the key of the seed: two mixing rounds, the low
// half of pos in the first, the high half in the second.
TIDE_CODEC_INLINE uint32_t drawWithKey(RngKey key, uint64_t pos) {
  const uint32_t h = mix32(static_cast<uint32_t>(pos) ^ key.lo);
  return mix32(h ^ (key.hi + static_cast<uint32_t>(pos >> 32) * kGolden32));
}

// u in [0, 1): the upper 24 bits of a draw, exact in fp32.
TIDE_CODEC_INLINE float uniform24(uint32_t bits) {
  return static_cast<float>(static_cast<int32_t>(bits >> 8)) * 0x1p-24f;
}

// ---- Block quantization ----------------------------------------------------------

enum class BlockKind : uint8_t { kZero, kNormal, kInf, kNaN };

struct BlockParams {
  BlockKind kind;
  float scale;  // stored on the wire
  float inv;    // qmax / amax (kNormal only)
};

// From the largest magnitude of the block, as fp32 bits.
TIDE_CODEC_INLINE BlockParams blockParams(uint32_t amaxBits, int qmax) {
  if (amaxBits > kInfBits) return {BlockKind::kNaN, bitsFloat(0x7fc00000u), 0.0f};
  if (amaxBits == kInfBits) return {BlockKind::kInf, bitsFloat(kInfBits), 0.0f};
  if (amaxBits < kTinyBits) return {BlockKind::kZero, 0.0f, 0.0f};
  const float amax = bitsFloat(amaxBits);
  const float q = static_cast<float>(qmax);
  return {BlockKind::kNormal, amax / q, q / amax};
}

TIDE_CODEC_INLINE int32_t clampCode(int32_t q, int qmax) {
  return q < -qmax ? -qmax : (q > qmax ? qmax : q);
}

// The code of v in a kNormal block, round to nearest even.
TIDE_CODEC_INLINE int32_t quantNearest(float v, float inv, int qmax) {
  const float t = v * inv;
  const float r = (t + kRound) - kRound;
  return clampCode(static_cast<int32_t>(r), qmax);
}

// The code of v in a kNormal block, stochastic with uniform u in [0, 1).
TIDE_CODEC_INLINE int32_t quantStochastic(float v, float inv, int qmax, float u) {
  const float t = v * inv;
  const float a = bitsFloat(floatBits(t) & kAbsMask);
  const float r = (a + kRound) - kRound;
  const float f = r - (r > a ? 1.0f : 0.0f);  // floor(a)
  const float m = f + (u < a - f ? 1.0f : 0.0f);
  const float s = bitsFloat(floatBits(m) | (floatBits(t) & ~kAbsMask));
  return clampCode(static_cast<int32_t>(s), qmax);
}

// The code of v in a kInf or kNaN block (kZero: 0).
TIDE_CODEC_INLINE int32_t quantSpecial(float v, BlockKind kind, int qmax) {
  if (kind != BlockKind::kInf) return 0;
  const uint32_t x = floatBits(v);
  if ((x & kAbsMask) != kInfBits) return 0;
  return (x >> 31) != 0 ? -qmax : qmax;
}

// One element of a block: its code (and, with a residual, the new residual).
TIDE_CODEC_INLINE int32_t quantOne(float v, const BlockParams& p, int qmax, const Rounding& r,
                                   RngKey key, uint64_t pos) {
  if (p.kind != BlockKind::kNormal) return quantSpecial(v, p.kind, qmax);
  if (!r.stochastic) return quantNearest(v, p.inv, qmax);
  return quantStochastic(v, p.inv, qmax, uniform24(drawWithKey(key, pos)));
}

// The residual after sending code q of v: v - q s; 0 in a non-finite block.
TIDE_CODEC_INLINE float residualOf(float v, int32_t q, const BlockParams& p) {
  if (p.kind == BlockKind::kInf || p.kind == BlockKind::kNaN) return 0.0f;
  return v - static_cast<float>(q) * p.scale;
}

// ---- Wire access -------------------------------------------------------------------

TIDE_CODEC_INLINE size_t blockCount(size_t n, size_t block) { return (n + block - 1) / block; }

TIDE_CODEC_INLINE void storeScale(uint8_t* wire, size_t b, float s) {
  std::memcpy(wire + b * sizeof(float), &s, sizeof(float));
}

TIDE_CODEC_INLINE float loadScale(const uint8_t* wire, size_t b) {
  float s;
  std::memcpy(&s, wire + b * sizeof(float), sizeof(float));
  return s;
}

// int4: element i's nibble. Elements are written in increasing order, so the
// even element of a pair clears the high nibble that the odd one then sets.
TIDE_CODEC_INLINE void putNibble(uint8_t* codes, size_t i, int32_t q) {
  const auto nib = static_cast<uint8_t>(static_cast<uint32_t>(q) & 0xfu);
  if ((i & 1) == 0) {
    codes[i >> 1] = nib;
  } else {
    codes[i >> 1] = static_cast<uint8_t>(codes[i >> 1] | (nib << 4));
  }
}

TIDE_CODEC_INLINE int32_t getNibble(const uint8_t* codes, size_t i) {
  const uint32_t byte = codes[i >> 1];
  const uint32_t nib = (i & 1) == 0 ? (byte & 0xfu) : (byte >> 4);
  return static_cast<int32_t>(nib ^ 8u) - 8;  // sign-extend 4 bits
}

template <int kBits>
TIDE_CODEC_INLINE void putCode(uint8_t* codes, size_t i, int32_t q) {
  if constexpr (kBits == 8) {
    codes[i] = static_cast<uint8_t>(static_cast<int8_t>(q));
  } else {
    putNibble(codes, i, q);
  }
}

template <int kBits>
TIDE_CODEC_INLINE int32_t getCode(const uint8_t* codes, size_t i) {
  if constexpr (kBits == 8) {
    return static_cast<int8_t>(codes[i]);
  } else {
    return getNibble(codes, i);
  }
}

template <int kBits>
constexpr int kQmax = kBits == 8 ? 127 : 7;

// ---- Top-k --------------------------------------------------------------------------

TIDE_CODEC_INLINE uint32_t absBits(float f) { return floatBits(f) & kAbsMask; }

// Larger key: earlier in the top-k order (larger magnitude, then lower index).
TIDE_CODEC_INLINE uint64_t topkKey(uint32_t absbits, uint32_t index) {
  return (static_cast<uint64_t>(absbits) << 32) | (0xffffffffu - index);
}

// ---- One instruction-set variant ------------------------------------------------------

struct Table {
  void (*encodeFp16)(const float* x, uint16_t* out, size_t n);
  void (*decodeFp16)(const uint16_t* in, float* y, size_t n, bool acc);
  void (*encodeBf16)(const float* x, uint16_t* out, size_t n);
  void (*decodeBf16)(const uint16_t* in, float* y, size_t n, bool acc);
  // kBits 8 or 4, `block` valid, n > 0. With a residual: the fused feedback.
  void (*quantize8)(const float* x, float* residual, size_t n, size_t block, const Rounding& r,
                    uint8_t* wire);
  void (*quantize4)(const float* x, float* residual, size_t n, size_t block, const Rounding& r,
                    uint8_t* wire);
  void (*dequantize8)(const uint8_t* wire, size_t n, size_t block, float* y, bool acc);
  void (*dequantize4)(const uint8_t* wire, size_t n, size_t block, float* y, bool acc);
  // Writes the indices i < n with absBits(x[i]) >= t, in increasing order, to
  // out[0..cap); returns how many there are (all of them, even beyond cap).
  size_t (*scanAtLeast)(const float* x, size_t n, uint32_t t, uint32_t* out, size_t cap);
};

const Table& scalarTable();
// Null where the AVX2 variant is not built (not x86-64).
const Table* avx2Table();
// The table of `impl`, or the scalar one where this CPU cannot run it.
const Table& tableFor(Impl impl);

}  // namespace tide::codec::detail
