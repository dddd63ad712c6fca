// Top-k by magnitude (codec_kernels.h): the exact selection, the
// sampled-threshold selection that finds the same set with one or two scans of
// the input, the dense scatter of pairs, and the error-feedback variant.
//
// Both selections order elements by a 64-bit key, magnitude bits above the
// complemented index (detail::topkKey): keys are unique, so "the k largest
// keys" is one well-defined set whatever the selection algorithm.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "algorithms/compression/codec_common.h"
#include "algorithms/compression/codec_kernels.h"

namespace tide::codec {
namespace {

// Sampled selection: how many magnitudes the threshold is estimated from, and
// the smallest n for which kAuto uses it.
constexpr size_t kSampleCount = 4096;
constexpr size_t kSampledMinN = size_t{1} << 15;

// The top k (k <= m) of the m elements cand[0..m) of x (cand null: 0..m),
// into out[0..k) by ascending index.
void selectAmong(const float* x, const uint32_t* cand, size_t m, size_t k, TopkPair* out,
                 std::vector<uint64_t>& keys) {
  keys.resize(m);
  for (size_t i = 0; i < m; ++i) {
    const auto idx = cand != nullptr ? cand[i] : static_cast<uint32_t>(i);
    keys[i] = detail::topkKey(detail::absBits(x[idx]), idx);
  }
  if (k < m) {
    std::nth_element(keys.begin(), keys.begin() + static_cast<std::ptrdiff_t>(k), keys.end(),
                     std::greater<>());
  }
  for (size_t i = 0; i < k; ++i) {
    out[i].index = 0xffffffffu - static_cast<uint32_t>(keys[i]);
  }
  std::sort(out, out + k, [](const TopkPair& a, const TopkPair& b) { return a.index < b.index; });
  for (size_t i = 0; i < k; ++i) out[i].value = x[out[i].index];
}

void selectSampled(const float* x, size_t n, size_t k, TopkPair* out, TopkScratch& s,
                   const detail::Table& t) {
  // A fixed pseudo-random sample (with replacement) of the magnitudes.
  s.sample.resize(kSampleCount);
  for (size_t j = 0; j < kSampleCount; ++j) {
    const uint32_t h = detail::mix32(static_cast<uint32_t>(j) * detail::kGolden32 + 0x2545f491u);
    const size_t pos = static_cast<size_t>((static_cast<uint64_t>(h) * n) >> 32);
    s.sample[j] = detail::absBits(x[pos]);
  }
  std::sort(s.sample.begin(), s.sample.end(), std::greater<>());
  // About k n / kSampleCount elements are at or above the sample's e-th
  // largest; three standard deviations more make a rescan unlikely.
  const double e = static_cast<double>(k) * kSampleCount / static_cast<double>(n);
  auto rank = static_cast<size_t>(e + 3.0 * std::sqrt(e) + 4.0);
  size_t cap = std::min(n, 2 * (rank + 1) * (n / kSampleCount + 1) + 1024);
  for (;;) {
    const uint32_t thr = rank < kSampleCount ? s.sample[rank] : 0;
    if (s.candidates.size() < cap) s.candidates.resize(cap);
    size_t c = t.scanAtLeast(x, n, thr, s.candidates.data(), s.candidates.size());
    if (c > s.candidates.size()) {  // more than room for: the same scan, with room
      s.candidates.resize(c);
      c = t.scanAtLeast(x, n, thr, s.candidates.data(), s.candidates.size());
    }
    if (c >= k) {  // every element of the top k is at or above thr
      selectAmong(x, s.candidates.data(), c, k, out, s.keys);
      return;
    }
    rank = 2 * rank + 16;  // too few: a lower threshold (thr 0 takes all n)
  }
}

}  // namespace

bool topk(const float* x, size_t n, size_t k, TopkPair* out, TopkScratch& scratch,
          TopkMethod method, Impl impl) {
  if (n > (size_t{1} << 32)) return false;
  k = std::min(k, n);
  if (k == 0) return true;
  if (x == nullptr || out == nullptr) return false;
  if (method == TopkMethod::kAuto) {
    method = n >= kSampledMinN && k <= n / 8 ? TopkMethod::kSampled : TopkMethod::kExact;
  }
  try {
    if (method == TopkMethod::kSampled) {
      selectSampled(x, n, k, out, scratch, detail::tableFor(impl));
    } else {
      selectAmong(x, nullptr, n, k, out, scratch.keys);
    }
  } catch (...) {  // allocation failure: no exception leaves the kernels
    return false;
  }
  return true;
}

void scatterAcc(const TopkPair* pairs, size_t k, float* dense, size_t n) {
  for (size_t i = 0; i < k; ++i) {
    const TopkPair p = pairs[i];
    if (p.index < n) dense[p.index] += p.value;
  }
}

bool topkFeedback(const float* x, float* residual, size_t n, size_t k, TopkPair* out,
                  TopkScratch& scratch, TopkMethod method, Impl impl) {
  if (n > (size_t{1} << 32)) return false;
  if (n != 0 && (x == nullptr || residual == nullptr)) return false;
  for (size_t i = 0; i < n; ++i) residual[i] += x[i];
  if (!topk(residual, n, k, out, scratch, method, impl)) return false;
  const size_t sent = std::min(k, n);
  for (size_t i = 0; i < sent; ++i) residual[out[i].index] = 0.0f;
  return true;
}

}  // namespace tide::codec
