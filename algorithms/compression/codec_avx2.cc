// The AVX2 + F16C variant of the codec kernels. Every function computes the
// formulas of codec_common.h eight lanes at a time, in the same fp32
// operations as the scalar reference (no FMA: the target is "avx2,f16c"
// only, so GCC cannot contract a product and a sum into one rounding), and
// finishes each block's tail with the scalar formulas themselves.
//
// Block quantization works block by block: one pass for the largest
// magnitude (integer max of the magnitude bits, exact and NaN-aware), one
// pass over the same, cache-resident block for the codes. int4 blocks that
// start at an odd element (odd block sizes) take the scalar path, since their
// nibble pairs straddle two blocks.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "algorithms/compression/codec_common.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TIDE_CODEC_X86 1
#else
#define TIDE_CODEC_X86 0
#endif

namespace tide::codec::detail {

#if TIDE_CODEC_X86
#define TIDE_CODEC_AVX2 __attribute__((target("avx2,f16c")))

namespace {

TIDE_CODEC_AVX2 inline __m256i vAbsBits(__m256 v) {
  return _mm256_and_si256(_mm256_castps_si256(v), _mm256_set1_epi32(static_cast<int>(kAbsMask)));
}

// Largest of 8 non-negative int32 lanes.
TIDE_CODEC_AVX2 inline uint32_t hmax(__m256i m) {
  __m128i a = _mm_max_epi32(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1));
  a = _mm_max_epi32(a, _mm_shuffle_epi32(a, _MM_SHUFFLE(1, 0, 3, 2)));
  a = _mm_max_epi32(a, _mm_shuffle_epi32(a, _MM_SHUFFLE(2, 3, 0, 1)));
  return static_cast<uint32_t>(_mm_cvtsi128_si32(a));
}

// Prefetch distance in elements (2 KiB).
constexpr size_t kPrefetch = 512;

// Prefetches the two cache lines at p + i (which may lie past the buffer: a
// prefetch never faults; the address is formed as an integer).
TIDE_CODEC_AVX2 inline void prefetch2(const float* p, size_t i) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p) + i * sizeof(float);
  _mm_prefetch(reinterpret_cast<const char*>(a), _MM_HINT_T0);
  _mm_prefetch(reinterpret_cast<const char*>(a + 64), _MM_HINT_T0);
}

// ---- Casts ----------------------------------------------------------------------

TIDE_CODEC_AVX2 inline __m256 vSaturate(__m256 f, uint32_t maxBits) {
  const __m256i x = _mm256_castps_si256(f);
  const __m256i absm = _mm256_set1_epi32(static_cast<int>(kAbsMask));
  const __m256i ax = _mm256_and_si256(x, absm);
  const __m256i mx = _mm256_set1_epi32(static_cast<int>(maxBits));
  const __m256i sat =
      _mm256_and_si256(_mm256_cmpgt_epi32(ax, mx),
                       _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(kInfBits)), ax));
  const __m256i s = _mm256_or_si256(_mm256_andnot_si256(absm, x), mx);
  return _mm256_castsi256_ps(_mm256_blendv_epi8(x, s, sat));
}

// Whether a lane of a or b has a magnitude above maxBits (NaN and Inf included).
TIDE_CODEC_AVX2 inline bool anyAbove(__m256 a, __m256 b, uint32_t maxBits) {
  const __m256i mx = _mm256_set1_epi32(static_cast<int>(maxBits));
  const __m256i big =
      _mm256_or_si256(_mm256_cmpgt_epi32(vAbsBits(a), mx), _mm256_cmpgt_epi32(vAbsBits(b), mx));
  return _mm256_testz_si256(big, big) == 0;
}

TIDE_CODEC_AVX2 void encodeFp16(const float* x, uint16_t* out, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    prefetch2(x, i + kPrefetch);
    __m256 a = _mm256_loadu_ps(x + i);
    __m256 b = _mm256_loadu_ps(x + i + 8);
    if (anyAbove(a, b, kHalfMaxBits)) {  // rare: the saturation
      a = vSaturate(a, kHalfMaxBits);
      b = vSaturate(b, kHalfMaxBits);
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i + 8),
                     _mm256_cvtps_ph(b, _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) out[i] = encodeHalf(x[i]);
}

template <bool kAcc>
TIDE_CODEC_AVX2 void decodeFp16T(const uint16_t* in, float* y, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    if constexpr (kAcc) prefetch2(y, i + kPrefetch);
    __m256 a = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i)));
    __m256 b = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i + 8)));
    if constexpr (kAcc) {
      a = _mm256_add_ps(_mm256_loadu_ps(y + i), a);
      b = _mm256_add_ps(_mm256_loadu_ps(y + i + 8), b);
    }
    _mm256_storeu_ps(y + i, a);
    _mm256_storeu_ps(y + i + 8, b);
  }
  for (; i < n; ++i) {
    if constexpr (kAcc) {
      y[i] += fp::halfToFloat(in[i]);
    } else {
      y[i] = fp::halfToFloat(in[i]);
    }
  }
}

TIDE_CODEC_AVX2 void decodeFp16(const uint16_t* in, float* y, size_t n, bool acc) {
  if (acc) {
    decodeFp16T<true>(in, y, n);
  } else {
    decodeFp16T<false>(in, y, n);
  }
}

// fp::floatToBf16's rounding on 8 lanes, right for every lane but NaN.
TIDE_CODEC_AVX2 inline __m256i vBfRoundNumber(__m256i x) {
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
  return _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), odd),
                           16);
}

// fp::floatToBf16 on 8 lanes (the saturation is applied before).
TIDE_CODEC_AVX2 inline __m256i vBfRound(__m256 f) {
  const __m256i x = _mm256_castps_si256(f);
  const __m256i hi = _mm256_srli_epi32(x, 16);
  const __m256i r = vBfRoundNumber(x);
  const __m256i qnan = _mm256_or_si256(hi, _mm256_set1_epi32(0x40));
  const __m256i isNan =
      _mm256_cmpgt_epi32(vAbsBits(f), _mm256_set1_epi32(static_cast<int>(kInfBits)));
  return _mm256_blendv_epi8(r, qnan, isNan);
}

TIDE_CODEC_AVX2 void encodeBf16(const float* x, uint16_t* out, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    prefetch2(x, i + kPrefetch);
    const __m256 fa = _mm256_loadu_ps(x + i);
    const __m256 fb = _mm256_loadu_ps(x + i + 8);
    __m256i a, b;
    if (anyAbove(fa, fb, kBf16MaxBits)) {  // rare: saturation, Inf or NaN
      a = vBfRound(vSaturate(fa, kBf16MaxBits));
      b = vBfRound(vSaturate(fb, kBf16MaxBits));
    } else {
      a = vBfRoundNumber(_mm256_castps_si256(fa));
      b = vBfRoundNumber(_mm256_castps_si256(fb));
    }
    // packus interleaves the 128-bit lanes; the permute restores the order.
    const __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), _MM_SHUFFLE(3, 1, 2, 0));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), p);
  }
  for (; i < n; ++i) out[i] = encodeBf(x[i]);
}

TIDE_CODEC_AVX2 inline __m256 vBfLoad8(const uint16_t* in) {
  const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

template <bool kAcc>
TIDE_CODEC_AVX2 void decodeBf16T(const uint16_t* in, float* y, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    if constexpr (kAcc) prefetch2(y, i + kPrefetch);
    __m256 a = vBfLoad8(in + i);
    __m256 b = vBfLoad8(in + i + 8);
    if constexpr (kAcc) {
      a = _mm256_add_ps(_mm256_loadu_ps(y + i), a);
      b = _mm256_add_ps(_mm256_loadu_ps(y + i + 8), b);
    }
    _mm256_storeu_ps(y + i, a);
    _mm256_storeu_ps(y + i + 8, b);
  }
  for (; i < n; ++i) {
    if constexpr (kAcc) {
      y[i] += fp::bf16ToFloat(in[i]);
    } else {
      y[i] = fp::bf16ToFloat(in[i]);
    }
  }
}

TIDE_CODEC_AVX2 void decodeBf16(const uint16_t* in, float* y, size_t n, bool acc) {
  if (acc) {
    decodeBf16T<true>(in, y, n);
  } else {
    decodeBf16T<false>(in, y, n);
  }
}

// ---- Block quantization ---------------------------------------------------------------

TIDE_CODEC_AVX2 inline __m256i vMix32(__m256i x) {
  x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
  x = _mm256_mullo_epi32(x, _mm256_set1_epi32(0x7feb352d));
  x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 15));
  x = _mm256_mullo_epi32(x, _mm256_set1_epi32(static_cast<int>(0x846ca68bu)));
  return _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
}

// uniform24(drawWithKey(key, pos + k)) in lane k.
TIDE_CODEC_AVX2 inline __m256 vUniform(RngKey key, uint64_t pos) {
  const auto plo = static_cast<int>(static_cast<uint32_t>(pos));
  const auto phi = static_cast<uint32_t>(pos >> 32);
  const __m256i base = _mm256_set1_epi32(plo);
  const __m256i lo = _mm256_add_epi32(base, _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  // A lane whose low half wrapped carries into the high half (unsigned lo < base).
  const __m256i bias = _mm256_set1_epi32(static_cast<int>(0x80000000u));
  const __m256i carry =
      _mm256_cmpgt_epi32(_mm256_xor_si256(base, bias), _mm256_xor_si256(lo, bias));
  __m256i h = vMix32(_mm256_xor_si256(lo, _mm256_set1_epi32(static_cast<int>(key.lo))));
  // key.hi + hi * kGolden32, where hi is phi, or phi + 1 in a carrying lane.
  const uint32_t k2base = key.hi + static_cast<uint32_t>(phi) * kGolden32;
  const __m256i k2 =
      _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(k2base)),
                       _mm256_and_si256(carry, _mm256_set1_epi32(static_cast<int>(kGolden32))));
  h = vMix32(_mm256_xor_si256(h, k2));
  return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(h, 8)), _mm256_set1_ps(0x1p-24f));
}

struct VecBlock {
  __m256 inv;
  __m256 scale;
  __m256i qmax;
  __m256i qmin;
};

// quantNearest / quantStochastic on 8 lanes.
template <bool kSr>
TIDE_CODEC_AVX2 inline __m256i vQuant(__m256 v, const VecBlock& p, RngKey key, uint64_t pos) {
  const __m256 t = _mm256_mul_ps(v, p.inv);
  if constexpr (!kSr) {
    // In the default rounding mode the conversion rounds to nearest even,
    // as (t + kRound) - kRound does for |t| < 2^22. No clamp: |t| <= qmax
    // (1 + 2^-23), which rounds to qmax (the packs saturate regardless).
    (void)key;
    (void)pos;
    return _mm256_cvtps_epi32(t);
  } else {
    const __m256 round = _mm256_set1_ps(kRound);
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(kAbsMask)));
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 a = _mm256_and_ps(t, absm);
    const __m256 rr = _mm256_sub_ps(_mm256_add_ps(a, round), round);
    const __m256 f = _mm256_sub_ps(rr, _mm256_and_ps(_mm256_cmp_ps(rr, a, _CMP_GT_OQ), one));
    const __m256 up = _mm256_cmp_ps(vUniform(key, pos), _mm256_sub_ps(a, f), _CMP_LT_OQ);
    const __m256 m = _mm256_add_ps(f, _mm256_and_ps(up, one));
    const __m256i q = _mm256_cvtps_epi32(_mm256_or_ps(m, _mm256_andnot_ps(absm, t)));  // exact
    return _mm256_min_epi32(_mm256_max_epi32(q, p.qmin), p.qmax);
  }
}

// 32 int32 codes (4 vectors, element order) as 32 bytes in order.
TIDE_CODEC_AVX2 inline __m256i vPack32(__m256i q0, __m256i q1, __m256i q2, __m256i q3) {
  const __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(q0, q1), _mm256_packs_epi32(q2, q3));
  return _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// 32 byte codes in order as 16 bytes of nibble pairs (low nibble first).
TIDE_CODEC_AVX2 inline __m128i vNibbles(__m256i c) {
  // Each 16-bit lane: nibble(even) * 1 + nibble(odd) * 16 (<= 255).
  const __m256i nib = _mm256_and_si256(c, _mm256_set1_epi8(0x0f));
  const __m256i w = _mm256_maddubs_epi16(nib, _mm256_set1_epi16(0x1001));
  const __m256i p = _mm256_packus_epi16(w, _mm256_setzero_si256());
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(p, _MM_SHUFFLE(3, 1, 2, 0)));
}

// The codes of 8 elements at v + o (and, with kRes, their residuals).
template <bool kSr, bool kRes>
TIDE_CODEC_AVX2 inline __m256i quant8(const float* v, float* res, size_t o, const VecBlock& p,
                                      RngKey key, uint64_t pos) {
  const __m256 vk = _mm256_loadu_ps(v + o);
  const __m256i q = vQuant<kSr>(vk, p, key, pos + o);
  if constexpr (kRes) {
    const __m256 d = _mm256_mul_ps(_mm256_cvtepi32_ps(q), p.scale);
    _mm256_storeu_ps(res + o, _mm256_sub_ps(vk, d));
  }
  return q;
}

// The codes (and residuals) of the first multiple of 32 elements of a kNormal
// block; returns how many it did. `first` is the block's first element.
template <int kBits, bool kSr, bool kRes>
TIDE_CODEC_AVX2 size_t quantBlock(const float* x, const float* v, float* res, size_t len,
                                  const BlockParams& bp, RngKey key, uint64_t pos, uint8_t* codes,
                                  size_t first) {
  const VecBlock p = {_mm256_set1_ps(bp.inv), _mm256_set1_ps(bp.scale),
                      _mm256_set1_epi32(kQmax<kBits>), _mm256_set1_epi32(-kQmax<kBits>)};
  size_t j = 0;
  for (; j + 32 <= len; j += 32) {
    // While this block computes, fetch the data two blocks of 256 ahead: the
    // block's first pass alone keeps too few misses in flight.
    prefetch2(v, j + kPrefetch);
    if constexpr (kRes) prefetch2(x, j + kPrefetch);
    const __m256i q0 = quant8<kSr, kRes>(v, res, j, p, key, pos);
    const __m256i q1 = quant8<kSr, kRes>(v, res, j + 8, p, key, pos);
    const __m256i q2 = quant8<kSr, kRes>(v, res, j + 16, p, key, pos);
    const __m256i q3 = quant8<kSr, kRes>(v, res, j + 24, p, key, pos);
    const __m256i b = vPack32(q0, q1, q2, q3);
    if constexpr (kBits == 8) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + first + j), b);
    } else {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + (first + j) / 2), vNibbles(b));
    }
  }
  return j;
}

template <int kBits, bool kRes>
TIDE_CODEC_AVX2 size_t quantBlockAny(const float* x, const float* v, float* res, size_t len,
                                     const BlockParams& bp, bool sr, RngKey key, uint64_t pos,
                                     uint8_t* codes, size_t first) {
  if (sr) return quantBlock<kBits, true, kRes>(x, v, res, len, bp, key, pos, codes, first);
  return quantBlock<kBits, false, kRes>(x, v, res, len, bp, key, pos, codes, first);
}

template <int kBits>
TIDE_CODEC_AVX2 void quantize(const float* x, float* residual, size_t n, size_t block,
                              const Rounding& r, uint8_t* wire) {
  constexpr int kQ = kQmax<kBits>;
  const size_t nb = blockCount(n, block);
  uint8_t* codes = wire + nb * sizeof(float);
  const RngKey key = rngKey(r.seed);
  for (size_t b = 0; b < nb; ++b) {
    const size_t lo = b * block;
    const size_t len = std::min(block, n - lo);
    const float* v = x + lo;
    float* res = residual != nullptr ? residual + lo : nullptr;
    __m256i m = _mm256_setzero_si256();
    size_t j = 0;
    if (res != nullptr) {
      for (; j + 8 <= len; j += 8) {
        const __m256 s = _mm256_add_ps(_mm256_loadu_ps(v + j), _mm256_loadu_ps(res + j));
        _mm256_storeu_ps(res + j, s);
        m = _mm256_max_epi32(m, vAbsBits(s));
      }
    } else {
      for (; j + 8 <= len; j += 8) m = _mm256_max_epi32(m, vAbsBits(_mm256_loadu_ps(v + j)));
    }
    uint32_t amax = hmax(m);
    for (; j < len; ++j) {
      if (res != nullptr) res[j] = v[j] + res[j];
      amax = std::max(amax, absBits(res != nullptr ? res[j] : v[j]));
    }
    if (res != nullptr) v = res;
    const BlockParams p = blockParams(amax, kQ);
    storeScale(wire, b, p.scale);
    j = 0;
    const uint64_t pos = r.counter + lo;
    if (p.kind == BlockKind::kNormal && (kBits == 8 || (lo & 1) == 0)) {
      j = res != nullptr ? quantBlockAny<kBits, true>(x + lo, v, res, len, p, r.stochastic, key,
                                                      pos, codes, lo)
                         : quantBlockAny<kBits, false>(x + lo, v, res, len, p, r.stochastic, key,
                                                       pos, codes, lo);
    }
    for (; j < len; ++j) {
      const float vj = v[j];
      const int32_t q = quantOne(vj, p, kQ, r, key, pos + j);
      putCode<kBits>(codes, lo + j, q);
      if (res != nullptr) res[j] = residualOf(vj, q, p);
    }
  }
}

// 8 codes from element `first` on (int8: 8 bytes; int4: 4 bytes, `first` even).
template <int kBits>
TIDE_CODEC_AVX2 inline __m256i vCodes(const uint8_t* codes, size_t first) {
  if constexpr (kBits == 8) {
    return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + first)));
  } else {
    uint32_t w;
    std::memcpy(&w, codes + first / 2, sizeof(w));
    // Nibble k to the top of lane k, then an arithmetic shift sign-extends it.
    const __m256i s = _mm256_sllv_epi32(_mm256_set1_epi32(static_cast<int>(w)),
                                        _mm256_setr_epi32(28, 24, 20, 16, 12, 8, 4, 0));
    return _mm256_srai_epi32(s, 28);
  }
}

template <int kBits, bool kAcc>
TIDE_CODEC_AVX2 void dequantizeT(const uint8_t* wire, size_t n, size_t block, float* y) {
  const size_t nb = blockCount(n, block);
  const uint8_t* codes = wire + nb * sizeof(float);
  for (size_t b = 0; b < nb; ++b) {
    const size_t lo = b * block;
    const size_t len = std::min(block, n - lo);
    const float s = loadScale(wire, b);
    const __m256 sv = _mm256_set1_ps(s);
    float* out = y + lo;
    size_t j = 0;
    if (kBits == 8 || (lo & 1) == 0) {
      for (; j + 32 <= len; j += 32) {
        if constexpr (kAcc) prefetch2(out, j + kPrefetch);
#pragma GCC unroll 4
        for (size_t k = 0; k < 32; k += 8) {
          __m256 d = _mm256_mul_ps(_mm256_cvtepi32_ps(vCodes<kBits>(codes, lo + j + k)), sv);
          if constexpr (kAcc) d = _mm256_add_ps(_mm256_loadu_ps(out + j + k), d);
          _mm256_storeu_ps(out + j + k, d);
        }
      }
    }
    for (; j < len; ++j) {
      const float d = static_cast<float>(getCode<kBits>(codes, lo + j)) * s;
      if constexpr (kAcc) {
        out[j] += d;
      } else {
        out[j] = d;
      }
    }
  }
}

template <int kBits>
TIDE_CODEC_AVX2 void dequantize(const uint8_t* wire, size_t n, size_t block, float* y, bool acc) {
  if (acc) {
    dequantizeT<kBits, true>(wire, n, block, y);
  } else {
    dequantizeT<kBits, false>(wire, n, block, y);
  }
}

// ---- Top-k candidate scan ---------------------------------------------------------

TIDE_CODEC_AVX2 size_t scanAtLeast(const float* x, size_t n, uint32_t t, uint32_t* out,
                                   size_t cap) {
  size_t c = 0;
  size_t i = 0;
  if (t > 0) {
    // absBits >= t  <=>  absBits > t - 1 (both non-negative as int32).
    const __m256i tv = _mm256_set1_epi32(static_cast<int>(t - 1));
    for (; i + 32 <= n; i += 32) {
      __m256i g[4];
      for (int k = 0; k < 4; ++k) {
        g[k] =
            _mm256_cmpgt_epi32(vAbsBits(_mm256_loadu_ps(x + i + 8 * static_cast<size_t>(k))), tv);
      }
      const __m256i any = _mm256_or_si256(_mm256_or_si256(g[0], g[1]), _mm256_or_si256(g[2], g[3]));
      if (_mm256_testz_si256(any, any) != 0) continue;
      for (int k = 0; k < 4; ++k) {
        auto mask = static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(g[k])));
        while (mask != 0) {
          const size_t e =
              i + 8 * static_cast<size_t>(k) + static_cast<size_t>(__builtin_ctz(mask));
          if (c < cap) out[c] = static_cast<uint32_t>(e);
          ++c;
          mask &= mask - 1;
        }
      }
    }
  }
  for (; i < n; ++i) {
    if (absBits(x[i]) >= t) {
      if (c < cap) out[c] = static_cast<uint32_t>(i);
      ++c;
    }
  }
  return c;
}

constexpr Table kAvx2 = {&encodeFp16,  &decodeFp16,    &encodeBf16,    &decodeBf16, &quantize<8>,
                         &quantize<4>, &dequantize<8>, &dequantize<4>, &scanAtLeast};

}  // namespace

const Table* avx2Table() { return &kAvx2; }

#else  // !TIDE_CODEC_X86

const Table* avx2Table() { return nullptr; }

#endif  // TIDE_CODEC_X86

}  // namespace tide::codec::detail
