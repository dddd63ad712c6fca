// Test-side encode/decode of the narrow float formats (IEEE fp16, bfloat16,
// OCP fp8 E4M3 and E5M2), written independently of the library so the tests
// check it rather than trust it. Encoding rounds to nearest even. Overflow
// gives infinity for formats that have it and NaN for E4M3 (which has none).
#pragma once

#include <cmath>
#include <cstdint>

namespace tide_test {

struct MiniFormat {
  int ebits;     // exponent bits
  int mbits;     // stored mantissa bits
  bool has_inf;  // IEEE-style: all-ones exponent is inf/NaN
};

inline constexpr MiniFormat kFp16{5, 10, true};
inline constexpr MiniFormat kBf16{8, 7, true};
inline constexpr MiniFormat kE4m3{4, 3, false};  // all-ones exponent is normal except S.1111.111
inline constexpr MiniFormat kE5m2{5, 2, true};

inline double DecodeMini(uint32_t bits, MiniFormat f) {
  const int bias = (1 << (f.ebits - 1)) - 1;
  const uint32_t emask = (1u << f.ebits) - 1, mmask = (1u << f.mbits) - 1;
  const bool neg = (bits >> (f.ebits + f.mbits)) & 1;
  const uint32_t e = (bits >> f.mbits) & emask, m = bits & mmask;
  double v;
  if (e == 0) {
    v = std::ldexp(static_cast<double>(m), 1 - bias - f.mbits);
  } else if (f.has_inf && e == emask) {
    v = m == 0 ? INFINITY : NAN;
  } else if (!f.has_inf && e == emask && m == mmask) {
    v = NAN;
  } else {
    v = std::ldexp(1.0 + std::ldexp(static_cast<double>(m), -f.mbits), static_cast<int>(e) - bias);
  }
  return neg ? -v : v;
}

inline uint32_t EncodeMini(double v, MiniFormat f) {
  const int bias = (1 << (f.ebits - 1)) - 1;
  const uint32_t emask = (1u << f.ebits) - 1, mmask = (1u << f.mbits) - 1;
  const uint32_t sign = std::signbit(v) ? 1u << (f.ebits + f.mbits) : 0u;
  const uint32_t nan = sign | (emask << f.mbits) | mmask;
  if (std::isnan(v)) return nan;
  double a = std::fabs(v);
  // Largest finite exponent field and mantissa.
  const uint32_t emax_field = f.has_inf ? emask - 1 : emask;
  const uint32_t mmax = f.has_inf ? mmask : mmask - 1;
  const uint32_t overflow = f.has_inf ? (sign | (emask << f.mbits)) : nan;
  if (std::isinf(a)) return overflow;
  if (a == 0) return sign;
  int e2;
  std::frexp(a, &e2);  // a = frac * 2^e2, frac in [0.5, 1)
  int exp = e2 - 1;    // a = 1.x * 2^exp
  uint64_t code;
  if (exp < 1 - bias) {
    // Subnormal: units of 2^(1-bias-mbits). A carry into 1 << mbits lands
    // exactly on the smallest normal's encoding.
    code = static_cast<uint64_t>(std::nearbyint(std::ldexp(a, bias - 1 + f.mbits)));
  } else {
    double q = std::nearbyint(std::ldexp(a, f.mbits - exp));  // in [2^mbits, 2^(mbits+1)]
    uint64_t m = static_cast<uint64_t>(q);
    if (m == (2ull << f.mbits)) {
      m >>= 1;
      ++exp;
    }
    uint64_t efield = static_cast<uint64_t>(exp + bias);
    if (efield > emax_field || (efield == emax_field && (m & mmask) > mmax)) return overflow;
    code = (efield << f.mbits) | (m & mmask);
  }
  return sign | static_cast<uint32_t>(code);
}

}  // namespace tide_test
