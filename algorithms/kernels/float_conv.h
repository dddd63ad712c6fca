// Conversions between fp32 and the narrow floating formats Tide reduces:
// IEEE binary16 (fp16), bfloat16, and the OCP 8-bit formats E4M3 (FN variant)
// and E5M2.
//
// Contracts (all functions are pure, thread-safe, and branch-free so that
// loops calling them vectorise):
//  * xxxToFloat is exact (every narrow value is representable in fp32).
//    fp16/fp8 decoders return a quiet NaN for a NaN input (the sign and the
//    upper payload bits are kept, like the x86 F16C instructions do); the
//    bf16 decoder is a plain shift.
//  * floatToXxx rounds to nearest, ties to even, independent of the FPU
//    rounding mode, and gives a quiet NaN for a NaN input.
//  * Overflow: fp16 and bf16 overflow to +-inf (IEEE). E4M3 has no infinity:
//    every magnitude above 448, infinity included, saturates to +-448.
//    E5M2 has an infinity: a finite value above 57344 saturates to +-57344
//    (the reductions never invent an infinity from finite operands), while an
//    infinite input stays infinite.
#pragma once

#include <bit>
#include <cstdint>

// Always inlined: the reduction loops only vectorise with the bodies inlined.
#define TIDE_FP_INLINE inline __attribute__((always_inline))

namespace tide::fp {

// c ? x : y, written with masks. With conditional expressions GCC sinks the
// fp32 arithmetic that feeds one side into a branch, then refuses to
// if-convert it (fp operations may trap), and the loop does not vectorise.
TIDE_FP_INLINE uint32_t select(bool c, uint32_t x, uint32_t y) {
  const uint32_t m = 0u - static_cast<uint32_t>(c);
  return (x & m) | (y & ~m);
}

TIDE_FP_INLINE uint32_t floatBits(float f) { return std::bit_cast<uint32_t>(f); }
TIDE_FP_INLINE float bitsFloat(uint32_t u) { return std::bit_cast<float>(u); }

// ---- fp16: 1 sign, 5 exponent (bias 15), 10 mantissa bits ------------------

TIDE_FP_INLINE float halfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t mag = h & 0x7fffu;
  // Normal numbers: move the fields into place and rebias 15 -> 127.
  uint32_t bits = (mag << 13) + (112u << 23);
  // Infinity and NaN need the all-ones exponent; NaNs come out quiet.
  bits = select(mag >= 0x7c00u, bits + (112u << 23), bits);
  bits = select(mag > 0x7c00u, bits | 0x00400000u, bits);
  // Zero and subnormals: mag * 2^-24, exact in fp32.
  const float sub = static_cast<float>(static_cast<int32_t>(mag)) * 0x1p-24f;
  bits = select(mag < 0x0400u, floatBits(sub), bits);
  return bitsFloat(sign | bits);
}

TIDE_FP_INLINE uint16_t floatToHalf(float f) {
  const uint32_t x = floatBits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7fffffffu;
  // Normal range: rebias 127 -> 15 and round the mantissa to 10 bits
  // (adding 0x0fff plus the lowest kept bit rounds half to even). The
  // subtraction wraps for small inputs; those lanes are replaced below.
  uint32_t h = (ax - (112u << 23) + 0x0fffu + ((ax >> 13) & 1u)) >> 13;
  // Below 2^-14 the result is a multiple of 2^-24: adding 0.5 (whose ulp is
  // 2^-24) lets the FPU round, and the low bits of the sum are the mantissa.
  const uint32_t sub = floatBits(bitsFloat(ax) + 0.5f) - 0x3f000000u;
  h = select(ax < 0x38800000u, sub, h);
  // At or above 65520 (halfway from 65504, odd, to 65536) the result is inf.
  h = select(ax >= 0x477ff000u, 0x7c00u, h);
  h = select(ax > 0x7f800000u, 0x7e00u | ((ax >> 13) & 0x3ffu), h);
  return static_cast<uint16_t>(sign | h);
}

// ---- bfloat16: the upper half of an fp32 ------------------------------------

TIDE_FP_INLINE float bf16ToFloat(uint16_t b) { return bitsFloat(static_cast<uint32_t>(b) << 16); }

TIDE_FP_INLINE uint16_t floatToBf16(float f) {
  const uint32_t x = floatBits(f);
  // Rounds half to even; a carry out of the mantissa bumps the exponent,
  // which turns the largest values into infinity as IEEE requires.
  uint32_t r = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  r = select((x & 0x7fffffffu) > 0x7f800000u, (x >> 16) | 0x0040u, r);
  return static_cast<uint16_t>(r);
}

// ---- fp8 E4M3 (FN): 1 sign, 4 exponent (bias 7), 3 mantissa ----------------
// No infinities; S.1111.111 is NaN; the largest finite value is 448.

TIDE_FP_INLINE float fp8e4m3ToFloat(uint8_t v) {
  const uint32_t sign = static_cast<uint32_t>(v & 0x80u) << 24;
  const uint32_t mag = v & 0x7fu;
  uint32_t bits = (mag << 20) + (120u << 23);
  const float sub = static_cast<float>(static_cast<int32_t>(mag)) * 0x1p-9f;
  bits = select(mag < 8u, floatBits(sub), bits);
  bits = select(mag == 0x7fu, 0x7fc00000u, bits);
  return bitsFloat(sign | bits);
}

TIDE_FP_INLINE uint8_t floatToFp8e4m3(float f) {
  const uint32_t x = floatBits(f);
  const uint32_t sign = (x >> 24) & 0x80u;
  const uint32_t ax = x & 0x7fffffffu;
  uint32_t r = (ax - (120u << 23) + 0x7ffffu + ((ax >> 20) & 1u)) >> 20;
  // Below 2^-6: multiples of 2^-9, rounded by adding 2^14 (ulp 2^-9).
  const uint32_t sub = floatBits(bitsFloat(ax) + 16384.0f) - 0x46800000u;
  r = select(ax < 0x3c800000u, sub, r);
  r = select(r > 0x7eu, 0x7eu, r);  // saturate (0x7f would be NaN)
  r = select(ax > 0x7f800000u, 0x7fu, r);
  return static_cast<uint8_t>(sign | r);
}

// ---- fp8 E5M2: 1 sign, 5 exponent (bias 15), 2 mantissa: the upper byte of
// an fp16. Infinity 0x7c, NaN 0x7d..0x7f, largest finite value 57344. -------

TIDE_FP_INLINE float fp8e5m2ToFloat(uint8_t v) {
  return halfToFloat(static_cast<uint16_t>(static_cast<uint16_t>(v) << 8));
}

TIDE_FP_INLINE uint8_t floatToFp8e5m2(float f) {
  const uint32_t x = floatBits(f);
  const uint32_t sign = (x >> 24) & 0x80u;
  const uint32_t ax = x & 0x7fffffffu;
  uint32_t r = (ax - (112u << 23) + 0xfffffu + ((ax >> 21) & 1u)) >> 21;
  // Below 2^-14: multiples of 2^-16, rounded by adding 128 (ulp 2^-16).
  const uint32_t sub = floatBits(bitsFloat(ax) + 128.0f) - 0x43000000u;
  r = select(ax < 0x38800000u, sub, r);
  r = select(r > 0x7bu, 0x7bu, r);  // finite overflow saturates
  r = select(ax == 0x7f800000u, 0x7cu, r);
  r = select(ax > 0x7f800000u, 0x7eu, r);
  return static_cast<uint8_t>(sign | r);
}

}  // namespace tide::fp
