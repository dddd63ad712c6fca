// Element codecs and reduction operators shared by the device kernels
// (cuda_kernels.cu, device_coll.cu). nvcc only.
//
// Numerics are those of core/kernels.h and bit-identical to the host table:
// 16- and 8-bit floats are widened to fp32, combined and rounded back to
// nearest-even (fp8 saturating); integers wrap; Max/Min let a NaN win and
// return the second operand on ties.
#pragma once

#include <cstddef>
#include <cstdint>

namespace {

#define TIDE_DEV __device__ __forceinline__

// ---- Narrow float codecs (same rounding contract as the host's) ---------------

TIDE_DEV float bitsFloat(uint32_t u) { return __uint_as_float(u); }
TIDE_DEV uint32_t floatBits(float f) { return __float_as_uint(f); }

TIDE_DEV float halfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t mag = h & 0x7fffu;
  uint32_t bits = (mag << 13) + (112u << 23);
  if (mag >= 0x7c00u) bits += 112u << 23;  // inf / NaN exponent
  if (mag > 0x7c00u) bits |= 0x00400000u;  // NaN comes out quiet
  if (mag < 0x0400u) bits = floatBits(static_cast<float>(static_cast<int32_t>(mag)) * 0x1p-24f);
  return bitsFloat(sign | bits);
}

TIDE_DEV uint16_t floatToHalf(float f) {
  const uint32_t x = floatBits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7fffffffu;
  uint32_t h = (ax - (112u << 23) + 0x0fffu + ((ax >> 13) & 1u)) >> 13;
  if (ax < 0x38800000u) h = floatBits(__fadd_rn(bitsFloat(ax), 0.5f)) - 0x3f000000u;
  if (ax >= 0x477ff000u) h = 0x7c00u;
  if (ax > 0x7f800000u) h = 0x7e00u | ((ax >> 13) & 0x3ffu);
  return static_cast<uint16_t>(sign | h);
}

TIDE_DEV float bf16ToFloat(uint16_t b) { return bitsFloat(static_cast<uint32_t>(b) << 16); }

TIDE_DEV uint16_t floatToBf16(float f) {
  const uint32_t x = floatBits(f);
  uint32_t r = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  if ((x & 0x7fffffffu) > 0x7f800000u) r = (x >> 16) | 0x0040u;
  return static_cast<uint16_t>(r);
}

TIDE_DEV float e4m3ToFloat(uint8_t v) {
  const uint32_t sign = static_cast<uint32_t>(v & 0x80u) << 24;
  const uint32_t mag = v & 0x7fu;
  uint32_t bits = (mag << 20) + (120u << 23);
  if (mag < 8u) bits = floatBits(static_cast<float>(static_cast<int32_t>(mag)) * 0x1p-9f);
  if (mag == 0x7fu) bits = 0x7fc00000u;
  return bitsFloat(sign | bits);
}

TIDE_DEV uint8_t floatToE4m3(float f) {
  const uint32_t x = floatBits(f);
  const uint32_t sign = (x >> 24) & 0x80u;
  const uint32_t ax = x & 0x7fffffffu;
  uint32_t r = (ax - (120u << 23) + 0x7ffffu + ((ax >> 20) & 1u)) >> 20;
  if (ax < 0x3c800000u) r = floatBits(__fadd_rn(bitsFloat(ax), 16384.0f)) - 0x46800000u;
  if (r > 0x7eu) r = 0x7eu;  // saturate; 0x7f is NaN
  if (ax > 0x7f800000u) r = 0x7fu;
  return static_cast<uint8_t>(sign | r);
}

TIDE_DEV float e5m2ToFloat(uint8_t v) {
  return halfToFloat(static_cast<uint16_t>(static_cast<uint16_t>(v) << 8));
}

TIDE_DEV uint8_t floatToE5m2(float f) {
  const uint32_t x = floatBits(f);
  const uint32_t sign = (x >> 24) & 0x80u;
  const uint32_t ax = x & 0x7fffffffu;
  uint32_t r = (ax - (112u << 23) + 0xfffffu + ((ax >> 21) & 1u)) >> 21;
  if (ax < 0x38800000u) r = floatBits(__fadd_rn(bitsFloat(ax), 128.0f)) - 0x43000000u;
  if (r > 0x7bu) r = 0x7bu;  // finite overflow saturates
  if (ax == 0x7f800000u) r = 0x7cu;
  if (ax > 0x7f800000u) r = 0x7eu;
  return static_cast<uint8_t>(sign | r);
}

// ---- Codecs: storage type <-> compute type --------------------------------------

template <class T>
struct Plain {
  using Store = T;
  using Comp = T;
  static TIDE_DEV Comp load(Store v) { return v; }
  static TIDE_DEV Store store(Comp c) { return c; }
};
struct Half {
  using Store = uint16_t;
  using Comp = float;
  static TIDE_DEV Comp load(Store v) { return halfToFloat(v); }
  static TIDE_DEV Store store(Comp c) { return floatToHalf(c); }
};
struct Bf16 {
  using Store = uint16_t;
  using Comp = float;
  static TIDE_DEV Comp load(Store v) { return bf16ToFloat(v); }
  static TIDE_DEV Store store(Comp c) { return floatToBf16(c); }
};
struct E4m3 {
  using Store = uint8_t;
  using Comp = float;
  static TIDE_DEV Comp load(Store v) { return e4m3ToFloat(v); }
  static TIDE_DEV Store store(Comp c) { return floatToE4m3(c); }
};
struct E5m2 {
  using Store = uint8_t;
  using Comp = float;
  static TIDE_DEV Comp load(Store v) { return e5m2ToFloat(v); }
  static TIDE_DEV Store store(Comp c) { return floatToE5m2(c); }
};

// ---- Operators ---------------------------------------------------------------------

template <class C>
struct UnsignedOf {
  using T = C;
};
template <>
struct UnsignedOf<int8_t> {
  using T = uint8_t;
};
template <>
struct UnsignedOf<int32_t> {
  using T = uint32_t;
};
template <>
struct UnsignedOf<int64_t> {
  using T = uint64_t;
};

template <class C>
TIDE_DEV constexpr bool isIntegral() {
  return static_cast<C>(1) / 2 == 0;
}

struct OpSum {
  static constexpr bool kSelect = false;
  template <class C>
  static TIDE_DEV C apply(C x, C y) {
    if constexpr (isIntegral<C>()) {
      using U = typename UnsignedOf<C>::T;
      return static_cast<C>(static_cast<U>(static_cast<U>(x) + static_cast<U>(y)));
    } else {
      return x + y;
    }
  }
};
struct OpProd {
  static constexpr bool kSelect = false;
  template <class C>
  static TIDE_DEV C apply(C x, C y) {
    if constexpr (isIntegral<C>()) {
      using U = typename UnsignedOf<C>::T;
      return static_cast<C>(static_cast<U>(static_cast<U>(x) * static_cast<U>(y)));
    } else {
      return x * y;
    }
  }
};
struct OpMax {
  static constexpr bool kSelect = true;
  template <class C>
  static TIDE_DEV bool pick(C x, C y) {
    return (x > y) | (x != x);
  }
};
struct OpMin {
  static constexpr bool kSelect = true;
  template <class C>
  static TIDE_DEV bool pick(C x, C y) {
    return (x < y) | (x != x);
  }
};

template <class Codec, class Op>
TIDE_DEV typename Codec::Store combine(typename Codec::Store a, typename Codec::Store b) {
  if constexpr (Op::kSelect) {
    return Op::pick(Codec::load(a), Codec::load(b)) ? a : b;
  } else {
    return Codec::store(Op::apply(Codec::load(a), Codec::load(b)));
  }
}

// 16 bytes of elements.
template <class S>
union Vec {
  uint4 v;
  S s[16 / sizeof(S)];
};

TIDE_DEV bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace
