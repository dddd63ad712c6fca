// Host (CPU) reduction kernels.
//
// The library reaches these only through the KernelTable registered for
// MemType::Host (core/kernels.h), which picks the best instruction set the
// CPU supports. The entry points below expose each instruction-set variant
// so that tests and benchmarks can compare them; all variants produce the
// same bits for the same inputs.
#pragma once

#include <cstddef>

#include "core/kernels.h"

namespace tide::kernels {

enum class HostIsa {
  kBaseline = 0,  // the compiler's default target (x86-64: SSE2)
  kAvx2 = 1,      // AVX2 + F16C (x86-64 only)
};

// Whether this CPU can run `isa`. Thread-safe.
bool hostIsaSupported(HostIsa isa);
// The variant the registered table uses.
HostIsa bestHostIsa();

// Like KernelTable::reduceFn, for one variant. Null for an invalid
// dtype/op pair or an unsupported `isa`.
ReduceFn hostReduceFn(tideDataType_t dtype, RedOp op, HostIsa isa);
// Like KernelTable::scale for one variant; no-op for an unsupported `isa`.
void hostScale(void* dst, const void* src, size_t count, tideDataType_t dtype, double scalar,
               HostIsa isa);

// The table registered at load time.
const KernelTable& hostKernelTable();

}  // namespace tide::kernels
