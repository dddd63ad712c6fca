// CUDA reduction, scale and divide kernels for device buffers.
//
// Compiled by nvcc into one fat binary (sm_80, sm_90 and compute_90 PTX) that
// cuda_kernels.cc embeds and loads through the driver API, so libtide.so has
// no link-time dependency on CUDA. Every kernel is extern "C" with a name the
// host side builds from the dtype and op numbers (tide_reduce_<dtype>_<op>,
// tide_scale_<dtype>, tide_divide_<dtype>).
//
// Numerics are those of core/kernels.h and bit-identical to the host table:
// 16- and 8-bit floats are widened to fp32, combined and rounded back to
// nearest-even (fp8 saturating); integers wrap; Max/Min let a NaN win and
// return the second operand on ties. Memory is accessed in 16-byte vectors
// when all pointers are 16-byte aligned, element-wise otherwise. dst may be
// equal to a or b (same index), not shifted against them.
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
  if (mag >= 0x7c00u) bits += 112u << 23;        // inf / NaN exponent
  if (mag > 0x7c00u) bits |= 0x00400000u;        // NaN comes out quiet
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

template <class C> struct UnsignedOf { using T = C; };
template <> struct UnsignedOf<int8_t> { using T = uint8_t; };
template <> struct UnsignedOf<int32_t> { using T = uint32_t; };
template <> struct UnsignedOf<int64_t> { using T = uint64_t; };

template <class C> TIDE_DEV constexpr bool isIntegral() { return static_cast<C>(1) / 2 == 0; }

struct OpSum {
  static constexpr bool kSelect = false;
  template <class C> static TIDE_DEV C apply(C x, C y) {
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
  template <class C> static TIDE_DEV C apply(C x, C y) {
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
  template <class C> static TIDE_DEV bool pick(C x, C y) { return (x > y) | (x != x); }
};
struct OpMin {
  static constexpr bool kSelect = true;
  template <class C> static TIDE_DEV bool pick(C x, C y) { return (x < y) | (x != x); }
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

template <class Codec, class Op>
TIDE_DEV void reduceBody(void* dst, const void* a, const void* b, uint64_t n) {
  using S = typename Codec::Store;
  constexpr uint64_t kVec = 16 / sizeof(S);
  S* d = static_cast<S*>(dst);
  const S* x = static_cast<const S*>(a);
  const S* y = static_cast<const S*>(b);
  const uint64_t tid = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  const uint64_t nVec = (aligned16(d) && aligned16(x) && aligned16(y)) ? n / kVec : 0;
  for (uint64_t v = tid; v < nVec; v += stride) {
    Vec<S> p, q, r;
    p.v = reinterpret_cast<const uint4*>(x)[v];
    q.v = reinterpret_cast<const uint4*>(y)[v];
#pragma unroll
    for (uint64_t j = 0; j < kVec; ++j) r.s[j] = combine<Codec, Op>(p.s[j], q.s[j]);
    reinterpret_cast<uint4*>(d)[v] = r.v;
  }
  for (uint64_t i = nVec * kVec + tid; i < n; i += stride) d[i] = combine<Codec, Op>(x[i], y[i]);
}

template <class Codec>
TIDE_DEV void scaleBody(void* dst, const void* src, uint64_t n, double scalar) {
  using S = typename Codec::Store;
  using C = typename Codec::Comp;
  constexpr uint64_t kVec = 16 / sizeof(S);
  const C s = static_cast<C>(scalar);
  S* d = static_cast<S*>(dst);
  const S* x = static_cast<const S*>(src);
  const uint64_t tid = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  const uint64_t nVec = (aligned16(d) && aligned16(x)) ? n / kVec : 0;
  for (uint64_t v = tid; v < nVec; v += stride) {
    Vec<S> p, r;
    p.v = reinterpret_cast<const uint4*>(x)[v];
#pragma unroll
    for (uint64_t j = 0; j < kVec; ++j) r.s[j] = Codec::store(Codec::load(p.s[j]) * s);
    reinterpret_cast<uint4*>(d)[v] = r.v;
  }
  for (uint64_t i = nVec * kVec + tid; i < n; i += stride) d[i] = Codec::store(Codec::load(x[i]) * s);
}

// Integer division truncating like C; divisor 0 copies; a divisor beyond the
// type's range gives 0 (or -1 for the minimum divided by max + 1).
template <class T, T kMin, T kMax>
TIDE_DEV void divideBody(void* dst, const void* src, uint64_t n, uint64_t divisor) {
  T* d = static_cast<T*>(dst);
  const T* s = static_cast<const T*>(src);
  const uint64_t tid = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  const bool isSigned = kMin != 0;
  for (uint64_t i = tid; i < n; i += stride) {
    const T v = s[i];
    T r;
    if (divisor == 0) {
      r = v;
    } else if (divisor > static_cast<uint64_t>(kMax)) {
      r = (isSigned && divisor == static_cast<uint64_t>(kMax) + 1 && v == kMin) ? T(-1) : T(0);
    } else {
      r = static_cast<T>(v / static_cast<T>(divisor));
    }
    d[i] = r;
  }
}

}  // namespace

#define TIDE_REDUCE_KERNEL(T, O, CODEC, OP)                                              \
  extern "C" __global__ void __launch_bounds__(512)                                      \
      tide_reduce_##T##_##O(void* d, const void* a, const void* b, unsigned long long n) { \
    reduceBody<CODEC, OP>(d, a, b, n);                                                   \
  }
#define TIDE_REDUCE_OPS(T, CODEC)              \
  TIDE_REDUCE_KERNEL(T, 0, CODEC, OpSum)       \
  TIDE_REDUCE_KERNEL(T, 1, CODEC, OpProd)      \
  TIDE_REDUCE_KERNEL(T, 2, CODEC, OpMax)       \
  TIDE_REDUCE_KERNEL(T, 3, CODEC, OpMin)

// dtype numbers are tideDataType_t's (= ncclDataType_t's).
TIDE_REDUCE_OPS(0, Plain<int8_t>)
TIDE_REDUCE_OPS(1, Plain<uint8_t>)
TIDE_REDUCE_OPS(2, Plain<int32_t>)
TIDE_REDUCE_OPS(3, Plain<uint32_t>)
TIDE_REDUCE_OPS(4, Plain<int64_t>)
TIDE_REDUCE_OPS(5, Plain<uint64_t>)
TIDE_REDUCE_OPS(6, Half)
TIDE_REDUCE_OPS(7, Plain<float>)
TIDE_REDUCE_OPS(8, Plain<double>)
TIDE_REDUCE_OPS(9, Bf16)
TIDE_REDUCE_OPS(10, E4m3)
TIDE_REDUCE_OPS(11, E5m2)

#define TIDE_SCALE_KERNEL(T, CODEC)                                                      \
  extern "C" __global__ void __launch_bounds__(512)                                      \
      tide_scale_##T(void* d, const void* s, unsigned long long n, double scalar) {      \
    scaleBody<CODEC>(d, s, n, scalar);                                                   \
  }
TIDE_SCALE_KERNEL(6, Half)
TIDE_SCALE_KERNEL(7, Plain<float>)
TIDE_SCALE_KERNEL(8, Plain<double>)
TIDE_SCALE_KERNEL(9, Bf16)
TIDE_SCALE_KERNEL(10, E4m3)
TIDE_SCALE_KERNEL(11, E5m2)

#define TIDE_DIVIDE_KERNEL(T, TYPE, MIN, MAX)                                            \
  extern "C" __global__ void __launch_bounds__(512) tide_divide_##T(                     \
      void* d, const void* s, unsigned long long n, unsigned long long divisor) {        \
    divideBody<TYPE, MIN, MAX>(d, s, n, divisor);                                        \
  }
TIDE_DIVIDE_KERNEL(0, int8_t, INT8_MIN, INT8_MAX)
TIDE_DIVIDE_KERNEL(1, uint8_t, 0, UINT8_MAX)
TIDE_DIVIDE_KERNEL(2, int32_t, INT32_MIN, INT32_MAX)
TIDE_DIVIDE_KERNEL(3, uint32_t, 0, UINT32_MAX)
TIDE_DIVIDE_KERNEL(4, int64_t, INT64_MIN, INT64_MAX)
TIDE_DIVIDE_KERNEL(5, uint64_t, 0, UINT64_MAX)
