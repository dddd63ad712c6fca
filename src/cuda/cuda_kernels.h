// Device (CUDA) kernel table: core/kernels.h's KernelTable for
// MemType::Device, backed by the kernels of cuda_kernels.cu.
//
// Registered at load time only when the machine has a usable GPU (a cheap
// check for the NVIDIA device nodes first, then cuda_loader's probe). Each
// call launches on the legacy default stream of the calling thread's current
// context (the primary context of device 0 when there is none) and blocks
// until the kernel has finished, bounded by TIDE_TIMEOUT. The fat binary is
// loaded once per context, on first use. Thread-safe.
#pragma once

#include <string>

#include "core/kernels.h"

namespace tide::cuda {

// The table (also when no GPU is usable; its calls then do nothing and
// record an error). Null when the build has no CUDA kernels.
const KernelTable* deviceKernelTable();

// First launch/wait error any kernel call hit since the last call to this
// function (the KernelTable entry points return void); empty when none.
// Clears the record.
std::string takeDeviceKernelError();

// Block size and grid the kernels are launched with for `bytes` of data on
// the current device (exposed for the benchmark in tests/gpu).
void launchShape(size_t bytes, unsigned* grid, unsigned* block);

}  // namespace tide::cuda
