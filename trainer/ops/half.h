// Mixed precision's storage formats (docs/zero.md, "Mixed precision"): fp32
// to and from bfloat16 and IEEE binary16 (fp16), both as uint16_t bits. The
// model computes in fp32 (OpenBLAS sgemm); the parameters and gradients are
// stored and communicated in 16 bits, the optimizer's master weights in fp32.
//
// Contracts (fast and ref:: alike, bit for bit on every non-NaN input):
// rounding to nearest, ties to even (the FPU's default mode, which
// tide-train never changes); overflow gives ±inf, as IEEE; NaN stays a
// (quiet) NaN; fp16 keeps subnormals. Thread-safe, no allocation; n 0 is a no-op. The fast versions
// are compiled for AVX-512, AVX2+F16C and baseline x86-64 (vec_math.h).
#pragma once

#include <cstddef>
#include <cstdint>

namespace tide_train::ops {

enum class Half { kBf16, kFp16 };
const char* name(Half h);  // "bf16", "fp16"

// out[i] = round(in[i]).
void to_half(Half h, const float* in, uint16_t* out, size_t n);
// out[i] = in[i] (exact).
void from_half(Half h, const uint16_t* in, float* out, size_t n);
// acc[i] = round(float(acc[i]) + in[i]): a gradient accumulated in 16 bits.
void add_to_half(Half h, const float* in, uint16_t* acc, size_t n);
// Σ float(in[i])², in double per 1024-element block. *overflow (when not
// null) is set when an element is ±inf or NaN, or, for fp16, at the largest
// finite magnitude 65504 (a saturated sum: the compressed collectives
// saturate rather than overflow, docs/compression.md); it is never cleared.
double half_sum_squares(Half h, const uint16_t* in, size_t n, bool* overflow);

namespace ref {
// The plain versions: the value rounded in double arithmetic (frexp, a
// quantum, nearbyint), then encoded field by field.
uint16_t to_half(Half h, float x);
float from_half(Half h, uint16_t bits);
}  // namespace ref

}  // namespace tide_train::ops
