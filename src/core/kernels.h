// Reduction and copy kernels, chosen by memory type.
//
// The host table lives in algorithms/kernels and registers itself; a device
// table (CUDA) registers under MemType::Device. Algorithms reach kernels only
// through this table.
//
// Numerics: 16- and 8-bit floats (fp16, bf16, fp8 e4m3/e5m2) are widened to
// fp32, combined, and rounded back to nearest-even (fp8: saturating to the
// largest finite value). Integer arithmetic wraps (two's complement). Max/Min
// of floats follow fmax/fmin except that a NaN operand yields NaN.
// Every kernel is deterministic: the same inputs give the same bits.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/transport.h"
#include "core/types.h"

namespace tide {

struct KernelTable {
  MemType mem;
  // dst = a OP b element-wise (see ReduceFn). Null for an invalid pair.
  ReduceFn (*reduceFn)(tideDataType_t dtype, RedOp op);
  // dst[i] = src[i] * scalar, floating types only (Avg premultiply). dst may
  // equal src.
  void (*scale)(void* dst, const void* src, size_t count, tideDataType_t dtype, double scalar);
  // dst[i] = src[i] / divisor, integer types only (Avg post-divide,
  // truncating like C). dst may equal src.
  void (*divide)(void* dst, const void* src, size_t count, tideDataType_t dtype, uint64_t divisor);
  // memcpy for this memory type (non-overlapping).
  void (*copy)(void* dst, const void* src, size_t bytes);
};

// out = in(0) OP in(1) OP ... OP in(n-1), left to right: the rank-order
// combine of every one-step path (the oneshot algorithm, the small-collective
// lane), so that every rank and every route stores the same bits. `in(r)` is
// rank r's operand (a pointer); n >= 2; `out` may alias in(0) only.
template <class In>
void reduceInRankOrder(ReduceFn reduce, void* out, int n, size_t count, In in) {
  reduce(out, in(0), in(1), count);
  for (int r = 2; r < n; ++r) reduce(out, out, in(r), count);
}

}  // namespace tide
