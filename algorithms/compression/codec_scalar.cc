// The scalar reference of the codec kernels: one element at a time, in the
// formulas of codec_common.h. Portable; also the fallback of CPUs without AVX2.
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "algorithms/compression/codec_common.h"

namespace tide::codec::detail {
namespace {

void encodeFp16(const float* x, uint16_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = encodeHalf(x[i]);
}

void decodeFp16(const uint16_t* in, float* y, size_t n, bool acc) {
  if (acc) {
    for (size_t i = 0; i < n; ++i) y[i] += fp::halfToFloat(in[i]);
  } else {
    for (size_t i = 0; i < n; ++i) y[i] = fp::halfToFloat(in[i]);
  }
}

void encodeBf16(const float* x, uint16_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = encodeBf(x[i]);
}

void decodeBf16(const uint16_t* in, float* y, size_t n, bool acc) {
  if (acc) {
    for (size_t i = 0; i < n; ++i) y[i] += fp::bf16ToFloat(in[i]);
  } else {
    for (size_t i = 0; i < n; ++i) y[i] = fp::bf16ToFloat(in[i]);
  }
}

template <int kBits>
void quantize(const float* x, float* residual, size_t n, size_t block, const Rounding& r,
              uint8_t* wire) {
  constexpr int kQ = kQmax<kBits>;
  const size_t nb = blockCount(n, block);
  uint8_t* codes = wire + nb * sizeof(float);
  const RngKey key = rngKey(r.seed);
  for (size_t b = 0; b < nb; ++b) {
    const size_t lo = b * block;
    const size_t len = std::min(block, n - lo);
    const float* v = x + lo;
    if (residual != nullptr) {
      float* res = residual + lo;
      for (size_t j = 0; j < len; ++j) res[j] = v[j] + res[j];
      v = res;
    }
    uint32_t amax = 0;
    for (size_t j = 0; j < len; ++j) amax = std::max(amax, absBits(v[j]));
    const BlockParams p = blockParams(amax, kQ);
    storeScale(wire, b, p.scale);
    for (size_t j = 0; j < len; ++j) {
      const float vj = v[j];
      const int32_t q = quantOne(vj, p, kQ, r, key, r.counter + lo + j);
      putCode<kBits>(codes, lo + j, q);
      if (residual != nullptr) residual[lo + j] = residualOf(vj, q, p);
    }
  }
}

template <int kBits>
void dequantize(const uint8_t* wire, size_t n, size_t block, float* y, bool acc) {
  const size_t nb = blockCount(n, block);
  const uint8_t* codes = wire + nb * sizeof(float);
  for (size_t b = 0; b < nb; ++b) {
    const size_t lo = b * block;
    const size_t len = std::min(block, n - lo);
    const float s = loadScale(wire, b);
    for (size_t j = 0; j < len; ++j) {
      const float d = static_cast<float>(getCode<kBits>(codes, lo + j)) * s;
      if (acc) {
        y[lo + j] += d;
      } else {
        y[lo + j] = d;
      }
    }
  }
}

size_t scanAtLeast(const float* x, size_t n, uint32_t t, uint32_t* out, size_t cap) {
  size_t c = 0;
  for (size_t i = 0; i < n; ++i) {
    if (absBits(x[i]) >= t) {
      if (c < cap) out[c] = static_cast<uint32_t>(i);
      ++c;
    }
  }
  return c;
}

constexpr Table kScalar = {&encodeFp16,  &decodeFp16,    &encodeBf16,    &decodeBf16, &quantize<8>,
                           &quantize<4>, &dequantize<8>, &dequantize<4>, &scanAtLeast};

}  // namespace

const Table& scalarTable() { return kScalar; }

}  // namespace tide::codec::detail
