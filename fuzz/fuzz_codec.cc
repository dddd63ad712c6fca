// libFuzzer target: round trips of the compression codecs
// (algorithms/compression/codec_kernels.h) on arbitrary float bits.
//
// Input: byte 0 picks the codec (fp16, bf16, int8, int4, top-k), bytes 1-2 the
// block size (1..1024) or top-k's k, byte 3 flags (bit 0 stochastic
// rounding, bit 1 error feedback), bytes 4-11 the seed and counter, the rest
// the float32 elements (at most 8192). Checks: the exact wire size (the wire
// is a heap buffer of exactly wireBytes, so ASan sees any overrun), the AVX2
// variant equal to the scalar one, the documented error bounds and NaN/Inf
// rules, decodeAcc == acc + decode, the error-feedback identity, top-k exact
// == sampled == a brute-force reference, and decoding the raw input as a wire.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "algorithms/compression/codec_kernels.h"

namespace {

using tide::codec::Codec;
using tide::codec::Impl;

[[noreturn]] void fail() { __builtin_trap(); }
void check(bool ok) {
  if (!ok) fail();
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
bool same(float a, float b) { return bits(a) == bits(b) || (std::isnan(a) && std::isnan(b)); }
bool same(const std::vector<float>& a, const std::vector<float>& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (!same(a[i], b[i])) return false;
  }
  return a.size() == b.size();
}

std::vector<Impl> impls() {
  std::vector<Impl> v = {Impl::kScalar};
  if (tide::codec::implSupported(Impl::kAvx2)) v.push_back(Impl::kAvx2);
  return v;
}

void checkCast(Codec c, const std::vector<float>& x) {
  const size_t n = x.size();
  std::vector<uint16_t> w0;
  for (const Impl impl : impls()) {
    std::vector<uint16_t> w(n);
    check(tide::codec::encode(c, x.data(), n, 0, {}, w.data(), impl));
    if (impl == Impl::kScalar) w0 = w;
    check(w == w0);
    std::vector<float> y(n), acc(x);
    check(tide::codec::decode(c, w.data(), n, 0, y.data(), impl));
    check(tide::codec::decodeAcc(c, w.data(), n, 0, acc.data(), impl));
    const double maxFinite = c == Codec::kFp16 ? 65504.0 : 3.3895313892515355e38;
    const double rel = c == Codec::kFp16 ? 0x1p-11 : 0x1p-8;    // half an ulp
    const double sub = c == Codec::kFp16 ? 0x1p-25 : 0x1p-134;  // half the least subnormal
    for (size_t i = 0; i < n; ++i) {
      check(same(acc[i], x[i] + y[i]));
      if (std::isnan(x[i])) {
        check(std::isnan(y[i]));
      } else if (std::isinf(x[i])) {
        check(y[i] == x[i]);
      } else {
        check(std::isfinite(y[i]) && std::fabs(y[i]) <= maxFinite);  // saturates, never Inf
        const double ax = std::fabs(static_cast<double>(x[i]));
        if (ax <= maxFinite) check(std::fabs(y[i] - static_cast<double>(x[i])) <= ax * rel + sub);
        check(std::signbit(y[i]) == std::signbit(x[i]));
      }
    }
  }
}

void checkQuant(Codec c, const std::vector<float>& x, size_t block, const tide::codec::Rounding& r,
                bool feedback, const std::vector<float>& r0) {
  const size_t n = x.size();
  const size_t bytes = tide::codec::wireBytes(c, n, block);
  const size_t nb = (n + block - 1) / block;
  check(bytes == 4 * nb + (c == Codec::kInt8 ? n : (n + 1) / 2));
  const int qmax = c == Codec::kInt8 ? 127 : 7;
  std::vector<uint8_t> w0;
  std::vector<float> res0;
  for (const Impl impl : impls()) {
    std::vector<uint8_t> w(bytes);
    std::vector<float> res = r0;
    if (feedback) {
      check(tide::codec::encodeFeedback(c, x.data(), res.data(), n, block, r, w.data(), impl));
    } else {
      check(tide::codec::quantize(c, x.data(), n, block, r, w.data(), impl));
    }
    if (impl == Impl::kScalar) {
      w0 = w;
      res0 = res;
    }
    check(w == w0 && same(res, res0));
    std::vector<float> y(n), acc(x);
    check(tide::codec::dequantize(c, w.data(), n, block, y.data(), impl));
    check(tide::codec::dequantizeAcc(c, w.data(), n, block, acc.data(), impl));
    for (size_t b = 0; b < nb; ++b) {
      float s;
      std::memcpy(&s, w.data() + 4 * b, 4);
      const size_t lo = b * block, hi = std::min(n, lo + block);
      bool nan = false, inf = false;
      float amax = 0;
      for (size_t i = lo; i < hi; ++i) {
        const float v = feedback ? x[i] + r0[i] : x[i];
        nan |= std::isnan(v);
        inf |= std::isinf(v);
        if (!std::isnan(v)) amax = std::max(amax, std::fabs(v));
      }
      for (size_t i = lo; i < hi; ++i) {
        check(same(acc[i], x[i] + y[i]));
        const float v = feedback ? x[i] + r0[i] : x[i];
        if (nan || inf) {  // the whole block decodes non-finite; Inf stays Inf
          check(!std::isfinite(y[i]));
          if (!nan && std::isinf(v)) check(y[i] == v);
          if (feedback) check(bits(res[i]) == 0);
          continue;
        }
        check(s >= 0 && s == (amax < 0x1p-112f ? 0.0f : amax / static_cast<float>(qmax)));
        if (std::isinf(y[i])) {  // q s may round past FLT_MAX at the very top
          check(amax > 3.3e38f);
          continue;
        }
        const double step = r.stochastic ? s : s / 2.0;
        const double ulps = 0x1p-22 * (std::fabs(v) + std::fabs(y[i]));
        check(std::fabs(static_cast<double>(y[i]) - v) <= step + ulps + 0x1p-112);
        if (feedback) {
          const double before = static_cast<double>(x[i]) + r0[i];
          const double after = static_cast<double>(y[i]) + res[i];
          const double tol = 0x1p-23 * (std::fabs(x[i]) + std::fabs(r0[i]) + std::fabs(y[i]));
          if (std::isfinite(before) && std::isfinite(after))
            check(std::fabs(before - after) <= tol);
        }
      }
    }
  }
}

// Reference order: magnitude bits descending, index ascending.
std::vector<uint32_t> topkReference(const std::vector<float>& x, size_t k) {
  std::vector<uint32_t> idx(x.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<uint32_t>(i);
  std::stable_sort(idx.begin(), idx.end(), [&](uint32_t a, uint32_t b) {
    return (bits(x[a]) & 0x7fffffffu) > (bits(x[b]) & 0x7fffffffu);
  });
  idx.resize(std::min(k, idx.size()));
  std::sort(idx.begin(), idx.end());
  return idx;
}

void checkTopk(const std::vector<float>& x, size_t k, const std::vector<float>& r0) {
  const size_t n = x.size();
  const std::vector<uint32_t> ref = topkReference(x, k);
  tide::codec::TopkScratch scratch;
  for (const Impl impl : impls()) {
    for (const auto m : {tide::codec::TopkMethod::kExact, tide::codec::TopkMethod::kSampled}) {
      std::vector<tide::codec::TopkPair> out(ref.size());
      check(tide::codec::topk(x.data(), n, k, out.data(), scratch, m, impl));
      for (size_t i = 0; i < ref.size(); ++i) {
        check(out[i].index == ref[i] && bits(out[i].value) == bits(x[ref[i]]));
      }
    }
  }
  // Feedback: dense(out) + r_new == r_old + x exactly (one of the two terms is 0).
  std::vector<float> res = r0;
  std::vector<tide::codec::TopkPair> out(std::min(k, n));
  check(tide::codec::topkFeedback(x.data(), res.data(), n, k, out.data(), scratch));
  std::vector<float> dense(n, 0.0f);
  tide::codec::scatterAcc(out.data(), out.size(), dense.data(), n);
  for (size_t i = 0; i < n; ++i) {  // as values: +0 + -0 is +0
    const float a = dense[i] + res[i], b = r0[i] + x[i];
    check(a == b || (std::isnan(a) && std::isnan(b)));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 12) return 0;
  const int which = data[0] % 5;
  const size_t param =
      1 + ((static_cast<size_t>(data[1]) | static_cast<size_t>(data[2]) << 8) % 1024);
  const bool sr = (data[3] & 1) != 0;
  const bool feedback = (data[3] & 2) != 0;
  uint32_t seed = 0, counter = 0;
  std::memcpy(&seed, data + 4, 4);
  std::memcpy(&counter, data + 8, 4);
  const size_t n = std::min<size_t>((size - 12) / 4, 8192);
  std::vector<float> x(n);
  if (n != 0) std::memcpy(x.data(), data + 12, n * 4);
  // A residual derived from the input (a rotation of it, scaled down).
  std::vector<float> r0(n);
  for (size_t i = 0; i < n; ++i)
    r0[i] = std::isfinite(x[(i + 1) % n]) ? x[(i + 1) % n] * 0.125f : 0.0f;
  const tide::codec::Rounding r{sr, seed, 0xfffffff0ull + counter};
  switch (which) {
    case 0:
    case 1:
      checkCast(which == 0 ? Codec::kFp16 : Codec::kBf16, x);
      break;
    case 2:
    case 3:
      checkQuant(which == 2 ? Codec::kInt8 : Codec::kInt4, x, param, r, feedback, r0);
      break;
    default:
      checkTopk(x, param, r0);
      break;
  }
  // The raw input decoded as a wire of either int codec: no fault, variants agree.
  for (const Codec c : {Codec::kInt8, Codec::kInt4}) {
    size_t m = size;
    while (m > 0 && tide::codec::wireBytes(c, m, param) > size) --m;
    std::vector<uint8_t> wire(data, data + tide::codec::wireBytes(c, m, param));
    std::vector<float> y0;
    for (const Impl impl : impls()) {
      std::vector<float> y(m);
      check(tide::codec::dequantize(c, wire.data(), m, param, y.data(), impl));
      if (impl == Impl::kScalar) y0 = y;
      check(same(y, y0));
    }
  }
  return 0;
}
