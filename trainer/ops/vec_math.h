// Shared scalar helpers of the fast kernels in trainer/ops: the function
// multiversioning macro, a branch-free float exp, and order keys that turn a
// float max into a vectorizable integer max. Private to trainer/ops.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>

namespace tide_train::ops {

// The loops that evaluate exp are also compiled for AVX2 and AVX-512 CPUs
// (GCC function multiversioning: the dynamic loader picks the clone for the
// machine); the baseline x86-64 target has only 4-wide SSE2 and no FMA, and
// these loops are compute bound. Not under TSan: its runtime is not up yet
// when the clones' resolvers run (at relocation), and they crash.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define TIDE_OPS_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define TIDE_OPS_CLONES
#endif

// exp(x) to about 1 ulp for x ≤ 88 (callers pass x ≤ 0); results below the
// normal range come out as denormals, then 0 (x is clamped at −110, −inf
// included); NaN stays NaN. Branch free so that loops over it vectorize: the
// clamp is an integer min on the bits (a float compare would not if-convert
// under -ftrapping-math), 2ⁿ is applied as two normal factors 2^⌊n/2⌋·2^⌈n/2⌉.
[[gnu::always_inline]] inline float fast_exp(float x) {
  constexpr uint32_t kLowBits = 0xC2DC0000u;  // −110.0f; any larger bits are below it
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint32_t nan = (u & 0x7FFFFFFFu) > 0x7F800000u ? 0x7FC00000u : 0u;
  x = std::bit_cast<float>(std::min(u, kLowBits));
  constexpr float kRound = 12582912.0f;  // 1.5·2²³: adding it rounds to an integer
  float k = x * 1.44269504f + kRound;
  const int32_t n = std::bit_cast<int32_t>(k) - std::bit_cast<int32_t>(kRound);
  k -= kRound;
  float r = x - k * 0.693145752f;  // ln 2 in two pieces (Cody-Waite)
  r -= k * 1.42860677e-6f;
  float p = 1.0f / 5040.0f;  // Taylor to degree 7 on |r| ≤ ln2/2
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t n1 = n >> 1;
  const int32_t n2 = n - n1;
  const float e =
      p * std::bit_cast<float>((n1 + 127) << 23) * std::bit_cast<float>((n2 + 127) << 23);
  return std::bit_cast<float>(std::bit_cast<uint32_t>(e) | nan);
}

// A float's bits as an int32 that orders like the float (negative values get
// their magnitude bits flipped); its own inverse. Integer max over these keys
// vectorizes, std::max over floats does not (NaN rules), and it is branch free.
[[gnu::always_inline]] inline int32_t order_key(float x) {
  const int32_t b = std::bit_cast<int32_t>(x);
  return b ^ ((b >> 31) & 0x7FFFFFFF);
}
[[gnu::always_inline]] inline float from_order_key(int32_t k) {
  return std::bit_cast<float>(k ^ ((k >> 31) & 0x7FFFFFFF));
}

}  // namespace tide_train::ops
