// Element helpers of the NCCL shim: dtype sizes, reading a PreMulSum scalar,
// and the host-side premultiply used by ncclRedOpCreatePreMulSum ops.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "shim/shim_internal.h"

namespace tide::shim {
namespace {

float bitsToFloat(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
uint32_t floatToBits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

// Narrow float formats by field widths: sign, `e` exponent bits, `m`
// mantissa bits. fp16: (5,10); e5m2: (5,2) with infinities; e4m3: (4,3)
// "FN": no infinities, only S.1111.111 is NaN, largest finite 448.
struct Narrow {
  int e, m;
  bool fn;  // e4m3's finite-only encoding
};
constexpr Narrow kHalf{5, 10, false};
constexpr Narrow kE5m2{5, 2, false};
constexpr Narrow kE4m3{4, 3, true};

double narrowToDouble(uint32_t v, Narrow f) {
  const int bias = (1 << (f.e - 1)) - 1;
  const uint32_t man = v & ((1u << f.m) - 1);
  const uint32_t ex = (v >> f.m) & ((1u << f.e) - 1);
  const bool neg = (v >> (f.e + f.m)) & 1u;
  double r;
  const uint32_t exMax = (1u << f.e) - 1;
  if (!f.fn && ex == exMax) {
    r = man == 0 ? INFINITY : NAN;
  } else if (f.fn && ex == exMax && man == (1u << f.m) - 1) {
    r = NAN;
  } else if (ex == 0) {
    r = std::ldexp(static_cast<double>(man), 1 - bias - f.m);
  } else {
    r = std::ldexp(static_cast<double>(man | (1u << f.m)), static_cast<int>(ex) - bias - f.m);
  }
  return neg ? -r : r;
}

// Round to nearest, ties to even. Overflow: fp16 to infinity; fp8 saturates
// finite values to the largest finite one (e5m2 keeps an infinite input).
uint32_t doubleToNarrow(double x, Narrow f) {
  const int bias = (1 << (f.e - 1)) - 1;
  const uint32_t signBit = 1u << (f.e + f.m);
  const uint32_t sign = std::signbit(x) ? signBit : 0u;
  const uint32_t exMax = (1u << f.e) - 1;
  const uint32_t nanCode =
      f.fn ? (exMax << f.m) | ((1u << f.m) - 1) : (exMax << f.m) | (1u << (f.m - 1));
  const uint32_t maxFinite = f.fn ? nanCode - 1 : (exMax << f.m) - 1;
  const uint32_t infCode = exMax << f.m;
  if (std::isnan(x)) return sign | nanCode;
  const double a = std::fabs(x);
  if (std::isinf(a)) return sign | (f.fn ? maxFinite : infCode);
  // Quantum of the binade that holds a (subnormal binade for small values).
  int exp2 = a > 0 ? std::ilogb(a) : 1 - bias;
  if (exp2 < 1 - bias) exp2 = 1 - bias;
  const double q = std::ldexp(1.0, exp2 - f.m);
  const double n = std::nearbyint(a / q);  // default rounding: nearest even
  const double r = n * q;
  const double maxVal = narrowToDouble(maxFinite, f);
  if (r > maxVal) {
    if (f.m == 10) return sign | infCode;  // fp16: IEEE overflow
    return sign | maxFinite;
  }
  // Encode r exactly.
  if (r == 0) return sign;
  int e = std::ilogb(r);
  if (e < 1 - bias) {
    return sign | static_cast<uint32_t>(std::ldexp(r, bias - 1 + f.m));
  }
  const uint32_t man = static_cast<uint32_t>(std::ldexp(r, f.m - e)) & ((1u << f.m) - 1);
  return sign | (static_cast<uint32_t>(e + bias) << f.m) | man;
}

float bf16ToFloat(uint16_t b) { return bitsToFloat(static_cast<uint32_t>(b) << 16); }
uint16_t floatToBf16(float f) {
  const uint32_t x = floatToBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

template <class T>
void scaleInt(void* dst, const void* src, size_t n, double scalar) {
  using U = std::make_unsigned_t<T>;
  const U s = static_cast<U>(static_cast<T>(static_cast<int64_t>(scalar)));
  for (size_t i = 0; i < n; ++i) {
    T v;
    memcpy(&v, static_cast<const char*>(src) + i * sizeof(T), sizeof(T));
    const T r = static_cast<T>(static_cast<U>(static_cast<U>(v) * s));
    memcpy(static_cast<char*>(dst) + i * sizeof(T), &r, sizeof(T));
  }
}

template <class S, class Load, class Store>
void scaleNarrow(void* dst, const void* src, size_t n, float s, Load load, Store store) {
  for (size_t i = 0; i < n; ++i) {
    S v;
    memcpy(&v, static_cast<const char*>(src) + i * sizeof(S), sizeof(S));
    const S r = store(load(v) * s);
    memcpy(static_cast<char*>(dst) + i * sizeof(S), &r, sizeof(S));
  }
}

}  // namespace

size_t dtypeBytes(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
      return 8;
    default:
      return 0;
  }
}

bool dtypeOk(ncclDataType_t t) { return dtypeBytes(t) != 0; }

double loadScalar(const void* p, ncclDataType_t dtype) {
  switch (dtype) {
    case ncclInt8:
      return *static_cast<const int8_t*>(p);
    case ncclUint8:
      return *static_cast<const uint8_t*>(p);
    case ncclInt32:
      return *static_cast<const int32_t*>(p);
    case ncclUint32:
      return *static_cast<const uint32_t*>(p);
    case ncclInt64:
      return static_cast<double>(*static_cast<const int64_t*>(p));
    case ncclUint64:
      return static_cast<double>(*static_cast<const uint64_t*>(p));
    case ncclFloat16:
      return narrowToDouble(*static_cast<const uint16_t*>(p), kHalf);
    case ncclFloat32:
      return *static_cast<const float*>(p);
    case ncclFloat64:
      return *static_cast<const double*>(p);
    case ncclBfloat16:
      return bf16ToFloat(*static_cast<const uint16_t*>(p));
    case ncclFloat8e4m3:
      return narrowToDouble(*static_cast<const uint8_t*>(p), kE4m3);
    case ncclFloat8e5m2:
      return narrowToDouble(*static_cast<const uint8_t*>(p), kE5m2);
    default:
      return 0;
  }
}

void scaleHost(void* dst, const void* src, size_t n, ncclDataType_t dtype, double scalar) {
  const float s = static_cast<float>(scalar);
  auto half = [](uint16_t v) { return static_cast<float>(narrowToDouble(v, kHalf)); };
  auto toHalf = [](float f) { return static_cast<uint16_t>(doubleToNarrow(f, kHalf)); };
  auto e4 = [](uint8_t v) { return static_cast<float>(narrowToDouble(v, kE4m3)); };
  auto toE4 = [](float f) { return static_cast<uint8_t>(doubleToNarrow(f, kE4m3)); };
  auto e5 = [](uint8_t v) { return static_cast<float>(narrowToDouble(v, kE5m2)); };
  auto toE5 = [](float f) { return static_cast<uint8_t>(doubleToNarrow(f, kE5m2)); };
  switch (dtype) {
    case ncclInt8:
      return scaleInt<int8_t>(dst, src, n, scalar);
    case ncclUint8:
      return scaleInt<uint8_t>(dst, src, n, scalar);
    case ncclInt32:
      return scaleInt<int32_t>(dst, src, n, scalar);
    case ncclUint32:
      return scaleInt<uint32_t>(dst, src, n, scalar);
    case ncclInt64:
      return scaleInt<int64_t>(dst, src, n, scalar);
    case ncclUint64:
      return scaleInt<uint64_t>(dst, src, n, scalar);
    case ncclFloat16:
      return scaleNarrow<uint16_t>(dst, src, n, s, half, toHalf);
    case ncclFloat32:
      return scaleNarrow<float>(
          dst, src, n, s, [](float v) { return v; }, [](float v) { return v; });
    case ncclFloat64:
      for (size_t i = 0; i < n; ++i) {
        double v;
        memcpy(&v, static_cast<const char*>(src) + i * 8, 8);
        v *= scalar;
        memcpy(static_cast<char*>(dst) + i * 8, &v, 8);
      }
      return;
    case ncclBfloat16:
      return scaleNarrow<uint16_t>(dst, src, n, s, bf16ToFloat, floatToBf16);
    case ncclFloat8e4m3:
      return scaleNarrow<uint8_t>(dst, src, n, s, e4, toE4);
    case ncclFloat8e5m2:
      return scaleNarrow<uint8_t>(dst, src, n, s, e5, toE5);
    default:
      return;
  }
}

}  // namespace tide::shim
