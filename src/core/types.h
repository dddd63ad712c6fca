// Small helpers over the public enums.
#pragma once

#include <cstddef>

#include "tide/tide.h"

namespace tide {

// Bytes per element; 0 for an invalid type.
size_t dtypeSize(tideDataType_t t);
const char* dtypeName(tideDataType_t t);  // "float32", ...; "invalid" when bad
bool dtypeIsFloat(tideDataType_t t);      // fp16/bf16/fp32/fp64/fp8
bool dtypeValid(int t);

// Reduction operators the kernels implement. Avg is lowered by the core to
// Sum plus a premultiply (floating types) or a post-divide (integers).
enum class RedOp : unsigned char { Sum = 0, Prod = 1, Max = 2, Min = 3 };
const char* opName(tideRedOp_t op);  // "sum", ...
bool opValid(int op);

// How a rank waits for its peers (the communicator's TIDE_SPIN_US and
// TIDE_YIELD_US): spin, then yield, then sleep.
struct WaitTuning {
  int spinUs = 20;
  int yieldUs = 200;
};

}  // namespace tide
