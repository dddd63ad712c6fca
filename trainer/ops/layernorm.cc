// LayerNorm (ops/layernorm.h): nn.LayerNorm over the last dimension with
// weight and bias, eps 1e-5, biased variance. The fast versions work a row at
// a time with float sums over 8 lanes (two-pass variance: mean first, then the
// squared deviations; rows of C ≤ a few thousand stay well within float's
// accuracy); the ref:: versions accumulate in double.
#include "ops/layernorm.h"

#include <cmath>
#include <cstddef>
#include <vector>

#include "ops/vec_math.h"

namespace tide_train::ops {

namespace {

// Σ x[i], 8 lanes.
[[gnu::always_inline]] inline float row_sum(const float* __restrict x, int n) {
  float acc[8] = {};
  int i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += x[i + j];
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) s += x[i];
  return s;
}

// Σ (x[i] − m)², 8 lanes.
[[gnu::always_inline]] inline float row_sq_dev(const float* __restrict x, float m, int n) {
  float acc[8] = {};
  int i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) {
      const float d = x[i + j] - m;
      acc[j] += d * d;
    }
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) s += (x[i] - m) * (x[i] - m);
  return s;
}

// y[i] = (x[i] − m)·s·w[i] + b[i].
[[gnu::always_inline]] inline void row_normalize(float* __restrict y, const float* __restrict x,
                                                 const float* __restrict w,
                                                 const float* __restrict b, float m, float s,
                                                 int n) {
  int i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) y[i + j] = (x[i + j] - m) * s * w[i + j] + b[i + j];
  for (; i < n; ++i) y[i] = (x[i] - m) * s * w[i] + b[i];
}

// dx[i] += s·(dy·w − a − x̂·c) with x̂ = (x − m)·s, where a = mean(dy·w) and
// c = mean(dy·w·x̂) over the row.
[[gnu::always_inline]] inline void row_dinp(float* __restrict dx, const float* __restrict dy,
                                            const float* __restrict x, const float* __restrict w,
                                            float m, float s, int n) {
  float acc_a[8] = {};
  float acc_c[8] = {};
  int i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) {
      const float g = dy[i + j] * w[i + j];
      acc_a[j] += g;
      acc_c[j] += g * ((x[i + j] - m) * s);
    }
  float a = ((acc_a[0] + acc_a[1]) + (acc_a[2] + acc_a[3])) +
            ((acc_a[4] + acc_a[5]) + (acc_a[6] + acc_a[7]));
  float c = ((acc_c[0] + acc_c[1]) + (acc_c[2] + acc_c[3])) +
            ((acc_c[4] + acc_c[5]) + (acc_c[6] + acc_c[7]));
  for (; i < n; ++i) {
    const float g = dy[i] * w[i];
    a += g;
    c += g * ((x[i] - m) * s);
  }
  a /= static_cast<float>(n);
  c /= static_cast<float>(n);
  i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j)
      dx[i + j] += s * (dy[i + j] * w[i + j] - a - ((x[i + j] - m) * s) * c);
  for (; i < n; ++i) dx[i] += s * (dy[i] * w[i] - a - ((x[i] - m) * s) * c);
}

// dw[i] += dy[i]·(x[i] − m)·s.
[[gnu::always_inline]] inline void row_dw(float* __restrict dw, const float* __restrict dy,
                                          const float* __restrict x, float m, float s, int n) {
  int i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) dw[i + j] += dy[i + j] * ((x[i + j] - m) * s);
  for (; i < n; ++i) dw[i] += dy[i] * ((x[i] - m) * s);
}

// db[i] += dy[i].
[[gnu::always_inline]] inline void row_db(float* __restrict db, const float* __restrict dy, int n) {
  int i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) db[i + j] += dy[i + j];
  for (; i < n; ++i) db[i] += dy[i];
}

TIDE_OPS_CLONES void forward_rows(float* out, float* mean, float* rstd, const float* inp,
                                  const float* w, const float* b, int N, int C) {
  const size_t c = static_cast<size_t>(C);
  const float inv_c = 1.0f / static_cast<float>(C);
  for (int n = 0; n < N; ++n) {
    const float* x = inp + n * c;
    const float m = row_sum(x, C) * inv_c;
    const float s = 1.0f / std::sqrt(row_sq_dev(x, m, C) * inv_c + kLayerNormEps);
    row_normalize(out + n * c, x, w, b, m, s, C);
    mean[n] = m;
    rstd[n] = s;
  }
}

TIDE_OPS_CLONES void backward_rows(float* dinp, float* dw, float* db, const float* dout,
                                   const float* inp, const float* w, const float* mean,
                                   const float* rstd, int N, int C) {
  const size_t c = static_cast<size_t>(C);
  for (int n = 0; n < N; ++n) {
    const float* x = inp + n * c;
    const float* dy = dout + n * c;
    if (dinp != nullptr) row_dinp(dinp + n * c, dy, x, w, mean[n], rstd[n], C);
    if (dw != nullptr) row_dw(dw, dy, x, mean[n], rstd[n], C);
    if (db != nullptr) row_db(db, dy, C);
  }
}

}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w,
                       const float* b, int N, int C) {
  if (C > 0) forward_rows(out, mean, rstd, inp, w, b, N, C);
}

void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                        const float* w, const float* mean, const float* rstd, int N, int C) {
  if (C > 0) backward_rows(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
}

namespace ref {

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w,
                       const float* b, int N, int C) {
  for (int n = 0; n < N; ++n) {
    const float* x = inp + static_cast<size_t>(n) * C;
    double m = 0.0;
    for (int i = 0; i < C; ++i) m += x[i];
    m /= C;
    double v = 0.0;
    for (int i = 0; i < C; ++i) v += (x[i] - m) * (x[i] - m);
    v /= C;
    const double s = 1.0 / std::sqrt(v + static_cast<double>(kLayerNormEps));
    for (int i = 0; i < C; ++i)
      out[static_cast<size_t>(n) * C + i] = static_cast<float>((x[i] - m) * s * w[i] + b[i]);
    mean[n] = static_cast<float>(m);
    rstd[n] = static_cast<float>(s);
  }
}

void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                        const float* w, const float* mean, const float* rstd, int N, int C) {
  std::vector<double> gw(static_cast<size_t>(C), 0.0);
  std::vector<double> gb(static_cast<size_t>(C), 0.0);
  for (int n = 0; n < N; ++n) {
    const float* x = inp + static_cast<size_t>(n) * C;
    const float* dy = dout + static_cast<size_t>(n) * C;
    const double m = mean[n];
    const double s = rstd[n];
    double a = 0.0;
    double c = 0.0;
    for (int i = 0; i < C; ++i) {
      const double xhat = (x[i] - m) * s;
      a += static_cast<double>(dy[i]) * w[i];
      c += static_cast<double>(dy[i]) * w[i] * xhat;
      gw[i] += dy[i] * xhat;
      gb[i] += dy[i];
    }
    a /= C;
    c /= C;
    if (dinp != nullptr) {
      for (int i = 0; i < C; ++i) {
        const double xhat = (x[i] - m) * s;
        dinp[static_cast<size_t>(n) * C + i] +=
            static_cast<float>(s * (static_cast<double>(dy[i]) * w[i] - a - xhat * c));
      }
    }
  }
  for (int i = 0; i < C; ++i) {
    if (dw != nullptr) dw[i] += static_cast<float>(gw[i]);
    if (db != nullptr) db[i] += static_cast<float>(gb[i]);
  }
}

}  // namespace ref

}  // namespace tide_train::ops
