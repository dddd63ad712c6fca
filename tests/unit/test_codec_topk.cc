// Top-k codec kernels (algorithms/compression/codec_kernels.h) and the
// error-feedback state (error_feedback.h): hand cases of the order and its
// tie rule, exact == sampled == a brute-force reference, scatter, feedback.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "algorithms/compression/codec_kernels.h"
#include "algorithms/compression/error_feedback.h"
#include "codec_test_util.h"

namespace tide::codec {
namespace {

using test::bitsOf;
using test::gradients;

std::vector<TopkPair> run(const std::vector<float>& x, size_t k, TopkMethod m,
                          Impl impl = bestImpl()) {
  TopkScratch s;
  std::vector<TopkPair> out(std::min(k, x.size()), TopkPair{0xdeadbeef, -1.0f});
  EXPECT_TRUE(topk(x.data(), x.size(), k, out.data(), s, m, impl));
  return out;
}

// Brute force: sort every index by (magnitude bits desc, index asc).
std::vector<TopkPair> reference(const std::vector<float>& x, size_t k) {
  std::vector<uint32_t> idx(x.size());
  std::iota(idx.begin(), idx.end(), 0u);
  std::stable_sort(idx.begin(), idx.end(), [&](uint32_t a, uint32_t b) {
    return (bitsOf(x[a]) & 0x7fffffffu) > (bitsOf(x[b]) & 0x7fffffffu);
  });
  idx.resize(std::min(k, x.size()));
  std::sort(idx.begin(), idx.end());
  std::vector<TopkPair> out;
  out.reserve(idx.size());
  for (const uint32_t i : idx) out.push_back({i, x[i]});
  return out;
}

bool samePairs(const std::vector<TopkPair>& a, const std::vector<TopkPair>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].index != b[i].index || bitsOf(a[i].value) != bitsOf(b[i].value)) return false;
  }
  return true;
}

// Byte-for-byte equal floats (NaN payloads and the sign of zero included).
bool sameBytes(const float* a, const float* b, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (bitsOf(a[i]) != bitsOf(b[i])) return false;
  }
  return true;
}

std::vector<uint32_t> indices(const std::vector<TopkPair>& p) {
  std::vector<uint32_t> r;
  r.reserve(p.size());
  for (const auto& q : p) r.push_back(q.index);
  return r;
}

TEST(CodecTopk, HandCasesAndTieRule) {
  const std::vector<float> x = {1, -5, 3, -3, 0, 5};
  for (const TopkMethod m : {TopkMethod::kExact, TopkMethod::kSampled}) {
    const auto p = run(x, 3, m);
    // |5| twice (indices 1 and 5), then |3| at 2 and 3: the lower index wins.
    EXPECT_EQ(indices(p), std::vector<uint32_t>({1, 2, 5}));
    EXPECT_EQ(p[0].value, -5.0f);
    EXPECT_EQ(p[1].value, 3.0f);
    EXPECT_EQ(p[2].value, 5.0f);
    // NaN ranks above Inf, Inf above any finite value; -0 equals +0.
    EXPECT_EQ(indices(run({INFINITY, 1, NAN, -INFINITY}, 1, m)), std::vector<uint32_t>({2}));
    EXPECT_EQ(indices(run({INFINITY, 1, NAN, -INFINITY}, 3, m)), std::vector<uint32_t>({0, 2, 3}));
    EXPECT_EQ(indices(run({-0.0f, 0.0f, 0.0f}, 1, m)), std::vector<uint32_t>({0}));
    EXPECT_EQ(bitsOf(run({-0.0f, 0.0f}, 1, m)[0].value), 0x80000000u);
  }
}

TEST(CodecTopk, CountsZeroOneAndAll) {
  TopkScratch s;
  TopkPair p{};
  EXPECT_TRUE(topk(nullptr, 0, 5, nullptr, s));
  const float one = -2.0f;
  EXPECT_TRUE(topk(&one, 1, 0, nullptr, s));
  EXPECT_TRUE(topk(&one, 1, 1, &p, s));
  EXPECT_EQ(p.index, 0u);
  EXPECT_EQ(p.value, -2.0f);
  EXPECT_FALSE(topk(nullptr, 4, 1, &p, s));
  const std::vector<float> x = {3, 1, 2};
  for (const TopkMethod m : {TopkMethod::kExact, TopkMethod::kSampled}) {
    EXPECT_EQ(indices(run(x, 10, m)), std::vector<uint32_t>({0, 1, 2}));  // k > n: all
  }
}

// Inputs where the sampled threshold is easy, hard, or useless.
std::vector<std::vector<float>> hardInputs(size_t n) {
  std::vector<std::vector<float>> r;
  r.push_back(gradients(n, 1, true));
  std::vector<float> levels = gradients(n, 2);  // many exact ties
  for (auto& v : levels) v = std::round(v * 4.0f) / 4.0f;
  r.push_back(levels);
  r.emplace_back(n, 1.5f);             // all equal
  std::vector<float> sparse(n, 0.0f);  // fewer non-zeros than k
  for (size_t i = 0; i < n; i += 997) sparse[i] = static_cast<float>(i % 13) - 6.0f;
  r.push_back(sparse);
  std::vector<float> sorted = gradients(n, 3);  // the largest at the end
  std::sort(sorted.begin(), sorted.end(),
            [](float a, float b) { return std::fabs(a) < std::fabs(b); });
  r.push_back(sorted);
  std::vector<float> clustered(n, 0.001f);  // the large ones in one place
  for (size_t i = n / 3; i < n / 3 + n / 50; ++i) clustered[i] = 10.0f + static_cast<float>(i % 7);
  r.push_back(clustered);
  return r;
}

TEST(CodecTopk, ExactAndSampledAgreeWithReference) {
  const size_t n = (size_t{1} << 16) + 13;
  for (const auto& x : hardInputs(n)) {
    for (const size_t k : {size_t{1}, size_t{7}, n / 1000, n / 100, n / 8, n / 2}) {
      const auto ref = reference(x, k);
      ASSERT_TRUE(samePairs(run(x, k, TopkMethod::kExact, Impl::kScalar), ref)) << k;
      ASSERT_TRUE(samePairs(run(x, k, TopkMethod::kSampled, Impl::kScalar), ref)) << k;
      ASSERT_TRUE(samePairs(run(x, k, TopkMethod::kSampled, bestImpl()), ref)) << k;
      ASSERT_TRUE(samePairs(run(x, k, TopkMethod::kAuto), ref)) << k;
    }
  }
}

TEST(CodecTopk, ScratchIsReusable) {
  TopkScratch s;
  for (uint32_t seed = 0; seed < 6; ++seed) {
    const size_t n = 40000 + seed * 5000;
    const std::vector<float> x = gradients(n, seed);
    const size_t k = 100 + seed * 700;
    std::vector<TopkPair> out(k);
    ASSERT_TRUE(topk(x.data(), n, k, out.data(), s, TopkMethod::kSampled));
    EXPECT_TRUE(samePairs(out, reference(x, k))) << seed;
  }
}

TEST(CodecTopk, ScatterAcc) {
  std::vector<float> dense = {1, 1, 1, 1};
  const TopkPair pairs[] = {{0, 2.0f}, {3, -1.0f}, {0, 0.5f}, {4, 9.0f}, {0xffffffffu, 9.0f}};
  scatterAcc(pairs, 5, dense.data(), dense.size());
  EXPECT_EQ(dense, std::vector<float>({3.5f, 1, 1, 0}));
  scatterAcc(nullptr, 0, dense.data(), dense.size());
}

TEST(CodecTopk, FeedbackIdentityAndBoundedError) {
  const size_t n = 50000, k = n / 100, steps = 200;
  std::vector<float> r(n, 0.0f);
  std::vector<double> sent(n, 0.0), exact(n, 0.0), plain(n, 0.0);
  std::vector<TopkPair> out(k);
  TopkScratch s;
  for (size_t t = 0; t < steps; ++t) {
    std::vector<float> x = gradients(n, static_cast<uint32_t>(100 + t));
    for (auto& v : x) v = 0.01f + v * 1e-3f;
    const std::vector<float> r0 = r;
    ASSERT_TRUE(topkFeedback(x.data(), r.data(), n, k, out.data(), s));
    std::vector<float> dense(n, 0.0f);
    scatterAcc(out.data(), k, dense.data(), n);
    for (size_t i = 0; i < n; ++i) {
      // Exact: one of dense[i], r[i] is fl(r0 + x), the other 0.
      ASSERT_EQ(bitsOf(dense[i] + r[i]), bitsOf(r0[i] + x[i])) << i;
      sent[i] += dense[i];
      exact[i] += x[i];
    }
    // Without feedback: the top-k of x alone, every step.
    std::vector<TopkPair> p(k);
    ASSERT_TRUE(topk(x.data(), n, k, p.data(), s));
    for (const auto& q : p) plain[q.index] += q.value;
  }
  double errFb = 0, errPlain = 0, rn = 0;
  for (size_t i = 0; i < n; ++i) {
    errFb += (sent[i] - exact[i]) * (sent[i] - exact[i]);
    errPlain += (plain[i] - exact[i]) * (plain[i] - exact[i]);
    rn += static_cast<double>(r[i]) * r[i];
  }
  EXPECT_NEAR(std::sqrt(errFb), std::sqrt(rn), 1e-4 * std::sqrt(rn) + 1e-6);
  EXPECT_GT(std::sqrt(errPlain), 2 * std::sqrt(errFb));
}

// ---- FeedbackState -------------------------------------------------------------------------

TEST(CodecFeedbackState, SaveLoadRoundTrip) {
  FeedbackState a;
  ASSERT_TRUE(a.sender.resize(1000));
  ASSERT_TRUE(a.owner.resize(250));
  for (size_t i = 0; i < 1000; ++i) a.sender.data()[i] = static_cast<float>(i) * 0.5f;
  for (size_t i = 0; i < 250; ++i) a.owner.data()[i] = -static_cast<float>(i);
  a.counter = 0x123456789abcull;
  std::vector<unsigned char> buf(a.stateBytes());
  EXPECT_EQ(buf.size(), 32u + 1250u * 4u);
  EXPECT_FALSE(a.save(buf.data(), buf.size() - 1));
  ASSERT_TRUE(a.save(buf.data(), buf.size()));
  FeedbackState b;
  ASSERT_TRUE(b.load(buf.data(), buf.size()));
  EXPECT_EQ(b.counter, a.counter);
  ASSERT_EQ(b.sender.size(), 1000u);
  ASSERT_EQ(b.owner.size(), 250u);
  EXPECT_TRUE(sameBytes(b.sender.data(), a.sender.data(), 1000));
  EXPECT_TRUE(sameBytes(b.owner.data(), a.owner.data(), 250));
  // Malformed states are refused and leave the state as it was.
  EXPECT_FALSE(b.load(buf.data(), buf.size() - 4));
  buf[0] ^= 1;
  EXPECT_FALSE(b.load(buf.data(), buf.size()));
  EXPECT_EQ(b.sender.size(), 1000u);
  buf[0] ^= 1;
  std::vector<unsigned char> huge(buf.begin(), buf.begin() + 32);  // sizes beyond any buffer
  std::memset(huge.data() + 16, 0xff, 8);
  EXPECT_FALSE(b.load(huge.data(), huge.size()));
  b.reset();
  EXPECT_EQ(b.counter, 0u);
  EXPECT_EQ(b.sender.size(), 1000u);
  EXPECT_EQ(b.sender.norm(), 0.0);
}

TEST(CodecFeedbackState, TwoPointStepsResumeExactly) {
  // A two-point int8 scheme on 3 "ranks" in one process: 40 steps straight,
  // against 20 steps, save, load into a fresh state, 20 more.
  const size_t ranks = 3, n = 3000, shard = n / ranks, block = 256;
  auto runSteps = [&](std::vector<FeedbackState>& st, size_t from, size_t to,
                      std::vector<float>& result) {
    for (size_t t = from; t < to; ++t) {
      std::vector<std::vector<uint8_t>> wires(ranks * ranks);
      for (size_t q = 0; q < ranks; ++q) {
        const std::vector<float> x = gradients(n, static_cast<uint32_t>(t * 10 + q));
        for (size_t j = 0; j < ranks; ++j) {
          auto& w = wires[q * ranks + j];
          w.resize(wireBytes(Codec::kInt8, shard, block));
          const Rounding rd{true, 5, st[q].counter + j * shard};
          ASSERT_TRUE(encodeFeedback(Codec::kInt8, x.data() + j * shard,
                                     st[q].sender.data() + j * shard, shard, block, rd, w.data()));
        }
      }
      for (size_t j = 0; j < ranks; ++j) {
        std::vector<float> acc(shard, 0.0f);
        for (size_t q = 0; q < ranks; ++q) {
          ASSERT_TRUE(
              decodeAcc(Codec::kInt8, wires[q * ranks + j].data(), shard, block, acc.data()));
        }
        std::vector<uint8_t> out(wireBytes(Codec::kInt8, shard, block));
        const Rounding rd{true, 5, st[j].counter + n + j * shard};
        ASSERT_TRUE(encodeFeedback(Codec::kInt8, acc.data(), st[j].owner.data(), shard, block, rd,
                                   out.data()));
        ASSERT_TRUE(decode(Codec::kInt8, out.data(), shard, block, result.data() + j * shard));
      }
      for (auto& s : st) s.counter += 2 * n;
    }
  };
  auto fresh = [&]() {
    std::vector<FeedbackState> st(ranks);
    for (auto& s : st) {
      EXPECT_TRUE(s.sender.resize(n));
      EXPECT_TRUE(s.owner.resize(shard));
    }
    return st;
  };
  std::vector<float> straight(n), resumed(n);
  auto a = fresh();
  runSteps(a, 0, 40, straight);
  auto b = fresh();
  runSteps(b, 0, 20, resumed);
  std::vector<std::vector<unsigned char>> saved;
  for (const auto& s : b) {
    saved.emplace_back(s.stateBytes());
    ASSERT_TRUE(s.save(saved.back().data(), saved.back().size()));
  }
  std::vector<FeedbackState> c(ranks);
  for (size_t q = 0; q < ranks; ++q) ASSERT_TRUE(c[q].load(saved[q].data(), saved[q].size()));
  runSteps(c, 20, 40, resumed);
  EXPECT_TRUE(sameBytes(straight.data(), resumed.data(), n));
}

}  // namespace
}  // namespace tide::codec
