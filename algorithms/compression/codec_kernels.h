// Host codec kernels of gradient compression (issue 17): fp16/bf16 casts,
// int8/int4 symmetric block quantization, top-k by magnitude, each with an
// error-feedback variant. The compressed collectives call these; they know
// nothing of communicators.
//
// General contracts (every function below):
//  * Pure and thread-safe: no global state except the instruction-set choice,
//    made once per process (bestImpl()). Buffers belong to the caller; a
//    TopkScratch must not be shared by concurrent calls.
//  * Input and output buffers must not overlap, except where stated. An int
//    codec's `wire` may have any alignment; a 16-bit codec's wire, like every
//    float/uint16 buffer, needs its natural alignment (encode/decode refuse an
//    odd address).
//  * No exceptions escape; a function that can fail returns false and then
//    leaves its outputs unspecified (invalid arguments, out of memory).
//  * Every Impl gives the same bits for the same inputs (the scalar code is
//    the reference; the AVX2 code is checked against it), except which NaN
//    payload results when two NaNs are added. An Impl that this
//    CPU cannot run falls back to Impl::kScalar. Results assume the default
//    floating-point environment (round to nearest, no flush-to-zero).
//  * fp32 arithmetic is written out below: each operation rounds once; no
//    fused multiply-add is used (the AVX2 code is compiled without FMA so that
//    it matches the scalar reference).
//
// Wire layouts (a "chunk" is the n elements one encode call covers; all
// integers and floats little-endian, as the host stores them):
//  * fp16, bf16: n 16-bit codes; wireBytes = 2 n.
//  * int8, int4 with block size B: nb = ceil(n / B) fp32 scales (block j
//    covers elements [j B, min(n, (j + 1) B)); the last may be short), then
//    the codes: int8: n bytes, two's complement; int4: ceil(n / 2) bytes, two
//    two's-complement nibbles a byte, element 2i in the low nibble of byte i
//    and element 2i + 1 in the high nibble (the high nibble of the last byte is
//    0 when n is odd; nibble pairs may straddle two blocks when B is odd).
//    wireBytes = 4 nb + n (int8), 4 nb + ceil(n / 2) (int4).
//  * top-k: k TopkPair {uint32 index, fp32 value} (8 bytes each), ascending
//    index; topkWireBytes(k) = 8 k.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tide::codec {

// ---- Instruction-set variants -------------------------------------------------

enum class Impl : uint8_t {
  kScalar = 0,  // portable C++ (the reference)
  kAvx2 = 1,    // x86-64 AVX2 + F16C
};

// Whether this CPU runs `impl` (kScalar: always). Cached after the first call.
bool implSupported(Impl impl);
// The fastest supported variant, chosen by one CPUID check per process.
Impl bestImpl();

// ---- Codecs and their wire sizes --------------------------------------------------

enum class Codec : uint8_t { kFp16 = 0, kBf16 = 1, kInt8 = 2, kInt4 = 3 };

constexpr size_t kDefaultBlock = 256;
constexpr size_t kMaxBlock = size_t{1} << 20;

// Whether `block` is a valid block size (1..kMaxBlock).
constexpr bool validBlock(size_t block) { return block >= 1 && block <= kMaxBlock; }

// Exact byte count of the wire layout of n elements (top of this file); 0 for
// n == 0, and 0 for an int codec with an invalid block. `block` is ignored by
// fp16 and bf16. n must be below 2^60.
size_t wireBytes(Codec codec, size_t n, size_t block = kDefaultBlock);

// ---- fp16 / bf16 casts ----------------------------------------------------------------
// Encode: round to nearest, ties to even. A finite input never becomes an
// infinity: fp16 saturates finite magnitudes above 65504 to +-65504, bf16
// finite magnitudes above its largest finite value (0x7f7f, about 3.39e38)
// to that value. +-Inf stays +-Inf; NaN gives a quiet NaN (sign and upper
// payload bits kept); subnormal inputs round like any other value (fp16
// subnormals are produced; nothing is flushed). Decode is exact.
// decodeAcc: acc[i] += decode(in[i]), one fp32 addition per element.

void encodeFp16(const float* x, uint16_t* out, size_t n, Impl impl = bestImpl());
void decodeFp16(const uint16_t* in, float* y, size_t n, Impl impl = bestImpl());
void decodeAccFp16(const uint16_t* in, float* acc, size_t n, Impl impl = bestImpl());
void encodeBf16(const float* x, uint16_t* out, size_t n, Impl impl = bestImpl());
void decodeBf16(const uint16_t* in, float* y, size_t n, Impl impl = bestImpl());
void decodeAccBf16(const uint16_t* in, float* acc, size_t n, Impl impl = bestImpl());

// ---- Stochastic rounding ---------------------------------------------------------------
// A counter-based generator: element i of an encode call draws
//   u_i = draw(seed, counter + i) in [0, 1), a multiple of 2^-24,
// a hash of the seed and the 64-bit position counter + i (wrapping), so the
// result of element i depends only on (seed, counter + i): deterministic,
// independent of the Impl and of how a buffer is split into calls. The caller
// advances the counter (by n after an n-element call, so that consecutive
// calls never reuse a position).

struct Rounding {
  bool stochastic = false;  // false: round to nearest, ties to even
  uint64_t seed = 0;
  uint64_t counter = 0;
};

// The 32-bit hash behind draw(): u = (drawBits(seed, pos) >> 8) * 2^-24.
uint32_t drawBits(uint64_t seed, uint64_t pos);

// ---- int8 / int4 block quantization ----------------------------------------------------
// Per block of B elements (qmax = 127 for int8, 7 for int4), with amax the
// largest |x| of the block:
//  * amax == 0, or 0 < amax < 2^-112 ("tiny"): scale 0, every code 0 (a tiny
//    block decodes to zeros: absolute error < 2^-112).
//  * finite amax >= 2^-112: scale s = amax / qmax, inv = qmax / amax (two fp32
//    divisions), t = x * inv; nearest: q = rint(t) (ties to even); stochastic:
//    q = sign(t) (floor(|t|) + (u < |t| - floor(|t|))), unbiased up to 2^-24
//    of a step; q is clamped to [-qmax, qmax] (-8 is never produced in int4).
//    Error |x - q s| <= s / 2 (nearest) or < s (stochastic), plus fp32
//    rounding of a few ulp of amax.
//  * a NaN in the block: scale NaN, codes 0: the whole block decodes to NaN.
//  * otherwise, an Inf in the block: scale +Inf, code +qmax at +Inf, -qmax at
//    -Inf and 0 elsewhere: those elements decode to +-Inf, the block's finite
//    elements to NaN (Inf * 0). A sum over such blocks is NaN or Inf wherever
//    the uncompressed sum of the inputs would be, and possibly at the block's
//    other elements too.
// Decode of a code q with scale s: y = float(q) * s (one fp32 product; any
// wire contents decode without fault, int4 nibble 0x8 as -8). A finite block
// whose amax is within an ulp or so of FLT_MAX may decode its largest
// elements to +-Inf (qmax * s rounds past FLT_MAX).
// quantize/dequantize accept kInt8 and kInt4 and return false for another
// codec, an invalid block, or null pointers with n > 0 (n == 0: true, nothing
// written). `wire` holds wireBytes(codec, n, block) bytes.

bool quantize(Codec codec, const float* x, size_t n, size_t block, const Rounding& rounding,
              void* wire, Impl impl = bestImpl());
// y[i] = decode(i).
bool dequantize(Codec codec, const void* wire, size_t n, size_t block, float* y,
                Impl impl = bestImpl());
// acc[i] += decode(i): one fp32 product and one fp32 addition per element.
bool dequantizeAcc(Codec codec, const void* wire, size_t n, size_t block, float* acc,
                   Impl impl = bestImpl());

// ---- Any codec: the compressed collectives' entry points -----------------------------
// encode: fp16/bf16 casts (`rounding` and `block` ignored: always nearest) or
// quantize (int codecs). decode / decodeAcc likewise. Same return rules as
// quantize.
bool encode(Codec codec, const float* x, size_t n, size_t block, const Rounding& rounding,
            void* wire, Impl impl = bestImpl());
bool decode(Codec codec, const void* wire, size_t n, size_t block, float* y,
            Impl impl = bestImpl());
bool decodeAcc(Codec codec, const void* wire, size_t n, size_t block, float* acc,
               Impl impl = bestImpl());

// Error-feedback encode, fused in one pass: v = x + residual (one fp32
// addition); wire = encode(v); residual = v - decode(wire) (one fp32
// subtraction), so x + r_old == decode(wire) + r_new up to the rounding of
// those two operations. Elements of a non-finite block (int codecs) and
// non-finite v (fp16/bf16) get residual 0: a NaN/Inf step is not carried into
// the next one. `residual` holds n floats and may not overlap x or wire.
bool encodeFeedback(Codec codec, const float* x, float* residual, size_t n, size_t block,
                    const Rounding& rounding, void* wire, Impl impl = bestImpl());

// ---- Top-k by magnitude ----------------------------------------------------------------------
// Order: element a precedes b when |a| > |b|, compared as the fp32 magnitude
// bits (so every NaN ranks above +-Inf, NaNs among themselves by payload,
// -0 equals +0); equal magnitudes: the lower index first. The top-k are the
// first min(k, n) elements in that order: a unique set, written as TopkPair
// sorted by ascending index, value = x[index] (bits as they are).
// n must be at most 2^32 (indices are uint32). False: n too large, a null
// pointer with k, n > 0, or out of memory.

struct TopkPair {
  uint32_t index;
  float value;
};
static_assert(sizeof(TopkPair) == 8, "TopkPair is the 8-byte wire pair");

constexpr size_t topkWireBytes(size_t k) { return k * sizeof(TopkPair); }

// Working memory of the selections; keep one per thread to avoid reallocation.
struct TopkScratch {
  std::vector<uint64_t> keys;
  std::vector<uint32_t> candidates;
  std::vector<uint32_t> sample;
};

enum class TopkMethod : uint8_t {
  kExact = 0,    // one selection over all n elements
  kSampled = 1,  // threshold from a sample, selection among the candidates
  kAuto = 2,     // kSampled when n >= 32768 and k <= n / 8, else kExact
};

// The top-k of x[0..n) into out[0..min(k, n)). Every method returns exactly
// the same pairs. kSampled estimates a magnitude threshold from a fixed,
// deterministic sample of x (4096 magnitudes), collects the elements at or
// above it in one scan (AVX2 where available), lowers the threshold and
// rescans if fewer than k were found (at worst down to 0: all elements), and
// selects exactly among those candidates.
bool topk(const float* x, size_t n, size_t k, TopkPair* out, TopkScratch& scratch,
          TopkMethod method = TopkMethod::kAuto, Impl impl = bestImpl());

// dense[p.index] += p.value for each pair in order (duplicates accumulate);
// pairs with index >= n are skipped.
void scatterAcc(const TopkPair* pairs, size_t k, float* dense, size_t n);

// Error feedback: residual[i] += x[i] for all i; out = topk(residual, k);
// then residual[index] = 0 for each pair sent. x + r_old == dense(out) + r_new
// exactly up to the one addition. `residual` may not overlap x or out.
bool topkFeedback(const float* x, float* residual, size_t n, size_t k, TopkPair* out,
                  TopkScratch& scratch, TopkMethod method = TopkMethod::kAuto,
                  Impl impl = bestImpl());

}  // namespace tide::codec
