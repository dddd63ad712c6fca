// Host reduction kernels: dst = a OP b, scale, integer divide, copy.
//
// Structure: an element codec (storage type <-> compute type) and an operator
// are combined by one always-inline loop template. The loop is instantiated
// once for the compiler's default target and once with AVX2+F16C enabled
// (x86-64), chosen at run time. Loops run in blocks of a fixed element count
// so that GCC vectorises them even at -O2 (its "very cheap" cost model only
// vectorises loops whose trip count is a known multiple of the vector length).
// Pointers are __restrict only when that is true: dst == a and dst == b get
// their own in-place loops.
#include "algorithms/kernels/host_kernels.h"

#include <array>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "algorithms/kernels/float_conv.h"
#include "core/registry.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define TIDE_KERNELS_X86 1
#else
#define TIDE_KERNELS_X86 0
#endif

#define TIDE_KINLINE inline __attribute__((always_inline))

namespace tide::kernels {
namespace {

// Elements per vectorised block: a multiple of every vector width in use.
constexpr size_t kBlock = 64;

// ---- Codecs ------------------------------------------------------------------

template <class T>
struct Plain {
  using Store = T;
  using Comp = T;
  static TIDE_KINLINE Comp load(Store v) { return v; }
  static TIDE_KINLINE Store store(Comp c) { return c; }
};

struct Half {
  using Store = uint16_t;
  using Comp = float;
  static TIDE_KINLINE Comp load(Store v) { return fp::halfToFloat(v); }
  static TIDE_KINLINE Store store(Comp c) { return fp::floatToHalf(c); }
};

struct Bf16 {
  using Store = uint16_t;
  using Comp = float;
  static TIDE_KINLINE Comp load(Store v) { return fp::bf16ToFloat(v); }
  static TIDE_KINLINE Store store(Comp c) { return fp::floatToBf16(c); }
};

struct E4m3 {
  using Store = uint8_t;
  using Comp = float;
  static TIDE_KINLINE Comp load(Store v) { return fp::fp8e4m3ToFloat(v); }
  static TIDE_KINLINE Store store(Comp c) { return fp::floatToFp8e4m3(c); }
};

struct E5m2 {
  using Store = uint8_t;
  using Comp = float;
  static TIDE_KINLINE Comp load(Store v) { return fp::fp8e5m2ToFloat(v); }
  static TIDE_KINLINE Store store(Comp c) { return fp::floatToFp8e5m2(c); }
};

// ---- Operators ---------------------------------------------------------------
// Sum/Prod compute a new value (integers wrap: the arithmetic is done on the
// unsigned type). Max/Min select one operand: `pick(x, y)` says whether x is
// the result. A NaN operand wins, so NaN propagates; on equal values (+0 and
// -0) the second operand is returned.

template <class C>
using UnsignedOf = std::make_unsigned_t<C>;

struct OpSum {
  static constexpr bool kSelect = false;
  template <class C>
  static TIDE_KINLINE C apply(C x, C y) {
    if constexpr (std::is_integral_v<C>) {
      return static_cast<C>(static_cast<UnsignedOf<C>>(x) + static_cast<UnsignedOf<C>>(y));
    } else {
      return x + y;
    }
  }
};

struct OpProd {
  static constexpr bool kSelect = false;
  template <class C>
  static TIDE_KINLINE C apply(C x, C y) {
    if constexpr (std::is_integral_v<C>) {
      // 8-bit operands promote to int; 255 * 255 cannot overflow it.
      return static_cast<C>(static_cast<UnsignedOf<C>>(x) * static_cast<UnsignedOf<C>>(y));
    } else {
      return x * y;
    }
  }
};

struct OpMax {
  static constexpr bool kSelect = true;
  template <class C>
  static TIDE_KINLINE bool pick(C x, C y) {
    return (x > y) | (x != x);  // NOLINT: x != x tests NaN; | avoids a branch
  }
};

struct OpMin {
  static constexpr bool kSelect = true;
  template <class C>
  static TIDE_KINLINE bool pick(C x, C y) {
    return (x < y) | (x != x);  // NOLINT: x != x tests NaN; | avoids a branch
  }
};

template <class Codec, class Op>
TIDE_KINLINE typename Codec::Store combine(typename Codec::Store a, typename Codec::Store b) {
  if constexpr (Op::kSelect) {
    return Op::pick(Codec::load(a), Codec::load(b)) ? a : b;
  } else {
    return Codec::store(Op::apply(Codec::load(a), Codec::load(b)));
  }
}

// ---- Loops -------------------------------------------------------------------

template <class Codec, class Op, class S = typename Codec::Store>
TIDE_KINLINE void loopDistinct(S* __restrict d, const S* __restrict a, const S* __restrict b,
                               size_t n) {
  size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    for (size_t j = 0; j < kBlock; ++j) d[i + j] = combine<Codec, Op>(a[i + j], b[i + j]);
  }
  for (; i < n; ++i) d[i] = combine<Codec, Op>(a[i], b[i]);
}

// d = d OP b (dst == a).
template <class Codec, class Op, class S = typename Codec::Store>
TIDE_KINLINE void loopIntoA(S* __restrict d, const S* __restrict b, size_t n) {
  size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    for (size_t j = 0; j < kBlock; ++j) d[i + j] = combine<Codec, Op>(d[i + j], b[i + j]);
  }
  for (; i < n; ++i) d[i] = combine<Codec, Op>(d[i], b[i]);
}

// d = a OP d (dst == b).
template <class Codec, class Op, class S = typename Codec::Store>
TIDE_KINLINE void loopIntoB(S* __restrict d, const S* __restrict a, size_t n) {
  size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    for (size_t j = 0; j < kBlock; ++j) d[i + j] = combine<Codec, Op>(a[i + j], d[i + j]);
  }
  for (; i < n; ++i) d[i] = combine<Codec, Op>(a[i], d[i]);
}

// d = d OP d (dst == a == b).
template <class Codec, class Op, class S = typename Codec::Store>
TIDE_KINLINE void loopSelf(S* __restrict d, size_t n) {
  size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    for (size_t j = 0; j < kBlock; ++j) d[i + j] = combine<Codec, Op>(d[i + j], d[i + j]);
  }
  for (; i < n; ++i) d[i] = combine<Codec, Op>(d[i], d[i]);
}

// Any other overlap: element by element, in order, no aliasing assumptions.
template <class Codec, class Op, class S = typename Codec::Store>
TIDE_KINLINE void loopOverlap(S* d, const S* a, const S* b, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const S x = a[i];
    const S y = b[i];
    d[i] = combine<Codec, Op>(x, y);
  }
}

inline bool overlaps(const void* p, const void* q, size_t bytes) {
  const auto x = reinterpret_cast<uintptr_t>(p);
  const auto y = reinterpret_cast<uintptr_t>(q);
  return x < y + bytes && y < x + bytes;
}

template <class Codec, class Op>
TIDE_KINLINE void reduceAny(void* dst, const void* a, const void* b, size_t n) {
  using S = typename Codec::Store;
  S* d = static_cast<S*>(dst);
  const S* x = static_cast<const S*>(a);
  const S* y = static_cast<const S*>(b);
  const size_t bytes = n * sizeof(S);
  if (d == x && d == y) {
    loopSelf<Codec, Op>(d, n);
  } else if (d == x && !overlaps(d, y, bytes)) {
    loopIntoA<Codec, Op>(d, y, n);
  } else if (d == y && !overlaps(d, x, bytes)) {
    loopIntoB<Codec, Op>(d, x, n);
  } else if (!overlaps(d, x, bytes) && !overlaps(d, y, bytes)) {
    // a and b may overlap each other: both are only read.
    loopDistinct<Codec, Op>(d, x, y, n);
  } else {
    loopOverlap<Codec, Op>(d, x, y, n);
  }
}

template <class Codec, class S = typename Codec::Store, class C = typename Codec::Comp>
TIDE_KINLINE void scaleDistinct(S* __restrict d, const S* __restrict x, size_t n, C s) {
  size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    for (size_t j = 0; j < kBlock; ++j) d[i + j] = Codec::store(Codec::load(x[i + j]) * s);
  }
  for (; i < n; ++i) d[i] = Codec::store(Codec::load(x[i]) * s);
}

template <class Codec, class S = typename Codec::Store, class C = typename Codec::Comp>
TIDE_KINLINE void scaleInPlace(S* __restrict d, size_t n, C s) {
  size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    for (size_t j = 0; j < kBlock; ++j) d[i + j] = Codec::store(Codec::load(d[i + j]) * s);
  }
  for (; i < n; ++i) d[i] = Codec::store(Codec::load(d[i]) * s);
}

template <class Codec, class S = typename Codec::Store>
TIDE_KINLINE void scaleAny(void* dst, const void* src, size_t n, typename Codec::Comp s) {
  S* d = static_cast<S*>(dst);
  const S* x = static_cast<const S*>(src);
  if (d == x) {
    scaleInPlace<Codec>(d, n, s);
  } else if (!overlaps(d, x, n * sizeof(S))) {
    scaleDistinct<Codec>(d, x, n, s);
  } else {
    for (size_t i = 0; i < n; ++i) d[i] = Codec::store(Codec::load(x[i]) * s);
  }
}

// ---- Instruction-set variants -----------------------------------------------

template <class Codec, class Op>
struct Base {
  static void run(void* dst, const void* a, const void* b, size_t n) {
    reduceAny<Codec, Op>(dst, a, b, n);
  }
};

#if TIDE_KERNELS_X86
#define TIDE_AVX2 __attribute__((target("avx2,f16c")))

template <class Codec, class Op>
struct Avx2 {
  TIDE_AVX2 static void run(void* dst, const void* a, const void* b, size_t n) {
    reduceAny<Codec, Op>(dst, a, b, n);
  }
};

// fp16 with the F16C conversion instructions. Each group of 8 is loaded
// before it is stored, so dst may equal a or b. Bit-identical to the
// software path (same rounding; Max/Min select an operand's bits).
template <class Op>
TIDE_AVX2 inline __m128i halfCombine8(__m128i ha, __m128i hb) {
  const __m256 x = _mm256_cvtph_ps(ha);
  const __m256 y = _mm256_cvtph_ps(hb);
  if constexpr (std::is_same_v<Op, OpSum>) {
    return _mm256_cvtps_ph(_mm256_add_ps(x, y), _MM_FROUND_TO_NEAREST_INT);
  } else if constexpr (std::is_same_v<Op, OpProd>) {
    return _mm256_cvtps_ph(_mm256_mul_ps(x, y), _MM_FROUND_TO_NEAREST_INT);
  } else {
    constexpr int kCmp = std::is_same_v<Op, OpMax> ? _CMP_GT_OQ : _CMP_LT_OQ;
    const __m256 m = _mm256_or_ps(_mm256_cmp_ps(x, y, kCmp), _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    const __m256i mi = _mm256_castps_si256(m);
    const __m128i m16 =
        _mm_packs_epi32(_mm256_castsi256_si128(mi), _mm256_extracti128_si256(mi, 1));
    return _mm_blendv_epi8(hb, ha, m16);
  }
}

template <class Op>
struct Avx2<Half, Op> {
  TIDE_AVX2 static void run(void* dst, const void* a, const void* b, size_t n) {
    auto* d = static_cast<uint16_t*>(dst);
    const auto* x = static_cast<const uint16_t*>(a);
    const auto* y = static_cast<const uint16_t*>(b);
    const size_t bytes = n * sizeof(uint16_t);
    const bool safe = (d == x || !overlaps(d, x, bytes)) && (d == y || !overlaps(d, y, bytes));
    if (!safe) {
      reduceAny<Half, Op>(dst, a, b, n);
      return;
    }
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
      const __m128i a0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i));
      const __m128i a1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i + 8));
      const __m128i b0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(y + i));
      const __m128i b1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(y + i + 8));
      const __m128i r0 = halfCombine8<Op>(a0, b0);
      const __m128i r1 = halfCombine8<Op>(a1, b1);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i), r0);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i + 8), r1);
    }
    for (; i < n; ++i) d[i] = combine<Half, Op>(x[i], y[i]);
  }
};

// bf16: 16 elements per step. unpacklo/hi_epi16 against zero widen to fp32 in
// an in-lane order that packus_epi32 / packs_epi32 restore exactly. Rounding
// and NaN handling are the same bit operations as fp::floatToBf16.
TIDE_AVX2 inline __m256i bf16Round(__m256 f) {
  const __m256i x = _mm256_castps_si256(f);
  const __m256i hi = _mm256_srli_epi32(x, 16);
  const __m256i odd = _mm256_and_si256(hi, _mm256_set1_epi32(1));
  const __m256i r =
      _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), odd), 16);
  const __m256i qnan = _mm256_or_si256(hi, _mm256_set1_epi32(0x40));
  return _mm256_blendv_epi8(r, qnan, _mm256_castps_si256(_mm256_cmp_ps(f, f, _CMP_UNORD_Q)));
}

template <class Op>
TIDE_AVX2 inline __m256i bf16Combine16(__m256i va, __m256i vb) {
  const __m256i z = _mm256_setzero_si256();
  const __m256 xl = _mm256_castsi256_ps(_mm256_unpacklo_epi16(z, va));
  const __m256 xh = _mm256_castsi256_ps(_mm256_unpackhi_epi16(z, va));
  const __m256 yl = _mm256_castsi256_ps(_mm256_unpacklo_epi16(z, vb));
  const __m256 yh = _mm256_castsi256_ps(_mm256_unpackhi_epi16(z, vb));
  if constexpr (std::is_same_v<Op, OpSum>) {
    return _mm256_packus_epi32(bf16Round(_mm256_add_ps(xl, yl)), bf16Round(_mm256_add_ps(xh, yh)));
  } else if constexpr (std::is_same_v<Op, OpProd>) {
    return _mm256_packus_epi32(bf16Round(_mm256_mul_ps(xl, yl)), bf16Round(_mm256_mul_ps(xh, yh)));
  } else {
    constexpr int kCmp = std::is_same_v<Op, OpMax> ? _CMP_GT_OQ : _CMP_LT_OQ;
    const __m256 ml =
        _mm256_or_ps(_mm256_cmp_ps(xl, yl, kCmp), _mm256_cmp_ps(xl, xl, _CMP_UNORD_Q));
    const __m256 mh =
        _mm256_or_ps(_mm256_cmp_ps(xh, yh, kCmp), _mm256_cmp_ps(xh, xh, _CMP_UNORD_Q));
    const __m256i m = _mm256_packs_epi32(_mm256_castps_si256(ml), _mm256_castps_si256(mh));
    return _mm256_blendv_epi8(vb, va, m);
  }
}

template <class Op>
struct Avx2<Bf16, Op> {
  TIDE_AVX2 static void run(void* dst, const void* a, const void* b, size_t n) {
    auto* d = static_cast<uint16_t*>(dst);
    const auto* x = static_cast<const uint16_t*>(a);
    const auto* y = static_cast<const uint16_t*>(b);
    const size_t bytes = n * sizeof(uint16_t);
    const bool safe = (d == x || !overlaps(d, x, bytes)) && (d == y || !overlaps(d, y, bytes));
    if (!safe) {
      reduceAny<Bf16, Op>(dst, a, b, n);
      return;
    }
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
      const __m256i a0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
      const __m256i a1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i + 16));
      const __m256i b0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y + i));
      const __m256i b1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y + i + 16));
      const __m256i r0 = bf16Combine16<Op>(a0, b0);
      const __m256i r1 = bf16Combine16<Op>(a1, b1);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i), r0);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i + 16), r1);
    }
    for (; i < n; ++i) d[i] = combine<Bf16, Op>(x[i], y[i]);
  }
};

template <class Codec>
TIDE_AVX2 void scaleAvx2(void* dst, const void* src, size_t n, typename Codec::Comp s) {
  scaleAny<Codec>(dst, src, n, s);
}
#endif  // TIDE_KERNELS_X86

template <class Codec>
void scaleBase(void* dst, const void* src, size_t n, typename Codec::Comp s) {
  scaleAny<Codec>(dst, src, n, s);
}

// ---- Tables ------------------------------------------------------------------

using OpRow = std::array<ReduceFn, 4>;
using ReduceTable = std::array<OpRow, tideNumTypes>;

template <template <class, class> class K, class Codec>
constexpr OpRow opRow() {
  return {&K<Codec, OpSum>::run, &K<Codec, OpProd>::run, &K<Codec, OpMax>::run,
          &K<Codec, OpMin>::run};
}

// Rows in tideDataType_t order.
template <template <class, class> class K>
constexpr ReduceTable makeTable() {
  return {opRow<K, Plain<int8_t>>(),  opRow<K, Plain<uint8_t>>(),
          opRow<K, Plain<int32_t>>(), opRow<K, Plain<uint32_t>>(),
          opRow<K, Plain<int64_t>>(), opRow<K, Plain<uint64_t>>(),
          opRow<K, Half>(),           opRow<K, Plain<float>>(),
          opRow<K, Plain<double>>(),  opRow<K, Bf16>(),
          opRow<K, E4m3>(),           opRow<K, E5m2>()};
}

constexpr ReduceTable kBaseTable = makeTable<Base>();
#if TIDE_KERNELS_X86
constexpr ReduceTable kAvx2Table = makeTable<Avx2>();
#endif

template <class T>
void divideInt(void* dst, const void* src, size_t n, uint64_t divisor) {
  T* d = static_cast<T*>(dst);
  const T* s = static_cast<const T*>(src);
  constexpr T kMax = std::numeric_limits<T>::max();
  constexpr T kMin = std::numeric_limits<T>::min();
  if (divisor == 0) {  // undefined; leave the values as they are
    if (d != s) std::memmove(d, s, n * sizeof(T));
    return;
  }
  if (divisor > static_cast<uint64_t>(kMax)) {
    // |x| < divisor, so the quotient is 0, except kMin / (kMax + 1) == -1.
    const bool minusOne = std::is_signed_v<T> && divisor == static_cast<uint64_t>(kMax) + 1;
    for (size_t i = 0; i < n; ++i) d[i] = (minusOne && s[i] == kMin) ? static_cast<T>(-1) : T{};
    return;
  }
  const T q = static_cast<T>(divisor);  // positive and in range
  for (size_t i = 0; i < n; ++i) d[i] = static_cast<T>(s[i] / q);
}

void hostDivide(void* dst, const void* src, size_t n, tideDataType_t dtype, uint64_t divisor) {
  switch (dtype) {
    case tideInt8:
      return divideInt<int8_t>(dst, src, n, divisor);
    case tideUint8:
      return divideInt<uint8_t>(dst, src, n, divisor);
    case tideInt32:
      return divideInt<int32_t>(dst, src, n, divisor);
    case tideUint32:
      return divideInt<uint32_t>(dst, src, n, divisor);
    case tideInt64:
      return divideInt<int64_t>(dst, src, n, divisor);
    case tideUint64:
      return divideInt<uint64_t>(dst, src, n, divisor);
    default:
      return;  // floating types are scaled, not divided
  }
}

void hostCopy(void* dst, const void* src, size_t bytes) {
  if (bytes != 0) std::memcpy(dst, src, bytes);
}

ReduceFn tableReduceFn(tideDataType_t dtype, RedOp op) {
  return hostReduceFn(dtype, op, bestHostIsa());
}

void tableScale(void* dst, const void* src, size_t n, tideDataType_t dtype, double scalar) {
  hostScale(dst, src, n, dtype, scalar, bestHostIsa());
}

const KernelTable kHostTable = {MemType::Host, &tableReduceFn, &tableScale, &hostDivide, &hostCopy};

}  // namespace

namespace {

// CPUID exits to the hypervisor in a virtual machine (about 15 us each here),
// so the answer is computed once per process, never on the per-call path.
bool detectAvx2() {
#if TIDE_KERNELS_X86
  __builtin_cpu_init();  // may run before libgcc's own initializer
  if (!__builtin_cpu_supports("avx2")) return false;
  // F16C through cpuid (leaf 1, ECX): clang has no "f16c" feature name.
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
#else
  return false;
#endif
}

}  // namespace

bool hostIsaSupported(HostIsa isa) {
  switch (isa) {
    case HostIsa::kBaseline:
      return true;
    case HostIsa::kAvx2: {
      static const bool avx2 = detectAvx2();
      return avx2;
    }
  }
  return false;
}

HostIsa bestHostIsa() {
  static const HostIsa best =
      hostIsaSupported(HostIsa::kAvx2) ? HostIsa::kAvx2 : HostIsa::kBaseline;
  return best;
}

ReduceFn hostReduceFn(tideDataType_t dtype, RedOp op, HostIsa isa) {
  const int t = static_cast<int>(dtype);
  const unsigned o = static_cast<unsigned>(op);
  if (t < 0 || t >= tideNumTypes || o >= 4 || !hostIsaSupported(isa)) return nullptr;
#if TIDE_KERNELS_X86
  if (isa == HostIsa::kAvx2) return kAvx2Table[t][o];
#endif
  return kBaseTable[t][o];
}

void hostScale(void* dst, const void* src, size_t n, tideDataType_t dtype, double scalar,
               HostIsa isa) {
  if (!hostIsaSupported(isa)) return;
  const float s = static_cast<float>(scalar);
#if TIDE_KERNELS_X86
  if (isa == HostIsa::kAvx2) {
    switch (dtype) {
      case tideFloat16:
        return scaleAvx2<Half>(dst, src, n, s);
      case tideFloat32:
        return scaleAvx2<Plain<float>>(dst, src, n, s);
      case tideFloat64:
        return scaleAvx2<Plain<double>>(dst, src, n, scalar);
      case tideBfloat16:
        return scaleAvx2<Bf16>(dst, src, n, s);
      case tideFloat8e4m3:
        return scaleAvx2<E4m3>(dst, src, n, s);
      case tideFloat8e5m2:
        return scaleAvx2<E5m2>(dst, src, n, s);
      default:
        return;
    }
  }
#endif
  switch (dtype) {
    case tideFloat16:
      return scaleBase<Half>(dst, src, n, s);
    case tideFloat32:
      return scaleBase<Plain<float>>(dst, src, n, s);
    case tideFloat64:
      return scaleBase<Plain<double>>(dst, src, n, scalar);
    case tideBfloat16:
      return scaleBase<Bf16>(dst, src, n, s);
    case tideFloat8e4m3:
      return scaleBase<E4m3>(dst, src, n, s);
    case tideFloat8e5m2:
      return scaleBase<E5m2>(dst, src, n, s);
    default:
      return;  // integer types are divided, not scaled
  }
}

const KernelTable& hostKernelTable() { return kHostTable; }

}  // namespace tide::kernels

TIDE_ON_LOAD(::tide::registerKernels(&::tide::kernels::kHostTable));
