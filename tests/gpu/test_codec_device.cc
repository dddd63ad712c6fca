// GPU suite: the device codec kernels (src/cuda/codec_device.h) against the
// host scalar reference (algorithms/compression/codec_kernels.h), bit for
// bit: fp16/bf16 encode, decode, decode-accumulate and error-feedback
// encode; int8/int4 quantize (nearest and stochastic), dequantize,
// dequantize-accumulate and error-feedback quantize, at block sizes 1, 7,
// 33, 256, 5000 and 2^20, sizes 0, 1, odd and not divisible by the block, on
// gradient-like data (outliers, all-zero and tiny blocks, values near the
// fp16 and fp32 maxima, subnormals), data with NaN and Inf, random bit
// patterns and exact ties; decoding random wire bytes; the stochastic
// generator's bits; misaligned int wires. Floats compare equal when their
// bits are equal or both are NaN (a NaN entering an fp32 addition keeps its
// payload on the CPU, not on the GPU); so do 16-bit codes of the error
// feedback (their v = x + r may be such a NaN). Argument checks run first,
// also without a GPU; then exits 77 (skip) when the build has no CUDA
// kernels or no GPU is usable.
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "algorithms/compression/codec_kernels.h"
#include "cuda/codec_device.h"
#include "cuda/cuda_loader.h"

namespace {

using tide::codec::Codec;
using tide::codec::Impl;

static_assert(tide::cuda::kDeviceFp16 == static_cast<int>(Codec::kFp16));
static_assert(tide::cuda::kDeviceBf16 == static_cast<int>(Codec::kBf16));
static_assert(tide::cuda::kDeviceInt8 == static_cast<int>(Codec::kInt8));
static_assert(tide::cuda::kDeviceInt4 == static_cast<int>(Codec::kInt4));
static_assert(tide::cuda::kDeviceMaxBlock == tide::codec::kMaxBlock);

int failures = 0;
int cases = 0;

void fail(const std::string& what) {
  if (++failures <= 40) printf("FAIL %s\n", what.c_str());
}

void expect(bool ok, const std::string& what) {
  ++cases;
  if (!ok) fail(what);
}

// Argument checks (before anything touches the GPU), and without a GPU the
// clean refusal of a valid call.
void checkArguments() {
  using tide::cuda::deviceDecode;
  using tide::cuda::deviceEncode;
  float f[4] = {};
  alignas(16) uint8_t w[64] = {};
  expect(!deviceEncode(7, f, nullptr, 4, 256, false, 0, 0, w, nullptr).ok(), "codec 7 accepted");
  expect(!deviceEncode(-1, f, nullptr, 0, 256, false, 0, 0, w, nullptr).ok(), "codec -1 accepted");
  expect(!deviceEncode(2, f, nullptr, 4, 0, false, 0, 0, w, nullptr).ok(), "block 0 accepted");
  expect(!deviceDecode(3, w, 4, (size_t{1} << 20) + 1, f, nullptr).ok(), "block 2^20+1 accepted");
  expect(!deviceEncode(2, nullptr, nullptr, 4, 256, false, 0, 0, w, nullptr).ok(), "null x");
  expect(!deviceEncode(0, f, nullptr, 4, 0, false, 0, 0, nullptr, nullptr).ok(), "null wire");
  expect(!deviceDecode(1, w + 1, 4, 0, f, nullptr).ok(), "odd 16-bit wire accepted");
  expect(!deviceEncode(3, f, reinterpret_cast<float*>(w + 2), 4, 7, false, 0, 0, w, nullptr).ok(),
         "misaligned residual accepted");
  expect(!tide::cuda::deviceDecodeAcc(2, w, 4, 8, reinterpret_cast<float*>(w + 1), nullptr).ok(),
         "misaligned acc accepted");
  expect(tide::cuda::deviceDecodeAcc(2, nullptr, 0, 8, nullptr, nullptr).ok(), "n = 0 refused");
  expect(deviceEncode(0, nullptr, nullptr, 0, 0, false, 0, 0, nullptr, nullptr).ok(),
         "fp16 n = 0 refused");
  if (!tide::cuda::gpuUsable() || !tide::cuda::deviceCodecKernelsBuilt()) {
    const tide::Status s = deviceEncode(2, f, nullptr, 4, 2, false, 0, 0, w, nullptr);
    expect(s.code() == tideInvalidUsage, "valid call without GPU/kernels: " + s.message());
  }
}

}  // namespace

#if TIDE_TEST_CUDA_KERNELS
namespace {

uint32_t bitsOf(float f) { return std::bit_cast<uint32_t>(f); }
float floatOf(uint32_t u) { return std::bit_cast<float>(u); }

bool sameFloat(float a, float b) { return bitsOf(a) == bitsOf(b) || (a != a && b != b); }

long firstFloatDiff(const std::vector<float>& a, const std::vector<float>& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (!sameFloat(a[i], b[i])) return static_cast<long>(i);
  }
  return -1;
}

bool nan16(uint16_t code, Codec c) {
  return (code & 0x7fffu) > (c == Codec::kFp16 ? 0x7c00u : 0x7f80u);
}

// First differing byte; with nanCodes (16-bit codecs), codes that are both
// NaN count as equal.
long firstByteDiff(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b, Codec c,
                   bool nanCodes) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == b[i]) continue;
    if (nanCodes) {
      const size_t e = i & ~size_t{1};
      const auto ca = static_cast<uint16_t>(a[e] | (a[e + 1] << 8));
      const auto cb = static_cast<uint16_t>(b[e] | (b[e + 1] << 8));
      if (nan16(ca, c) && nan16(cb, c)) continue;
    }
    return static_cast<long>(i);
  }
  return -1;
}

enum Kind { kGrad = 0, kSpecial = 1, kBits = 2, kTies = 3, kKinds = 4 };

// Test data of one kind: runs of 1..400 elements, each of one character.
std::vector<float> makeData(size_t n, int kind, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  std::vector<float> x(n);
  size_t runLeft = 0;
  int runType = 0;
  int exp = 0;
  for (size_t i = 0; i < n; ++i) {
    if (kind == kBits) {
      x[i] = floatOf(static_cast<uint32_t>(rng()));
      continue;
    }
    if (kind == kTies) {
      // Halves up to 127 with 127 at every 64th element: int8's inv is 1,
      // so t lands on exact ties.
      const float h = static_cast<float>(static_cast<int>(rng() % 509) - 254) * 0.5f;
      x[i] = i % 64 == 0 ? (rng() & 1 ? 127.0f : -127.0f) : h;
      continue;
    }
    if (runLeft == 0) {
      runLeft = 1 + rng() % 400;
      runType = static_cast<int>(rng() % 24);
      exp = static_cast<int>(rng() % 81) - 40;
    }
    --runLeft;
    float v = std::ldexp(normal(rng), exp);
    if (runType == 0) v = 0.0f;                                             // zero run
    if (runType == 1) v = std::ldexp(normal(rng), -113 - int(rng() % 30));  // tiny, subnormal
    if (runType == 2) v = (rng() & 1 ? 1.0f : -1.0f) * (60000.0f + 10000.0f * unit(rng));
    if (runType == 3) v = std::ldexp(normal(rng), 100 + int(rng() % 28));  // huge, may be Inf
    if (runType == 4) v = (rng() & 1 ? 1.0f : -1.0f) * floatOf(0x7f7fffffu - rng() % 4);
    if (unit(rng) < 0.003f) v *= 1e4f;  // outlier
    if (unit(rng) < 0.002f) v = -0.0f;
    if (kind == kSpecial) {
      const uint64_t r = rng() % 1000;
      if (r == 0) v = floatOf(0x7f800001u + static_cast<uint32_t>(rng() % 0x7fffff));  // NaN
      if (r == 1) v = floatOf(0xffc00000u | static_cast<uint32_t>(rng() % 0x3fffff));  // -NaN
      if (r == 2) v = INFINITY;
      if (r == 3) v = -INFINITY;
    }
    x[i] = v;
  }
  // Fixed stretches: an all-zero one and a tiny one, each covering whole
  // 256-element blocks.
  if (kind <= kSpecial && n > 2000) {
    for (size_t i = 300; i < 900; ++i) x[i] = 0.0f;
    for (size_t i = 1000; i < 1600; ++i) x[i] = std::ldexp(normal(rng), -118);
  }
  return x;
}

// Residuals (or accumulators) to start from: small values, NaN/Inf in
// kSpecial, random bits in kBits.
std::vector<float> makeStart(size_t n, int kind, uint64_t seed) {
  std::mt19937_64 rng(seed ^ 0x5eed5eedull);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> r(n);
  for (size_t i = 0; i < n; ++i) {
    if (kind == kBits) {
      r[i] = floatOf(static_cast<uint32_t>(rng()));
      continue;
    }
    r[i] = std::ldexp(normal(rng), static_cast<int>(rng() % 30) - 20);
    if (kind == kSpecial && rng() % 500 == 0) r[i] = rng() & 1 ? NAN : -INFINITY;
  }
  return r;
}

using tide::cuda::CuDevPtr;
using tide::cuda::CuStream;

CuStream gStream = nullptr;

// Device memory (at least 16 bytes, plus 8 of slack for misaligned views).
struct Buf {
  CuDevPtr p = 0;
  explicit Buf(size_t bytes) {
    if (tide::cuda::driver()->cuMemAlloc(&p, bytes + 16) != tide::cuda::kCudaSuccess) {
      p = 0;
      fail("cuMemAlloc of " + std::to_string(bytes + 16) + " bytes");
    }
  }
  ~Buf() {
    if (p != 0) tide::cuda::driver()->cuMemFree(p);
  }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  void* at(size_t off = 0) const { return reinterpret_cast<void*>(p + off); }
  float* f() const { return static_cast<float*>(at()); }
};

bool copyBytes(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return true;
  const auto* api = tide::cuda::driver();
  return api->cuMemcpyAsync(reinterpret_cast<CuDevPtr>(dst), reinterpret_cast<CuDevPtr>(src), bytes,
                            gStream) == tide::cuda::kCudaSuccess &&
         tide::cuda::waitStream(gStream, 120) == tide::cuda::kCudaSuccess;
}

template <class T>
void up(const Buf& b, const std::vector<T>& v, size_t off = 0) {
  if (!copyBytes(b.at(off), v.data(), v.size() * sizeof(T))) fail("upload");
}

template <class T>
std::vector<T> down(const Buf& b, size_t count, size_t off = 0) {
  std::vector<T> v(count);
  if (!copyBytes(v.data(), b.at(off), count * sizeof(T))) fail("download");
  return v;
}

// A device call's status, then the stream's completion.
bool ran(const tide::Status& s, const std::string& what) {
  if (!s.ok()) {
    fail(what + ": " + s.message());
    return false;
  }
  if (tide::cuda::waitStream(gStream, 120) != tide::cuda::kCudaSuccess) {
    fail(what + ": the stream failed or timed out");
    return false;
  }
  return true;
}

void compareBytes(const std::vector<uint8_t>& want, const std::vector<uint8_t>& got, Codec c,
                  bool nanCodes, const std::string& what) {
  ++cases;
  const long d = firstByteDiff(want, got, c, nanCodes);
  if (d >= 0) {
    fail(what + ": wire byte " + std::to_string(d) + " host " + std::to_string(want[d]) +
         " device " + std::to_string(got[d]));
  }
}

void compareFloats(const std::vector<float>& want, const std::vector<float>& got,
                   const std::string& what) {
  ++cases;
  const long d = firstFloatDiff(want, got);
  if (d >= 0) {
    char buf[96];
    snprintf(buf, sizeof(buf), ": element %ld host %08x device %08x", d, bitsOf(want[d]),
             bitsOf(got[d]));
    fail(what + buf);
  }
}

const char* codecName(Codec c) {
  static const char* const kNames[] = {"fp16", "bf16", "int8", "int4"};
  return kNames[static_cast<int>(c)];
}

// Every operation of one codec on one size, block, data kind and rounding.
void runCase(Codec c, size_t n, size_t block, int kind, bool stochastic) {
  const int ci = static_cast<int>(c);
  const bool isInt = c == Codec::kInt8 || c == Codec::kInt4;
  const uint64_t seed = n * 1000003ull + block * 7919ull + kind * 31ull + ci;
  static const uint64_t kCounters[] = {12345, (1ull << 32) - 100, ~0ull - 50};
  const tide::codec::Rounding r{stochastic, seed * 0x9e37ull, kCounters[seed % 3]};
  char name[128];
  snprintf(name, sizeof(name), "%s n=%zu block=%zu kind=%d %s", codecName(c), n, block, kind,
           stochastic ? "stochastic" : "nearest");
  const std::string what = name;
  const size_t wb = tide::codec::wireBytes(c, n, block);
  const size_t off = isInt && (kind & 1) != 0 ? 1 : 0;  // misaligned int wire
  const std::vector<float> x = makeData(n, kind, seed);
  Buf dx(4 * n), dres(4 * n), dy(4 * n), dw(wb);
  up(dx, x);

  // Encode.
  std::vector<uint8_t> hw(wb);
  expect(tide::codec::encode(c, x.data(), n, block, r, hw.data(), Impl::kScalar), what + " host");
  if (ran(tide::cuda::deviceEncode(ci, dx.f(), nullptr, n, block, stochastic, r.seed, r.counter,
                                   dw.at(off), gStream),
          what + " encode")) {
    compareBytes(hw, down<uint8_t>(dw, wb, off), c, false, what + " encode");
  }

  // Decode and decode-accumulate of the host's wire.
  up(dw, hw, off);
  std::vector<float> hy(n);
  tide::codec::decode(c, hw.data(), n, block, hy.data(), Impl::kScalar);
  if (ran(tide::cuda::deviceDecode(ci, dw.at(off), n, block, dy.f(), gStream), what + " decode")) {
    compareFloats(hy, down<float>(dy, n), what + " decode");
  }
  std::vector<float> acc = makeStart(n, kind, seed + 1);
  up(dy, acc);
  tide::codec::decodeAcc(c, hw.data(), n, block, acc.data(), Impl::kScalar);
  if (ran(tide::cuda::deviceDecodeAcc(ci, dw.at(off), n, block, dy.f(), gStream),
          what + " decodeAcc")) {
    compareFloats(acc, down<float>(dy, n), what + " decodeAcc");
  }

  // Error feedback.
  std::vector<float> res = makeStart(n, kind, seed + 2);
  up(dres, res);
  tide::codec::encodeFeedback(c, x.data(), res.data(), n, block, r, hw.data(), Impl::kScalar);
  if (ran(tide::cuda::deviceEncode(ci, dx.f(), dres.f(), n, block, stochastic, r.seed, r.counter,
                                   dw.at(off), gStream),
          what + " feedback")) {
    compareBytes(hw, down<uint8_t>(dw, wb, off), c, !isInt, what + " feedback");
    compareFloats(res, down<float>(dres, n), what + " feedback residual");
  }

  // Arbitrary wire contents decode alike (int: NaN/Inf/subnormal scales,
  // int4 nibble 0x8; 16-bit: every code).
  if (kind == kBits && !stochastic) {
    std::mt19937_64 rng(seed);
    for (auto& b : hw) b = static_cast<uint8_t>(rng());
    up(dw, hw, off);
    tide::codec::decode(c, hw.data(), n, block, hy.data(), Impl::kScalar);
    if (ran(tide::cuda::deviceDecode(ci, dw.at(off), n, block, dy.f(), gStream),
            what + " decode of random bytes")) {
      compareFloats(hy, down<float>(dy, n), what + " decode of random bytes");
    }
  }
}

void checkDraws() {
  const size_t n = 5000;
  Buf d(4 * n);
  for (uint64_t seed : {0ull, 1ull, 0xdeadbeef12345678ull}) {
    for (uint64_t counter : {0ull, (1ull << 32) - 1000, ~0ull - 1000}) {
      if (!ran(
              tide::cuda::deviceDrawBits(seed, counter, static_cast<uint32_t*>(d.at()), n, gStream),
              "draw")) {
        continue;
      }
      const std::vector<uint32_t> got = down<uint32_t>(d, n);
      ++cases;
      for (size_t i = 0; i < n; ++i) {
        if (got[i] != tide::codec::drawBits(seed, counter + i)) {
          fail("drawBits seed " + std::to_string(seed) + " position " +
               std::to_string(counter + i));
          break;
        }
      }
    }
  }
}

}  // namespace
#endif  // TIDE_TEST_CUDA_KERNELS

int main() {
  checkArguments();
  if (failures != 0) {
    printf("argument checks: %d failures\n", failures);
    return 1;
  }
#if !TIDE_TEST_CUDA_KERNELS
  printf("SKIP: built without CUDA kernels (configure with -Dcuda=enabled and nvcc on PATH)\n");
  return 77;
#else
  const auto& probe = tide::cuda::probeGpu();
  if (probe.state != tide::cuda::GpuState::kUsable) {
    printf("SKIP: no GPU (%s: %s)\n", tide::cuda::gpuStateName(probe.state), probe.detail.c_str());
    return 77;
  }
  std::string why;
  if (tide::cuda::ensureContext(&why) < 0) {
    printf("FAIL: %s\n", why.c_str());
    return 1;
  }
  if (tide::cuda::driver()->cuStreamCreate(&gStream, tide::cuda::kStreamNonBlocking) != 0) {
    printf("FAIL: cuStreamCreate\n");
    return 1;
  }
  checkDraws();
  const size_t sizes[] = {0, 1, 2, 7, 31, 255, 256, 257, 1000, 4099, 65537, (size_t{1} << 20) + 3};
  const size_t blocks[] = {1, 7, 33, 256, 5000, size_t{1} << 20};
  for (size_t n : sizes) {
    for (int kind = 0; kind < kKinds; ++kind) {
      runCase(Codec::kFp16, n, 0, kind, false);
      runCase(Codec::kBf16, n, 0, kind, false);
      for (Codec c : {Codec::kInt8, Codec::kInt4}) {
        for (size_t block : blocks) {
          runCase(c, n, block, kind, false);
          runCase(c, n, block, kind, true);
        }
      }
    }
  }
  tide::cuda::driver()->cuStreamDestroy(gStream);
  printf("device codecs: %d cases, %d failures\n", cases, failures);
  return failures == 0 ? 0 : 1;
#endif
}
