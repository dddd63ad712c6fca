// Linear layer (ops/linear.h): y = x·Wᵀ + b with W in nn.Linear's [OC, IC]
// layout. The fast versions are one OpenBLAS sgemm per product (beta = 1 where
// the contract accumulates) plus a column-sum loop for the bias gradient; the
// ref:: versions are triple loops with double accumulators.
#include "ops/linear.h"

#include <cblas.h>

#include <algorithm>
#include <cstddef>
#include <cstring>

namespace tide_train::ops {

namespace {

// y[i] += x[i], i < n, in blocks of 8 the compiler vectorizes.
void add_into(float* __restrict y, const float* __restrict x, int n) {
  int i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) y[i + j] += x[i + j];
  for (; i < n; ++i) y[i] += x[i];
}

// y[i] += a[i] + b[i] + c[i] + d[i]: four rows per pass over y.
void add4_into(float* __restrict y, const float* __restrict a, const float* __restrict b,
               const float* __restrict c, const float* __restrict d, int n) {
  int i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) y[i + j] += (a[i + j] + b[i + j]) + (c[i + j] + d[i + j]);
  for (; i < n; ++i) y[i] += (a[i] + b[i]) + (c[i] + d[i]);
}

}  // namespace

void linear_forward(float* out, const float* inp, const float* w, const float* bias, int N, int IC,
                    int OC) {
  if (N <= 0 || OC <= 0) return;
  const size_t oc = static_cast<size_t>(OC);
  if (bias != nullptr) {
    for (int n = 0; n < N; ++n) std::memcpy(out + n * oc, bias, oc * sizeof(float));
  } else if (IC <= 0) {
    std::memset(out, 0, static_cast<size_t>(N) * oc * sizeof(float));
  }
  if (IC <= 0) return;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, IC, 1.0f, inp, IC, w, IC,
              bias != nullptr ? 1.0f : 0.0f, out, OC);
}

void linear_backward(float* dinp, float* dw, float* dbias, const float* dout, const float* inp,
                     const float* w, int N, int IC, int OC, bool set_dinp) {
  if (N <= 0) return;
  if (OC <= 0) {
    if (set_dinp && dinp != nullptr && IC > 0)
      std::fill(dinp, dinp + static_cast<size_t>(N) * IC, 0.0f);
    return;
  }
  if (IC > 0) {
    // dinp[N, IC] (+)= dout[N, OC] · w[OC, IC]
    if (dinp != nullptr)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, IC, OC, 1.0f, dout, OC, w, IC,
                  set_dinp ? 0.0f : 1.0f, dinp, IC);
    // dw[OC, IC] += dout[N, OC]ᵀ · inp[N, IC]
    if (dw != nullptr)
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, IC, N, 1.0f, dout, OC, inp, IC, 1.0f,
                  dw, IC);
  }
  if (dbias != nullptr) {
    // Float column sums straight into dbias; at most a few thousand rows, so
    // the rounding stays at the level of the sgemm's own accumulation.
    const size_t oc = static_cast<size_t>(OC);
    int n = 0;
    for (; n + 4 <= N; n += 4) {
      const float* r = dout + n * oc;
      add4_into(dbias, r, r + oc, r + 2 * oc, r + 3 * oc, OC);
    }
    for (; n < N; ++n) add_into(dbias, dout + n * oc, OC);
  }
}

namespace ref {

void linear_forward(float* out, const float* inp, const float* w, const float* bias, int N, int IC,
                    int OC) {
  for (int n = 0; n < N; ++n) {
    for (int o = 0; o < OC; ++o) {
      double acc = bias != nullptr ? bias[o] : 0.0;
      for (int i = 0; i < IC; ++i)
        acc += static_cast<double>(inp[static_cast<size_t>(n) * IC + i]) *
               w[static_cast<size_t>(o) * IC + i];
      out[static_cast<size_t>(n) * OC + o] = static_cast<float>(acc);
    }
  }
}

void linear_backward(float* dinp, float* dw, float* dbias, const float* dout, const float* inp,
                     const float* w, int N, int IC, int OC, bool set_dinp) {
  if (dinp != nullptr) {
    if (set_dinp) std::fill(dinp, dinp + static_cast<size_t>(N) * IC, 0.0f);
    for (int n = 0; n < N; ++n) {
      for (int i = 0; i < IC; ++i) {
        double acc = 0.0;
        for (int o = 0; o < OC; ++o)
          acc += static_cast<double>(dout[static_cast<size_t>(n) * OC + o]) *
                 w[static_cast<size_t>(o) * IC + i];
        dinp[static_cast<size_t>(n) * IC + i] += static_cast<float>(acc);
      }
    }
  }
  if (dw != nullptr) {
    for (int o = 0; o < OC; ++o) {
      for (int i = 0; i < IC; ++i) {
        double acc = 0.0;
        for (int n = 0; n < N; ++n)
          acc += static_cast<double>(dout[static_cast<size_t>(n) * OC + o]) *
                 inp[static_cast<size_t>(n) * IC + i];
        dw[static_cast<size_t>(o) * IC + i] += static_cast<float>(acc);
      }
    }
  }
  if (dbias != nullptr) {
    for (int o = 0; o < OC; ++o) {
      double acc = 0.0;
      for (int n = 0; n < N; ++n) acc += dout[static_cast<size_t>(n) * OC + o];
      dbias[o] += static_cast<float>(acc);
    }
  }
}

}  // namespace ref

}  // namespace tide_train::ops
