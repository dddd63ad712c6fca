// The entry points of codec_kernels.h: argument checks, the instruction-set
// choice, wire sizes, and the codec-generic encode/decode (with the 16-bit
// codecs' error feedback, built from their encode and decode kernels).
#include "algorithms/compression/codec_kernels.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "algorithms/compression/codec_common.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define TIDE_CODEC_X86 1
#else
#define TIDE_CODEC_X86 0
#endif

namespace tide::codec {
namespace {

using detail::Table;

// CPUID exits to the hypervisor in a virtual machine, so it runs once per
// process (the statics below), never on a kernel call.
bool detectAvx2() {
#if TIDE_CODEC_X86
  __builtin_cpu_init();                               // may run before libgcc's own initializer
  if (!__builtin_cpu_supports("avx2")) return false;  // also checks the OS saves YMM
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
#else
  return false;
#endif
}

bool isInt(Codec c) { return c == Codec::kInt8 || c == Codec::kInt4; }
bool is16(Codec c) { return c == Codec::kFp16 || c == Codec::kBf16; }

// The 16-bit codecs address their wire as uint16_t.
bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 1u) == 0; }

bool quantArgsOk(Codec c, const void* a, const void* b, size_t n, size_t block) {
  return isInt(c) && validBlock(block) && (n == 0 || (a != nullptr && b != nullptr));
}

bool castArgsOk(Codec c, const void* a, const void* wire, size_t n) {
  return is16(c) && (n == 0 || (a != nullptr && wire != nullptr && aligned16(wire)));
}

}  // namespace

bool implSupported(Impl impl) {
  switch (impl) {
    case Impl::kScalar:
      return true;
    case Impl::kAvx2: {
      static const bool avx2 = detail::avx2Table() != nullptr && detectAvx2();
      return avx2;
    }
  }
  return false;
}

const Table& detail::tableFor(Impl impl) {
  if (impl == Impl::kAvx2 && implSupported(Impl::kAvx2)) return *detail::avx2Table();
  return detail::scalarTable();
}

Impl bestImpl() {
  static const Impl best = implSupported(Impl::kAvx2) ? Impl::kAvx2 : Impl::kScalar;
  return best;
}

size_t wireBytes(Codec codec, size_t n, size_t block) {
  switch (codec) {
    case Codec::kFp16:
    case Codec::kBf16:
      return 2 * n;
    case Codec::kInt8:
    case Codec::kInt4:
      if (!validBlock(block)) return 0;
      return sizeof(float) * detail::blockCount(n, block) +
             (codec == Codec::kInt8 ? n : (n + 1) / 2);
  }
  return 0;
}

uint32_t drawBits(uint64_t seed, uint64_t pos) {
  return detail::drawWithKey(detail::rngKey(seed), pos);
}

// ---- Casts ------------------------------------------------------------------------

void encodeFp16(const float* x, uint16_t* out, size_t n, Impl impl) {
  if (n != 0) detail::tableFor(impl).encodeFp16(x, out, n);
}
void decodeFp16(const uint16_t* in, float* y, size_t n, Impl impl) {
  if (n != 0) detail::tableFor(impl).decodeFp16(in, y, n, false);
}
void decodeAccFp16(const uint16_t* in, float* acc, size_t n, Impl impl) {
  if (n != 0) detail::tableFor(impl).decodeFp16(in, acc, n, true);
}
void encodeBf16(const float* x, uint16_t* out, size_t n, Impl impl) {
  if (n != 0) detail::tableFor(impl).encodeBf16(x, out, n);
}
void decodeBf16(const uint16_t* in, float* y, size_t n, Impl impl) {
  if (n != 0) detail::tableFor(impl).decodeBf16(in, y, n, false);
}
void decodeAccBf16(const uint16_t* in, float* acc, size_t n, Impl impl) {
  if (n != 0) detail::tableFor(impl).decodeBf16(in, acc, n, true);
}

// ---- Block quantization -------------------------------------------------------------

bool quantize(Codec codec, const float* x, size_t n, size_t block, const Rounding& rounding,
              void* wire, Impl impl) {
  if (!quantArgsOk(codec, x, wire, n, block)) return false;
  if (n == 0) return true;
  const Table& t = detail::tableFor(impl);
  auto* w = static_cast<uint8_t*>(wire);
  (codec == Codec::kInt8 ? t.quantize8 : t.quantize4)(x, nullptr, n, block, rounding, w);
  return true;
}

bool dequantize(Codec codec, const void* wire, size_t n, size_t block, float* y, Impl impl) {
  if (!quantArgsOk(codec, wire, y, n, block)) return false;
  if (n == 0) return true;
  const Table& t = detail::tableFor(impl);
  const auto* w = static_cast<const uint8_t*>(wire);
  (codec == Codec::kInt8 ? t.dequantize8 : t.dequantize4)(w, n, block, y, false);
  return true;
}

bool dequantizeAcc(Codec codec, const void* wire, size_t n, size_t block, float* acc, Impl impl) {
  if (!quantArgsOk(codec, wire, acc, n, block)) return false;
  if (n == 0) return true;
  const Table& t = detail::tableFor(impl);
  const auto* w = static_cast<const uint8_t*>(wire);
  (codec == Codec::kInt8 ? t.dequantize8 : t.dequantize4)(w, n, block, acc, true);
  return true;
}

// ---- Any codec -------------------------------------------------------------------------

bool encode(Codec codec, const float* x, size_t n, size_t block, const Rounding& rounding,
            void* wire, Impl impl) {
  if (isInt(codec)) return quantize(codec, x, n, block, rounding, wire, impl);
  if (!castArgsOk(codec, x, wire, n)) return false;
  auto* out = static_cast<uint16_t*>(wire);
  if (codec == Codec::kFp16) {
    encodeFp16(x, out, n, impl);
  } else {
    encodeBf16(x, out, n, impl);
  }
  return true;
}

bool decode(Codec codec, const void* wire, size_t n, size_t block, float* y, Impl impl) {
  if (isInt(codec)) return dequantize(codec, wire, n, block, y, impl);
  if (!castArgsOk(codec, y, wire, n)) return false;
  const auto* in = static_cast<const uint16_t*>(wire);
  if (codec == Codec::kFp16) {
    decodeFp16(in, y, n, impl);
  } else {
    decodeBf16(in, y, n, impl);
  }
  return true;
}

bool decodeAcc(Codec codec, const void* wire, size_t n, size_t block, float* acc, Impl impl) {
  if (isInt(codec)) return dequantizeAcc(codec, wire, n, block, acc, impl);
  if (!castArgsOk(codec, acc, wire, n)) return false;
  const auto* in = static_cast<const uint16_t*>(wire);
  if (codec == Codec::kFp16) {
    decodeAccFp16(in, acc, n, impl);
  } else {
    decodeAccBf16(in, acc, n, impl);
  }
  return true;
}

bool encodeFeedback(Codec codec, const float* x, float* residual, size_t n, size_t block,
                    const Rounding& rounding, void* wire, Impl impl) {
  if (n != 0 && residual == nullptr) return false;
  const Table& t = detail::tableFor(impl);
  if (isInt(codec)) {
    if (!quantArgsOk(codec, x, wire, n, block)) return false;
    if (n == 0) return true;
    auto* w = static_cast<uint8_t*>(wire);
    (codec == Codec::kInt8 ? t.quantize8 : t.quantize4)(x, residual, n, block, rounding, w);
    return true;
  }
  if (!castArgsOk(codec, x, wire, n)) return false;
  // 16-bit codecs: v = x + r in a stack chunk, encode it, decode it back.
  constexpr size_t kChunk = 512;
  float v[kChunk];
  float d[kChunk];
  auto* out = static_cast<uint16_t*>(wire);
  const bool fp16 = codec == Codec::kFp16;
  for (size_t lo = 0; lo < n; lo += kChunk) {
    const size_t len = std::min(kChunk, n - lo);
    float* r = residual + lo;
    for (size_t i = 0; i < len; ++i) v[i] = x[lo + i] + r[i];
    (fp16 ? t.encodeFp16 : t.encodeBf16)(v, out + lo, len);
    (fp16 ? t.decodeFp16 : t.decodeBf16)(out + lo, d, len, false);
    for (size_t i = 0; i < len; ++i) {
      const bool finite = detail::absBits(v[i]) < detail::kInfBits;
      r[i] = finite ? v[i] - d[i] : 0.0f;
    }
  }
  return true;
}

}  // namespace tide::codec
