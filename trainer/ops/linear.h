// Linear layer y = x·Wᵀ + b (PyTorch's nn.Linear layout: W is [OC, IC], row
// major), forward and backward side by side. The fast versions call OpenBLAS
// sgemm (one thread per rank: the caller sets it); the ref:: versions are plain
// loops with double accumulation, the oracle of the unit tests.
//
// Contract of every backward in trainer/ops: gradients ACCUMULATE (+=) into
// their outputs, so the caller zeroes them (activation gradients each micro-
// batch, parameter gradients each step). A null output is skipped.
#pragma once

namespace tide_train::ops {

// out[N, OC] = inp[N, IC] · w[OC, IC]ᵀ + bias[OC] (bias may be null).
// out is overwritten.
void linear_forward(float* out, const float* inp, const float* w, const float* bias, int N, int IC,
                    int OC);
// dinp[N, IC] += dout[N, OC] · w;  dw[OC, IC] += doutᵀ · inp;  dbias[OC] += Σₙ dout.
// Any of dinp, dw, dbias may be null (not wanted). set_dinp: dinp is
// overwritten (=) instead (the caller need not zero a fresh buffer).
void linear_backward(float* dinp, float* dw, float* dbias, const float* dout, const float* inp,
                     const float* w, int N, int IC, int OC, bool set_dinp = false);

namespace ref {
void linear_forward(float* out, const float* inp, const float* w, const float* bias, int N, int IC,
                    int OC);
void linear_backward(float* dinp, float* dw, float* dbias, const float* dout, const float* inp,
                     const float* w, int N, int IC, int OC, bool set_dinp = false);
}  // namespace ref

}  // namespace tide_train::ops
