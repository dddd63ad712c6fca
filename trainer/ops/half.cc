// fp32 <-> bf16 / fp16 (ops/half.h).
#include "ops/half.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "ops/vec_math.h"

namespace tide_train::ops {

namespace {

// bf16: the upper half of the fp32, rounded to nearest even (a carry out of
// the mantissa bumps the exponent: the largest values become inf). NaNs are
// made quiet. Branch free (selects) so the loops vectorize.
[[gnu::always_inline]] inline uint16_t bf16_of(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t quiet = (u >> 16) | 0x40u;
  const uint32_t m = 0u - static_cast<uint32_t>((u & 0x7fffffffu) > 0x7f800000u);
  return static_cast<uint16_t>((quiet & m) | (rounded & ~m));
}
[[gnu::always_inline]] inline float bf16_value(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}
// fp16 through the compiler's _Float16 (F16C's vcvtps2ph/vcvtph2ps in the
// AVX2 and AVX-512 clones; IEEE rounding, overflow and subnormals).
[[gnu::always_inline]] inline uint16_t fp16_of(float f) {
  return std::bit_cast<uint16_t>(static_cast<_Float16>(f));
}
[[gnu::always_inline]] inline float fp16_value(uint16_t h) {
  return static_cast<float>(std::bit_cast<_Float16>(h));
}

TIDE_OPS_CLONES void bf16_from_f32(const float* __restrict in, uint16_t* __restrict out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = bf16_of(in[i]);
}
TIDE_OPS_CLONES void fp16_from_f32(const float* __restrict in, uint16_t* __restrict out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = fp16_of(in[i]);
}
TIDE_OPS_CLONES void f32_from_bf16(const uint16_t* __restrict in, float* __restrict out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = bf16_value(in[i]);
}
TIDE_OPS_CLONES void f32_from_fp16(const uint16_t* __restrict in, float* __restrict out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = fp16_value(in[i]);
}
TIDE_OPS_CLONES void bf16_add(const float* __restrict in, uint16_t* __restrict acc, size_t n) {
  for (size_t i = 0; i < n; ++i) acc[i] = bf16_of(bf16_value(acc[i]) + in[i]);
}
TIDE_OPS_CLONES void fp16_add(const float* __restrict in, uint16_t* __restrict acc, size_t n) {
  for (size_t i = 0; i < n; ++i) acc[i] = fp16_of(fp16_value(acc[i]) + in[i]);
}

// One 1024-element block: Σ x² in 16 float lanes, and the largest magnitude's
// bits (inf and NaN above every finite one).
template <bool kBf16>
TIDE_OPS_CLONES double block_squares(const uint16_t* in, size_t n, uint32_t* most) {
  float lanes[16] = {};
  uint32_t top = 0;
  size_t k = 0;
  for (; k + 16 <= n; k += 16)
    for (int j = 0; j < 16; ++j) {
      const float x = kBf16 ? bf16_value(in[k + j]) : fp16_value(in[k + j]);
      lanes[j] += x * x;
      top = std::max<uint32_t>(top, in[k + j] & 0x7fffu);
    }
  double s = 0.0;
  for (float x : lanes) s += x;
  for (; k < n; ++k) {
    const double x = kBf16 ? bf16_value(in[k]) : fp16_value(in[k]);
    s += x * x;
    top = std::max<uint32_t>(top, in[k] & 0x7fffu);
  }
  *most = std::max(*most, top);
  return s;
}

// Encodes a value already rounded to the format (finite, or ±inf) field by
// field: frac_bits fraction bits, exponent bias `bias`, smallest normal
// exponent emin.
uint16_t encode(double r, bool negative, int frac_bits, int bias, int emin) {
  const uint32_t sign = negative ? 0x8000u : 0u;
  const uint32_t exp_ones = (1u << (15 - frac_bits)) - 1u;
  if (std::isinf(r)) return static_cast<uint16_t>(sign | (exp_ones << frac_bits));
  const double a = std::fabs(r);
  if (a == 0.0) return static_cast<uint16_t>(sign);
  int e2 = 0;
  std::frexp(a, &e2);  // a = m · 2^e2, m in [0.5, 1)
  const int e = e2 - 1;
  if (e < emin)  // subnormal: a multiple of 2^(emin - frac_bits)
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::ldexp(a, frac_bits - emin)));
  const auto frac =
      static_cast<uint32_t>(std::ldexp(a, frac_bits - e) - std::ldexp(1.0, frac_bits));
  return static_cast<uint16_t>(sign | (static_cast<uint32_t>(e + bias) << frac_bits) | frac);
}

struct Format {
  int frac_bits, bias, emin, emax;
};
constexpr Format kBf16Format{7, 127, -126, 127};
constexpr Format kFp16Format{10, 15, -14, 15};

}  // namespace

const char* name(Half h) { return h == Half::kBf16 ? "bf16" : "fp16"; }

void to_half(Half h, const float* in, uint16_t* out, size_t n) {
  (h == Half::kBf16 ? bf16_from_f32 : fp16_from_f32)(in, out, n);
}

void from_half(Half h, const uint16_t* in, float* out, size_t n) {
  (h == Half::kBf16 ? f32_from_bf16 : f32_from_fp16)(in, out, n);
}

void add_to_half(Half h, const float* in, uint16_t* acc, size_t n) {
  (h == Half::kBf16 ? bf16_add : fp16_add)(in, acc, n);
}

double half_sum_squares(Half h, const uint16_t* in, size_t n, bool* overflow) {
  double s = 0.0;
  uint32_t most = 0;
  for (size_t at = 0; at < n; at += 1024) {
    const size_t len = std::min<size_t>(1024, n - at);
    s += h == Half::kBf16 ? block_squares<true>(in + at, len, &most)
                          : block_squares<false>(in + at, len, &most);
  }
  // bf16: inf/NaN have the all-ones exponent 0x7f80; fp16: 0x7c00, and
  // 0x7bff (65504) is where a saturating sum stops.
  const uint32_t limit = h == Half::kBf16 ? 0x7f80u : 0x7bffu;
  if (overflow != nullptr && most >= limit) *overflow = true;
  return s;
}

namespace ref {

uint16_t to_half(Half h, float x) {
  const Format f = h == Half::kBf16 ? kBf16Format : kFp16Format;
  const uint32_t exp_ones = (1u << (15 - f.frac_bits)) - 1u;
  if (std::isnan(x))  // a quiet NaN, sign kept
    return static_cast<uint16_t>((std::signbit(x) ? 0x8000u : 0u) | (exp_ones << f.frac_bits) |
                                 (1u << (f.frac_bits - 1)));
  const bool neg = std::signbit(x);
  const double a = std::fabs(static_cast<double>(x));
  if (std::isinf(a)) return encode(a, neg, f.frac_bits, f.bias, f.emin);
  if (a == 0.0) return encode(0.0, neg, f.frac_bits, f.bias, f.emin);
  int e2 = 0;
  std::frexp(a, &e2);
  const int e = std::max(e2 - 1, f.emin);
  const double quantum = std::ldexp(1.0, e - f.frac_bits);
  double r = std::nearbyint(a / quantum) * quantum;  // ties to even (the default mode)
  if (r >= std::ldexp(1.0, f.emax + 1)) r = INFINITY;
  return encode(r, neg, f.frac_bits, f.bias, f.emin);
}

float from_half(Half h, uint16_t bits) {
  const Format f = h == Half::kBf16 ? kBf16Format : kFp16Format;
  const uint32_t exp_ones = (1u << (15 - f.frac_bits)) - 1u;
  const bool neg = (bits & 0x8000u) != 0;
  const uint32_t ex = (bits >> f.frac_bits) & exp_ones;
  const uint32_t frac = bits & ((1u << f.frac_bits) - 1u);
  double v = 0.0;
  if (ex == exp_ones)
    v = frac != 0 ? NAN : INFINITY;
  else if (ex == 0)
    v = std::ldexp(static_cast<double>(frac), f.emin - f.frac_bits);
  else
    v = std::ldexp(1.0 + std::ldexp(static_cast<double>(frac), -f.frac_bits),
                   static_cast<int>(ex) - f.bias);
  return static_cast<float>(neg ? -v : v);
}

}  // namespace ref

}  // namespace tide_train::ops
