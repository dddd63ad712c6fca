// Element-wise ops: exact GELU (erf; PyTorch's nn.GELU() default) and the
// residual add, forward and backward side by side; ref:: versions in double.
// Backward accumulates (+=) as every op in trainer/ops (see linear.h).
#pragma once

#include <cstddef>

namespace tide_train::ops {

// out[i] = 0.5·x·(1 + erf(x/√2)); out is overwritten.
void gelu_forward(float* out, const float* inp, size_t n);
// dinp[i] += dout[i] · GELU'(inp[i]) (set: = instead, dinp need not be zeroed).
void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n, bool set = false);
// out[i] = a[i] + b[i] (out may alias a or b).
void residual_forward(float* out, const float* a, const float* b, size_t n);
// da[i] += dout[i]; db[i] += dout[i].
void residual_backward(float* da, float* db, const float* dout, size_t n);

namespace ref {
void gelu_forward(float* out, const float* inp, size_t n);
void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n, bool set = false);
}  // namespace ref

}  // namespace tide_train::ops
