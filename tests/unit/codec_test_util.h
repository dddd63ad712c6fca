// Helpers of the codec kernel tests (test_codec_kernels.cc, test_codec_topk.cc).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "algorithms/compression/codec_kernels.h"

namespace tide::codec::test {

inline uint32_t bitsOf(float f) { return std::bit_cast<uint32_t>(f); }
inline float floatOf(uint32_t u) { return std::bit_cast<float>(u); }

// Equal bits, or both NaN (which NaN results when two NaNs meet is unspecified).
inline bool sameBits(float a, float b) {
  return bitsOf(a) == bitsOf(b) || (std::isnan(a) && std::isnan(b));
}

// Index of the first element where a and b differ per sameBits; -1 if none.
inline long firstDiff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!sameBits(a[i], b[i])) return static_cast<long>(i);
  }
  return -1;
}

// Gradient-like data: normal values of varying scale per 64-element stretch,
// with occasional outliers and all-zero stretches.
inline std::vector<float> gradients(size_t n, uint32_t seed, bool specials = false) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> ud(0.0f, 1.0f);
  std::vector<float> x(n);
  float scale = 1.0f;
  bool zero = false;
  for (size_t i = 0; i < n; ++i) {
    if (i % 64 == 0) {
      scale = std::ldexp(1.0f, static_cast<int>(rng() % 40) - 30);
      zero = rng() % 16 == 0;
    }
    float v = zero ? 0.0f : nd(rng) * scale;
    if (ud(rng) < 0.002f) v *= 1000.0f;  // outlier
    if (specials) {
      const uint32_t r = rng() % 4096;
      if (r == 0) v = NAN;
      if (r == 1) v = INFINITY;
      if (r == 2) v = -INFINITY;
      if (r == 3) v = floatOf(0x00000001u + (rng() & 0x7fffffu));  // subnormal
    }
    x[i] = v;
  }
  return x;
}

// The AVX2 variant, or skip the test.
#define TIDE_REQUIRE_AVX2()                                                     \
  do {                                                                          \
    if (!::tide::codec::implSupported(::tide::codec::Impl::kAvx2)) {            \
      GTEST_SKIP() << "this CPU has no AVX2 + F16C; only the scalar code runs"; \
    }                                                                           \
  } while (0)

}  // namespace tide::codec::test
