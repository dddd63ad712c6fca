// Host reduction kernels and float conversions, checked against a slow,
// independent reference: values are decoded with ldexp, combined in
// double/__int128, and re-encoded with frexp/nearbyint.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "algorithms/kernels/float_conv.h"
#include "algorithms/kernels/host_kernels.h"
#include "core/registry.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TEST_X86 1
#else
#define TEST_X86 0
#endif

namespace tide {
namespace {

using kernels::HostIsa;

// ---- Reference codec for the narrow formats --------------------------------

struct Fmt {
  int eb;  // exponent bits
  int mb;  // mantissa bits
  int bias;
  bool ieee;       // all-ones exponent is inf/NaN; otherwise only S.1..1.1..1 is NaN
  bool satFinite;  // finite overflow saturates instead of becoming inf
};
constexpr Fmt kF16{5, 10, 15, true, false};
constexpr Fmt kBf16{8, 7, 127, true, false};
constexpr Fmt kE4m3{4, 3, 7, false, true};
constexpr Fmt kE5m2{5, 2, 15, true, true};

double refMaxFinite(const Fmt& f) {
  const int top = (1 << f.eb) - 1;
  if (f.ieee) return std::ldexp((2 << f.mb) - 1, top - 1 - f.bias - f.mb);
  return std::ldexp((2 << f.mb) - 2, top - f.bias - f.mb);
}

double refDecode(uint32_t bits, const Fmt& f) {
  const uint32_t mmask = (1u << f.mb) - 1;
  const uint32_t top = (1u << f.eb) - 1;
  const bool neg = (bits >> (f.eb + f.mb)) & 1u;
  const uint32_t e = (bits >> f.mb) & top;
  const uint32_t m = bits & mmask;
  double v;
  if (f.ieee && e == top) {
    v = m != 0 ? std::nan("") : INFINITY;
  } else if (!f.ieee && e == top && m == mmask) {
    v = std::nan("");
  } else if (e == 0) {
    v = std::ldexp(static_cast<double>(m), 1 - f.bias - f.mb);
  } else {
    v = std::ldexp(static_cast<double>(m + (1u << f.mb)), static_cast<int>(e) - f.bias - f.mb);
  }
  return neg ? -v : v;
}

uint32_t refEncode(double v, const Fmt& f) {
  const uint32_t top = (1u << f.eb) - 1;
  const uint32_t mmask = (1u << f.mb) - 1;
  const uint32_t sign = std::signbit(v) ? 1u << (f.eb + f.mb) : 0u;
  const uint32_t maxFiniteBits = f.ieee ? ((top - 1) << f.mb) | mmask : (top << f.mb) | (mmask - 1);
  if (std::isnan(v)) return sign | (top << f.mb) | (f.ieee ? 1u << (f.mb - 1) : mmask);
  const double a = std::fabs(v);
  if (std::isinf(a)) return sign | (f.ieee ? top << f.mb : maxFiniteBits);
  if (a == 0) return sign;
  int e;
  std::frexp(a, &e);
  const int ue = std::max(e - 1, 1 - f.bias);
  const double q = std::ldexp(1.0, ue - f.mb);
  const double r = std::nearbyint(a / q) * q;  // ties to even (default mode)
  if (r > refMaxFinite(f)) {
    return sign | ((f.satFinite || !f.ieee) ? maxFiniteBits : top << f.mb);
  }
  if (r == 0) return sign;
  std::frexp(r, &e);
  if (e - 1 < 1 - f.bias) {
    return sign | static_cast<uint32_t>(r / std::ldexp(1.0, 1 - f.bias - f.mb));
  }
  const uint32_t m = static_cast<uint32_t>(r / std::ldexp(1.0, e - 1 - f.mb)) - (1u << f.mb);
  return sign | (static_cast<uint32_t>(e - 1 + f.bias) << f.mb) | m;
}

uint32_t bitsOf(float f) { return std::bit_cast<uint32_t>(f); }

// Library conversions, by format, through uint32_t.
float libDecode(uint32_t v, const Fmt& f) {
  if (&f == &kF16) return fp::halfToFloat(static_cast<uint16_t>(v));
  if (&f == &kBf16) return fp::bf16ToFloat(static_cast<uint16_t>(v));
  if (&f == &kE4m3) return fp::fp8e4m3ToFloat(static_cast<uint8_t>(v));
  return fp::fp8e5m2ToFloat(static_cast<uint8_t>(v));
}
uint32_t libEncode(float x, const Fmt& f) {
  if (&f == &kF16) return fp::floatToHalf(x);
  if (&f == &kBf16) return fp::floatToBf16(x);
  if (&f == &kE4m3) return fp::floatToFp8e4m3(x);
  return fp::floatToFp8e5m2(x);
}

const Fmt* const kFormats[] = {&kF16, &kBf16, &kE4m3, &kE5m2};

// ---- Conversions -------------------------------------------------------------

TEST(FloatConv, ExhaustiveDecodeAndRoundTrip) {
  for (const Fmt* f : kFormats) {
    const uint32_t count = 1u << (1 + f->eb + f->mb);
    for (uint32_t v = 0; v < count; ++v) {
      const double want = refDecode(v, *f);
      const float got = libDecode(v, *f);
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(got)) << v;
        ASSERT_EQ(std::signbit(got), std::signbit(want)) << v;
        const uint32_t back = libEncode(got, *f);
        ASSERT_TRUE(std::isnan(refDecode(back, *f))) << v;
        continue;
      }
      ASSERT_EQ(bitsOf(got), bitsOf(static_cast<float>(want))) << "format eb=" << f->eb << " " << v;
      ASSERT_EQ(libEncode(got, *f), v) << "round trip, eb=" << f->eb << " " << v;
    }
  }
}

// Every value's neighbourhood: the value, the midpoints to its neighbours and
// one fp32 ulp either side of them, so all rounding boundaries are exercised.
TEST(FloatConv, EncodeMatchesReferenceAtBoundaries) {
  for (const Fmt* f : kFormats) {
    const uint32_t count = 1u << (f->eb + f->mb);  // non-negative patterns
    std::vector<float> probes;
    for (uint32_t v = 0; v + 1 < count; ++v) {
      const double lo = refDecode(v, *f);
      const double hi = refDecode(v + 1, *f);
      if (std::isnan(lo) || std::isnan(hi) || std::isinf(hi)) continue;
      const float mid = static_cast<float>((lo + hi) / 2);  // exact in fp32
      for (float x : {static_cast<float>(lo), mid, std::nextafter(mid, 0.0f),
                      std::nextafter(mid, INFINITY)}) {
        probes.push_back(x);
        probes.push_back(-x);
      }
    }
    const double mx = refMaxFinite(*f);
    for (double x : {mx, mx * 1.0625, mx * 1.125, mx * 2, 1e30, 3e38}) {
      probes.push_back(static_cast<float>(x));
      probes.push_back(-static_cast<float>(x));
    }
    probes.push_back(INFINITY);
    probes.push_back(-INFINITY);
    probes.push_back(std::numeric_limits<float>::denorm_min());
    for (float x : probes) {
      ASSERT_EQ(libEncode(x, *f), refEncode(x, *f)) << "eb=" << f->eb << " x=" << x;
    }
  }
}

TEST(FloatConv, EncodeMatchesReferenceOnSweep) {
  for (const Fmt* f : kFormats) {
    for (uint64_t u = 0; u < (1ull << 32); u += 2039) {
      const float x = std::bit_cast<float>(static_cast<uint32_t>(u));
      const uint32_t got = libEncode(x, *f);
      const uint32_t want = refEncode(x, *f);
      if (std::isnan(x)) {
        ASSERT_TRUE(std::isnan(refDecode(got, *f)));
        ASSERT_EQ(got >> (f->eb + f->mb), want >> (f->eb + f->mb));
      } else {
        ASSERT_EQ(got, want) << "eb=" << f->eb << " bits=" << u;
      }
    }
  }
}

TEST(FloatConv, TiesToEven) {
  // fp16: 1 + 2^-11 lies halfway between 1 and 1 + 2^-10.
  EXPECT_EQ(fp::floatToHalf(1.0f + 0x1p-11f), 0x3c00);
  EXPECT_EQ(fp::floatToHalf(1.0f + 3 * 0x1p-11f), 0x3c02);
  EXPECT_EQ(fp::floatToHalf(0x1p-25f), 0x0000);      // half the smallest subnormal
  EXPECT_EQ(fp::floatToHalf(3 * 0x1p-25f), 0x0002);  // 1.5 subnormal ulps -> 2
  EXPECT_EQ(fp::floatToBf16(1.0f + 0x1p-8f), 0x3f80);
  EXPECT_EQ(fp::floatToBf16(1.0f + 3 * 0x1p-8f), 0x3f82);
  EXPECT_EQ(fp::floatToFp8e4m3(1.0625f), 0x38);  // between 1 and 1.125
  EXPECT_EQ(fp::floatToFp8e4m3(1.1875f), 0x3a);  // between 1.125 and 1.25
  EXPECT_EQ(fp::floatToFp8e4m3(0x1p-10f), 0x00);
  EXPECT_EQ(fp::floatToFp8e4m3(3 * 0x1p-10f), 0x02);
  EXPECT_EQ(fp::floatToFp8e5m2(1.125f), 0x3c);  // between 1 and 1.25
  EXPECT_EQ(fp::floatToFp8e5m2(1.375f), 0x3e);
}

TEST(FloatConv, OverflowAndSaturation) {
  EXPECT_EQ(fp::floatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(fp::floatToHalf(65519.99f), 0x7bff);
  EXPECT_EQ(fp::floatToHalf(65520.0f), 0x7c00);
  EXPECT_EQ(fp::floatToHalf(-1e10f), 0xfc00);
  EXPECT_EQ(fp::floatToBf16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(fp::floatToBf16(-INFINITY), 0xff80);
  EXPECT_EQ(fp::floatToFp8e4m3(448.0f), 0x7e);
  EXPECT_EQ(fp::floatToFp8e4m3(464.0f), 0x7e);
  EXPECT_EQ(fp::floatToFp8e4m3(1e6f), 0x7e);
  EXPECT_EQ(fp::floatToFp8e4m3(INFINITY), 0x7e);
  EXPECT_EQ(fp::floatToFp8e4m3(-INFINITY), 0xfe);
  EXPECT_EQ(fp::floatToFp8e4m3(NAN) & 0x7f, 0x7f);
  EXPECT_EQ(fp::fp8e4m3ToFloat(0x7e), 448.0f);
  EXPECT_EQ(fp::floatToFp8e5m2(57344.0f), 0x7b);
  EXPECT_EQ(fp::floatToFp8e5m2(61440.0f), 0x7b);
  EXPECT_EQ(fp::floatToFp8e5m2(-1e9f), 0xfb);
  EXPECT_EQ(fp::floatToFp8e5m2(INFINITY), 0x7c);
  EXPECT_EQ(fp::floatToFp8e5m2(-INFINITY), 0xfc);
  EXPECT_TRUE(std::isnan(fp::fp8e5m2ToFloat(fp::floatToFp8e5m2(NAN))));
}

#if TEST_X86
__attribute__((target("f16c"))) float hwHalfToFloat(uint16_t h) { return _cvtsh_ss(h); }
__attribute__((target("f16c"))) uint16_t hwFloatToHalf(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}

// The software fp16 path must give the same bits as F16C, NaNs included.
TEST(FloatConv, HalfMatchesF16c) {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("f16c")) GTEST_SKIP() << "no F16C";
  for (uint32_t h = 0; h < 65536; ++h) {
    ASSERT_EQ(bitsOf(fp::halfToFloat(static_cast<uint16_t>(h))),
              bitsOf(hwHalfToFloat(static_cast<uint16_t>(h))))
        << h;
  }
  for (uint64_t u = 0; u < (1ull << 32); u += 997) {
    const float x = std::bit_cast<float>(static_cast<uint32_t>(u));
    ASSERT_EQ(fp::floatToHalf(x), hwFloatToHalf(x)) << u;
  }
}
#endif

// ---- Reductions --------------------------------------------------------------

struct TypeInfo {
  tideDataType_t t;
  size_t size;
  bool isInt;
  bool isSigned;
  const Fmt* fmt;  // narrow floats
};

const TypeInfo kTypes[] = {
    {tideInt8, 1, true, true, nullptr},        {tideUint8, 1, true, false, nullptr},
    {tideInt32, 4, true, true, nullptr},       {tideUint32, 4, true, false, nullptr},
    {tideInt64, 8, true, true, nullptr},       {tideUint64, 8, true, false, nullptr},
    {tideFloat16, 2, false, false, &kF16},     {tideFloat32, 4, false, false, nullptr},
    {tideFloat64, 8, false, false, nullptr},   {tideBfloat16, 2, false, false, &kBf16},
    {tideFloat8e4m3, 1, false, false, &kE4m3}, {tideFloat8e5m2, 1, false, false, &kE5m2},
};

uint64_t loadBits(const void* p, size_t i, size_t size) {
  uint64_t v = 0;
  std::memcpy(&v, static_cast<const uint8_t*>(p) + i * size, size);
  return v;
}

__int128 intValue(uint64_t bits, const TypeInfo& ti) {
  if (!ti.isSigned) return static_cast<__int128>(bits);
  const int shift = 64 - static_cast<int>(ti.size) * 8;
  return static_cast<__int128>(static_cast<int64_t>(bits << shift) >> shift);
}

double floatValue(uint64_t bits, const TypeInfo& ti) {
  if (ti.fmt != nullptr) return refDecode(static_cast<uint32_t>(bits), *ti.fmt);
  if (ti.size == 4) return std::bit_cast<float>(static_cast<uint32_t>(bits));
  return std::bit_cast<double>(bits);
}

uint64_t encodeFloat(double v, const TypeInfo& ti) {
  if (ti.size == 8) return std::bit_cast<uint64_t>(v);
  const float f = static_cast<float>(v);  // the kernels combine in fp32
  if (ti.fmt == nullptr) return bitsOf(f);
  return refEncode(f, *ti.fmt);
}

// Checks one element; returns an empty string when it is right.
std::string checkElem(const TypeInfo& ti, RedOp op, uint64_t a, uint64_t b, uint64_t got) {
  const uint64_t mask = ti.size == 8 ? ~0ull : (1ull << (8 * ti.size)) - 1;
  if (ti.isInt) {
    const __int128 x = intValue(a, ti);
    const __int128 y = intValue(b, ti);
    __int128 r = 0;
    switch (op) {
      case RedOp::Sum:
        r = x + y;
        break;
      case RedOp::Prod:
        r = static_cast<__int128>(static_cast<unsigned __int128>(x) *
                                  static_cast<unsigned __int128>(y));
        break;
      case RedOp::Max:
        r = x > y ? x : y;
        break;
      case RedOp::Min:
        r = x < y ? x : y;
        break;
    }
    const uint64_t want = static_cast<uint64_t>(r) & mask;
    return want == got ? "" : "int mismatch want " + std::to_string(want);
  }
  const double x = floatValue(a, ti);
  const double y = floatValue(b, ti);
  const double gv = floatValue(got, ti);
  if (op == RedOp::Max || op == RedOp::Min) {
    if (got != a && got != b) return "max/min result is not an operand";
    if (std::isnan(x) || std::isnan(y)) return std::isnan(gv) ? "" : "NaN not propagated";
    if (x == y) return got == b ? "" : "equal operands: want the second";  // +0 vs -0
    const double want = op == RedOp::Max ? std::fmax(x, y) : std::fmin(x, y);
    return gv == want ? "" : "max/min value";
  }
  const double r = op == RedOp::Sum ? x + y : x * y;
  const uint64_t want = encodeFloat(r, ti);
  if (std::isnan(r)) return std::isnan(gv) ? "" : "want NaN";
  return want == got ? "" : "float mismatch want " + std::to_string(want);
}

std::vector<uint8_t> randomData(const TypeInfo& ti, size_t n, std::mt19937_64& rng) {
  std::vector<uint8_t> out(n * ti.size);
  std::uniform_real_distribution<double> nice(-100.0, 100.0);
  for (size_t i = 0; i < n; ++i) {
    uint64_t v = rng();
    const unsigned kind = static_cast<unsigned>(rng() % 8);
    if (!ti.isInt && kind < 4) {  // ordinary values; otherwise random bit patterns
      const double d = nice(rng) * (kind == 0 ? 1e-3 : 1.0);
      if (ti.size == 8)
        v = std::bit_cast<uint64_t>(d);
      else if (ti.fmt == nullptr)
        v = bitsOf(static_cast<float>(d));
      else
        v = refEncode(d, *ti.fmt);
    } else if (!ti.isInt && kind == 4) {
      const double specials[] = {0.0, -0.0, INFINITY, -INFINITY, std::nan(""), 1.0, -1.0};
      const double d = specials[rng() % 7];
      if (ti.size == 8)
        v = std::bit_cast<uint64_t>(d);
      else if (ti.fmt == nullptr)
        v = bitsOf(static_cast<float>(d));
      else
        v = refEncode(d, *ti.fmt);
    } else if (ti.isInt && kind == 0) {
      const uint64_t specials[] = {0, 1, ~0ull, 1ull << (8 * ti.size - 1),
                                   (1ull << (8 * ti.size - 1)) - 1};
      v = specials[rng() % 5];
    }
    std::memcpy(out.data() + i * ti.size, &v, ti.size);
  }
  return out;
}

std::vector<HostIsa> supportedIsas() {
  std::vector<HostIsa> out;
  for (HostIsa isa : {HostIsa::kBaseline, HostIsa::kAvx2}) {
    if (kernels::hostIsaSupported(isa)) out.push_back(isa);
  }
  return out;
}

constexpr RedOp kOps[] = {RedOp::Sum, RedOp::Prod, RedOp::Max, RedOp::Min};
constexpr size_t kSizes[] = {0, 1, 7, 33, 4097, 100003};

TEST(HostKernels, ReduceMatchesReference) {
  std::mt19937_64 rng(12345);
  for (const TypeInfo& ti : kTypes) {
    for (RedOp op : kOps) {
      for (size_t n : kSizes) {
        const auto a = randomData(ti, n, rng);
        const auto b = randomData(ti, n, rng);
        for (HostIsa isa : supportedIsas()) {
          const ReduceFn fn = kernels::hostReduceFn(ti.t, op, isa);
          ASSERT_NE(fn, nullptr);
          // Modes: 0 distinct (dst misaligned by one element), 1 dst == a,
          // 2 dst == b, 3 dst == a == b.
          for (int mode = 0; mode < 4; ++mode) {
            std::vector<uint8_t> dst((n + 1) * ti.size, 0xcd);
            std::vector<uint8_t> x = a;
            std::vector<uint8_t> y = mode == 3 ? a : b;
            void* d = dst.data() + ti.size;
            if (mode == 1 || mode == 3) d = x.data();
            if (mode == 2) d = y.data();
            const void* pa = x.data();
            const void* pb = mode == 3 ? x.data() : y.data();
            fn(d, pa, pb, n);
            for (size_t i = 0; i < n; ++i) {
              const uint64_t ea = loadBits(a.data(), i, ti.size);
              const uint64_t eb = loadBits(mode == 3 ? a.data() : b.data(), i, ti.size);
              const std::string err = checkElem(ti, op, ea, eb, loadBits(d, i, ti.size));
              ASSERT_EQ(err, "") << dtypeName(ti.t) << " op " << static_cast<int>(op) << " n " << n
                                 << " isa " << static_cast<int>(isa) << " mode " << mode << " i "
                                 << i << " a " << ea << " b " << eb;
            }
            if (mode == 0) {
              ASSERT_EQ(dst[0], 0xcd);  // nothing written before dst
            }
          }
        }
      }
    }
  }
}

// fp8: every pair of operands, every op, every instruction-set variant.
TEST(HostKernels, Fp8AllPairs) {
  for (const TypeInfo& ti : kTypes) {
    if (ti.size != 1 || ti.isInt) continue;
    std::vector<uint8_t> a(65536), b(65536), d(65536);
    for (uint32_t i = 0; i < 65536; ++i) {
      a[i] = static_cast<uint8_t>(i >> 8);
      b[i] = static_cast<uint8_t>(i);
    }
    for (HostIsa isa : supportedIsas()) {
      for (RedOp op : kOps) {
        kernels::hostReduceFn(ti.t, op, isa)(d.data(), a.data(), b.data(), d.size());
        for (uint32_t i = 0; i < 65536; ++i) {
          ASSERT_EQ(checkElem(ti, op, a[i], b[i], d[i]), "")
              << dtypeName(ti.t) << " op " << static_cast<int>(op) << " isa "
              << static_cast<int>(isa) << " a " << int{a[i]} << " b " << int{b[i]};
        }
      }
    }
  }
}

TEST(HostKernels, MaxMinPropagateNaN) {
  for (const TypeInfo& ti : kTypes) {
    if (ti.isInt) continue;
    const uint64_t nan = encodeFloat(std::nan(""), ti);
    const uint64_t one = encodeFloat(1.0, ti);
    for (HostIsa isa : supportedIsas()) {
      for (RedOp op : {RedOp::Max, RedOp::Min}) {
        const ReduceFn fn = kernels::hostReduceFn(ti.t, op, isa);
        // 40 elements: the vector loops and the scalar tail both see NaNs.
        std::vector<uint8_t> a(40 * ti.size), b(40 * ti.size), d(40 * ti.size);
        for (size_t i = 0; i < 40; ++i) {
          std::memcpy(&a[i * ti.size], (i % 2) ? &nan : &one, ti.size);
          std::memcpy(&b[i * ti.size], (i % 2) ? &one : &nan, ti.size);
        }
        fn(d.data(), a.data(), b.data(), 40);
        for (size_t i = 0; i < 40; ++i) {
          EXPECT_TRUE(std::isnan(floatValue(loadBits(d.data(), i, ti.size), ti)))
              << dtypeName(ti.t) << " " << i;
        }
      }
    }
  }
}

TEST(HostKernels, InvalidArgumentsGiveNull) {
  EXPECT_EQ(kernels::hostReduceFn(static_cast<tideDataType_t>(12), RedOp::Sum, HostIsa::kBaseline),
            nullptr);
  EXPECT_EQ(kernels::hostReduceFn(static_cast<tideDataType_t>(-1), RedOp::Sum, HostIsa::kBaseline),
            nullptr);
  EXPECT_EQ(kernels::hostReduceFn(tideFloat32, static_cast<RedOp>(4), HostIsa::kBaseline), nullptr);
}

TEST(HostKernels, RegisteredTable) {
  const KernelTable* t = kernelsFor(MemType::Host);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->mem, MemType::Host);
  EXPECT_EQ(t, &kernels::hostKernelTable());
  for (const TypeInfo& ti : kTypes) {
    for (RedOp op : kOps) EXPECT_NE(t->reduceFn(ti.t, op), nullptr);
  }
  EXPECT_EQ(t->reduceFn(tideNumTypes, RedOp::Sum), nullptr);
  const float a[3] = {1, 2, 3}, b[3] = {10, 20, 30};
  float d[3];
  t->reduceFn(tideFloat32, RedOp::Sum)(d, a, b, 3);
  EXPECT_EQ(d[2], 33.0f);
  char src[100], dst[100];
  for (int i = 0; i < 100; ++i) src[i] = static_cast<char>(i * 7);
  t->copy(dst, src, sizeof(src));
  EXPECT_EQ(std::memcmp(dst, src, sizeof(src)), 0);
  t->copy(nullptr, nullptr, 0);
}

TEST(HostKernels, ScaleMatchesReference) {
  std::mt19937_64 rng(777);
  for (const TypeInfo& ti : kTypes) {
    if (ti.isInt) continue;
    for (double s : {0.25, 1.0 / 3, 1.0 / 7, 3.0, -0.5, 1e-30}) {
      for (size_t n : kSizes) {
        const auto src = randomData(ti, n, rng);
        for (HostIsa isa : supportedIsas()) {
          for (bool inPlace : {false, true}) {
            std::vector<uint8_t> dst = src;
            if (!inPlace) std::fill(dst.begin(), dst.end(), 0);
            kernels::hostScale(dst.data(), inPlace ? dst.data() : src.data(), n, ti.t, s, isa);
            for (size_t i = 0; i < n; ++i) {
              const double x = floatValue(loadBits(src.data(), i, ti.size), ti);
              const double r =
                  ti.size == 8 ? x * s : x * static_cast<double>(static_cast<float>(s));
              const uint64_t got = loadBits(dst.data(), i, ti.size);
              if (std::isnan(r)) {
                ASSERT_TRUE(std::isnan(floatValue(got, ti)));
              } else {
                ASSERT_EQ(got, encodeFloat(r, ti))
                    << dtypeName(ti.t) << " s " << s << " i " << i << " x " << x;
              }
            }
          }
        }
      }
    }
  }
}

TEST(HostKernels, DivideMatchesReference) {
  const KernelTable& t = kernels::hostKernelTable();
  std::mt19937_64 rng(99);
  for (const TypeInfo& ti : kTypes) {
    if (!ti.isInt) continue;
    const uint64_t maxv = ti.isSigned ? (1ull << (8 * ti.size - 1)) - 1
                                      : (ti.size == 8 ? ~0ull : (1ull << (8 * ti.size)) - 1);
    for (uint64_t div :
         {0ull, 1ull, 2ull, 3ull, 7ull, 1000ull, static_cast<unsigned long long>(maxv),
          static_cast<unsigned long long>(maxv + 1), ~0ull}) {
      for (size_t n : {size_t{0}, size_t{33}, size_t{4097}}) {
        const auto src = randomData(ti, n, rng);
        for (bool inPlace : {false, true}) {
          std::vector<uint8_t> dst = src;
          t.divide(dst.data(), inPlace ? dst.data() : src.data(), n, ti.t, div);
          for (size_t i = 0; i < n; ++i) {
            const uint64_t xb = loadBits(src.data(), i, ti.size);
            uint64_t want = xb;
            if (div != 0) {
              const __int128 q = intValue(xb, ti) / static_cast<__int128>(div);
              want =
                  static_cast<uint64_t>(q) & (ti.size == 8 ? ~0ull : (1ull << (8 * ti.size)) - 1);
            }
            ASSERT_EQ(loadBits(dst.data(), i, ti.size), want)
                << dtypeName(ti.t) << " div " << div << " x " << xb;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace tide
