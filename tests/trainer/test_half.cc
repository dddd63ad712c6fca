// Unit tests of mixed precision's formats (trainer/ops/half.h): the fast
// fp32 <-> bf16 / fp16 conversions against their ref:: versions, bit for bit:
// every 16-bit pattern decoded, every pattern's value and every midpoint
// between neighbours (the ties) encoded, 4M random fp32 bit patterns of every
// exponent, the specials; the 16-bit accumulate; the sum of squares and its
// overflow flag.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "ops/half.h"

namespace tide_train::ops {
namespace {

bool is_nan16(Half h, uint16_t b) {
  return h == Half::kBf16 ? (b & 0x7fffu) > 0x7f80u : (b & 0x7fffu) > 0x7c00u;
}

class HalfTest : public ::testing::TestWithParam<Half> {};

TEST_P(HalfTest, DecodesEveryPatternExactly) {
  const Half h = GetParam();
  std::vector<uint16_t> all(65536);
  for (uint32_t b = 0; b < 65536; ++b) all[b] = static_cast<uint16_t>(b);
  std::vector<float> out(all.size());
  from_half(h, all.data(), out.data(), all.size());
  for (uint32_t b = 0; b < 65536; ++b) {
    const float want = ref::from_half(h, static_cast<uint16_t>(b));
    if (is_nan16(h, static_cast<uint16_t>(b))) {
      EXPECT_TRUE(std::isnan(out[b]) && std::isnan(want)) << std::hex << b;
    } else {
      ASSERT_EQ(std::bit_cast<uint32_t>(out[b]), std::bit_cast<uint32_t>(want)) << std::hex << b;
    }
  }
}

TEST_P(HalfTest, EncodesValuesTiesAndRandomBitsAsTheReference) {
  const Half h = GetParam();
  std::vector<float> in;
  // Every finite pattern's value, and the midpoint to the next (a tie) and
  // points just either side of it.
  for (uint32_t b = 0; b < 0x7fff; ++b) {
    const uint16_t lo = static_cast<uint16_t>(b);
    if (is_nan16(h, lo) || is_nan16(h, static_cast<uint16_t>(b + 1))) continue;
    const double a = ref::from_half(h, lo), c = ref::from_half(h, static_cast<uint16_t>(b + 1));
    if (std::isinf(a)) continue;
    const double mid =
        std::isinf(c) ? a + (a - ref::from_half(h, static_cast<uint16_t>(b - 1))) / 2 : (a + c) / 2;
    for (double v : {a, mid}) {
      const float f = static_cast<float>(v);
      in.push_back(f);
      in.push_back(-f);
      in.push_back(std::nextafter(f, 0.0f));
      in.push_back(std::nextafter(f, INFINITY));
    }
  }
  std::mt19937 rng(7);
  for (int i = 0; i < (1 << 22); ++i)
    in.push_back(std::bit_cast<float>(static_cast<uint32_t>(rng())));
  for (float f : {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 3.4028235e38f, 65504.0f, 65519.99f,
                  65520.0f, 5.96e-8f, 2.98e-8f, 2.99e-8f, 6.1035e-5f, 1e-45f})
    in.push_back(f);
  std::vector<uint16_t> out(in.size());
  to_half(h, in.data(), out.data(), in.size());
  size_t bad = 0;
  for (size_t i = 0; i < in.size() && bad < 5; ++i) {
    const uint16_t want = ref::to_half(h, in[i]);
    if (std::isnan(in[i])) {
      EXPECT_TRUE(is_nan16(h, out[i])) << in[i];
      continue;
    }
    if (out[i] != want) {
      ++bad;
      ADD_FAILURE() << name(h) << " of " << in[i] << " (bits " << std::hex
                    << std::bit_cast<uint32_t>(in[i]) << "): " << out[i] << ", want " << want;
    }
  }
}

TEST_P(HalfTest, AccumulatesInSixteenBitsAndFlagsOverflow) {
  const Half h = GetParam();
  std::mt19937 rng(11);
  std::normal_distribution<float> d(0.0f, 3.0f);
  const size_t n = 5000;
  std::vector<float> x(n), y(n);
  for (size_t i = 0; i < n; ++i) {
    x[i] = d(rng);
    y[i] = d(rng);
  }
  std::vector<uint16_t> acc(n);
  to_half(h, x.data(), acc.data(), n);
  std::vector<uint16_t> want(n);
  for (size_t i = 0; i < n; ++i) want[i] = ref::to_half(h, ref::from_half(h, acc[i]) + y[i]);
  add_to_half(h, y.data(), acc.data(), n);
  EXPECT_EQ(acc, want);
  double s = 0.0;
  for (uint16_t b : acc) s += static_cast<double>(ref::from_half(h, b)) * ref::from_half(h, b);
  bool over = false;
  EXPECT_NEAR(half_sum_squares(h, acc.data(), n, &over), s, 1e-5 * s);
  EXPECT_FALSE(over);
  for (float bad : {INFINITY, -INFINITY, NAN}) {
    std::vector<uint16_t> v = acc;
    v[n / 2] = ref::to_half(h, bad);
    over = false;
    half_sum_squares(h, v.data(), n, &over);
    EXPECT_TRUE(over) << bad;
  }
  std::vector<uint16_t> v = acc;
  v[7] = ref::to_half(h, 65504.0f);
  over = false;
  half_sum_squares(h, v.data(), n, &over);
  EXPECT_EQ(over, h == Half::kFp16);  // fp16's saturation point; bf16 has range to spare
}

INSTANTIATE_TEST_SUITE_P(Formats, HalfTest, ::testing::Values(Half::kBf16, Half::kFp16),
                         [](const auto& info) { return std::string(name(info.param)); });

}  // namespace
}  // namespace tide_train::ops
