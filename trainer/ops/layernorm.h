// LayerNorm over the last dimension (PyTorch's nn.LayerNorm with weight and
// bias, eps 1e-5, biased variance), forward and backward side by side; the
// ref:: versions are plain loops with double accumulation. Backward
// accumulates (+=) as every op in trainer/ops (see linear.h).
#pragma once

namespace tide_train::ops {

constexpr float kLayerNormEps = 1e-5f;

// out[N, C] = (inp − mean) · rstd · w + b; mean[N] and rstd[N] are saved for
// the backward (rstd = 1/sqrt(var + eps)). out, mean, rstd are overwritten.
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w,
                       const float* b, int N, int C);
// dinp[N, C] += ∂L/∂inp;  dw[C] += Σₙ dout·x̂;  db[C] += Σₙ dout. dw, db may be null.
void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                        const float* w, const float* mean, const float* rstd, int N, int C);

namespace ref {
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w,
                       const float* b, int N, int C);
void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                        const float* w, const float* mean, const float* rstd, int N, int C);
}  // namespace ref

}  // namespace tide_train::ops
