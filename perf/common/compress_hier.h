// The per-element bound of the hierarchical compressed All-Reduce (the
// library's cmp_hier row, on several nodes of equal size), for
// compress_check.cc; docs/compression.md, "Error bounds".
#ifndef TIDE_PERF_COMMON_COMPRESS_HIER_H_
#define TIDE_PERF_COMMON_COMPRESS_HIER_H_

#include <cstddef>

#include "common/compress.h"
#include "tide/compress.h"

namespace tide_perf {

struct HierCodec {
  tideCodec_t codec;  // fp16, bf16, int8 or int4 (others: nothing to do)
  size_t block;       // int8/int4 elements per scale
  double h;           // 1/2: nearest; 1: stochastic rounding
  bool avg;
};

// Raises out[j] to the bound of element j of one All-Reduce segment of `len`
// elements (before the rounding of the result's datatype), where rank r's
// input element j is x[r * len + j].
void HierBound(const HierCodec& codec, const CompressNodes& nodes, const double* x, size_t len,
               double* out);

}  // namespace tide_perf

#endif  // TIDE_PERF_COMMON_COMPRESS_HIER_H_
