// Vocabulary-parallel softmax cross-entropy pieces (ops/cross_entropy.h). The
// fast versions sweep each row of the slice once per step: the max, then the
// sum of exponentials (a branch-free polynomial exp in blocks of 8 that
// vectorize; partial sums over 512 columns go into a double, so long rows
// keep their accuracy), then the gradient. The ref:: versions work in double
// with std::exp.
//
// A target outside [v0, v0 + nvalid) (another rank's token, a padding column,
// or a negative id) contributes target 0 and no −1 in the gradient here, as
// the header specifies; there is no ignore_index.
#include "ops/cross_entropy.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include "ops/vec_math.h"

namespace tide_train::ops {

namespace {

// max of x[0, n), −inf when n == 0; a (positive) NaN wins.
TIDE_OPS_CLONES float row_max(const float* __restrict x, int n) {
  int32_t mk[8];
  for (int32_t& k : mk) k = order_key(-std::numeric_limits<float>::infinity());
  int i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) mk[j] = std::max(mk[j], order_key(x[i + j]));
  for (; i < n; ++i) mk[0] = std::max(mk[0], order_key(x[i]));
  for (int j = 1; j < 8; ++j) mk[0] = std::max(mk[0], mk[j]);
  return from_order_key(mk[0]);
}

// Σ exp(x[i] − m) over i < n, float lanes within a chunk, double across chunks.
TIDE_OPS_CLONES double row_sum_exp(const float* __restrict x, float m, int n) {
  constexpr int kChunk = 512;
  double total = 0.0;
  for (int c0 = 0; c0 < n; c0 += kChunk) {
    const int c1 = std::min(n, c0 + kChunk);
    float acc[8] = {};
    int i = c0;
    for (; i + 8 <= c1; i += 8)
      for (int j = 0; j < 8; ++j) acc[j] += fast_exp(x[i + j] - m);
    float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < c1; ++i) s += fast_exp(x[i] - m);
    total += s;
  }
  return total;
}

// d[i] = exp(x[i] − m)·f.
TIDE_OPS_CLONES void row_scaled_exp(float* __restrict d, const float* __restrict x, float m,
                                    float f, int n) {
  int i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) d[i + j] = fast_exp(x[i + j] - m) * f;
  for (; i < n; ++i) d[i] = fast_exp(x[i] - m) * f;
}

// The target's column in this slice, or −1 when another rank (or nobody) has it.
inline int local_target(int tok, int v0, int nvalid) {
  const int v = tok - v0;
  return v >= 0 && v < nvalid ? v : -1;
}

}  // namespace

void xent_local_max(float* rowmax, const float* logits, int N, int Vl, int nvalid) {
  for (int n = 0; n < N; ++n) rowmax[n] = row_max(logits + static_cast<size_t>(n) * Vl, nvalid);
}

void xent_local_sums(float* sumexp, float* target, const float* logits, const float* rowmax,
                     const int* targets, int v0, int N, int Vl, int nvalid) {
  for (int n = 0; n < N; ++n) {
    const float* l = logits + static_cast<size_t>(n) * Vl;
    sumexp[n] = static_cast<float>(row_sum_exp(l, rowmax[n], nvalid));
    const int v = local_target(targets[n], v0, nvalid);
    target[n] = v >= 0 ? l[v] : 0.0f;
  }
}

void xent_backward(float* dlogits, const float* logits, const float* rowmax, const float* sumexp,
                   const int* targets, int v0, int N, int Vl, int nvalid, float scale) {
  const int nv = std::clamp(nvalid, 0, Vl);
  for (int n = 0; n < N; ++n) {
    const size_t off = static_cast<size_t>(n) * Vl;
    float* d = dlogits + off;
    if (nv > 0) row_scaled_exp(d, logits + off, rowmax[n], scale / sumexp[n], nv);
    std::memset(d + nv, 0, static_cast<size_t>(Vl - nv) * sizeof(float));
    const int v = local_target(targets[n], v0, nv);
    if (v >= 0) d[v] -= scale;
  }
}

namespace ref {

void xent_local_max(float* rowmax, const float* logits, int N, int Vl, int nvalid) {
  for (int n = 0; n < N; ++n) {
    double m = -std::numeric_limits<double>::infinity();
    for (int v = 0; v < nvalid; ++v)
      m = std::max(m, static_cast<double>(logits[static_cast<size_t>(n) * Vl + v]));
    rowmax[n] = static_cast<float>(m);
  }
}

void xent_local_sums(float* sumexp, float* target, const float* logits, const float* rowmax,
                     const int* targets, int v0, int N, int Vl, int nvalid) {
  for (int n = 0; n < N; ++n) {
    const float* l = logits + static_cast<size_t>(n) * Vl;
    double s = 0.0;
    for (int v = 0; v < nvalid; ++v) s += std::exp(static_cast<double>(l[v]) - rowmax[n]);
    sumexp[n] = static_cast<float>(s);
    const int v = targets[n] - v0;
    target[n] = v >= 0 && v < nvalid ? l[v] : 0.0f;
  }
}

void xent_backward(float* dlogits, const float* logits, const float* rowmax, const float* sumexp,
                   const int* targets, int v0, int N, int Vl, int nvalid, float scale) {
  for (int n = 0; n < N; ++n) {
    const size_t off = static_cast<size_t>(n) * Vl;
    const int t = targets[n] - v0;
    for (int v = 0; v < Vl; ++v) {
      double g = 0.0;
      if (v < nvalid) {
        g = std::exp(static_cast<double>(logits[off + v]) - rowmax[n]) / sumexp[n];
        if (v == t) g -= 1.0;
      }
      dlogits[off + v] = static_cast<float>(scale * g);
    }
  }
}

}  // namespace ref

}  // namespace tide_train::ops
