// Causal multi-head self-attention core (ops/attention.h). The fast versions
// run, per (batch, head), OpenBLAS sgemms straight on the strided q, k, v
// columns of qkv (leading dimension 3·NH·HS, no gathering) and on att, with a
// row-wise causal softmax in between (branch-free polynomial exp in blocks of
// 8 that vectorize). The products with att (or ∂L/∂scores) skip the blocks
// above the diagonal; q·kᵀ and dy·vᵀ fill the whole square. The ref:: versions
// are plain loops in double.
#include "ops/attention.h"

#include <cblas.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "ops/vec_math.h"

namespace tide_train::ops {

namespace {

// Every row t of one (batch, head)'s [T, T] scores becomes the softmax over
// its keys 0..t, in place; the columns above the diagonal become 0. Rows are
// worked on up to n8 = t + 1 rounded up to 8 (capped at T), the extra columns
// masked out (not set to −inf: exp's underflow would be slow), so that the
// 8-wide loops have no scalar tails.
TIDE_OPS_CLONES void causal_softmax(float* __restrict att, int T) {
  const int32_t kNegInfKey = order_key(-std::numeric_limits<float>::infinity());
  for (int t = 0; t < T; ++t) {
    float* __restrict a = att + static_cast<size_t>(t) * T;
    const int n8 = std::min(T, (t + 8) & ~7);
    const int n = n8 & ~7;  // the 8-wide part of [0, n8)
    int32_t mk[8];
    for (int32_t& k : mk) k = kNegInfKey;
    for (int j = 0; j < n; j += 8)
      for (int l = 0; l < 8; ++l)
        mk[l] = std::max(mk[l], j + l <= t ? order_key(a[j + l]) : kNegInfKey);
    for (int j = n; j <= t; ++j) mk[0] = std::max(mk[0], order_key(a[j]));
    for (int l = 1; l < 8; ++l) mk[0] = std::max(mk[0], mk[l]);
    const float m = from_order_key(mk[0]);
    float acc[8] = {};
    for (int j = 0; j < n; j += 8)
      for (int l = 0; l < 8; ++l) {
        const uint32_t keep = j + l <= t ? ~0u : 0u;
        const float e =
            std::bit_cast<float>(std::bit_cast<uint32_t>(fast_exp(a[j + l] - m)) & keep);
        a[j + l] = e;
        acc[l] += e;
      }
    float sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (int j = n; j <= t; ++j) {
      const float e = fast_exp(a[j] - m);
      a[j] = e;
      sum += e;
    }
    const float inv = 1.0f / sum;
    for (int j = 0; j < n; j += 8)
      for (int l = 0; l < 8; ++l) a[j + l] *= inv;
    for (int j = n; j <= t; ++j) a[j] *= inv;
    for (int j = std::max(n, t + 1); j < T; ++j) a[j] = 0.0f;
  }
}

// For every row t of one (batch, head): ds[j] = p[j]·(ds[j] − Σ_k p[k]·ds[k])
// (ds holds ∂L/∂att on entry, ∂L/∂scores on exit). p is 0 above the diagonal,
// so the rows are worked on up to t + 1 rounded up to 8 as in the forward and
// only the columns beyond are zeroed.
TIDE_OPS_CLONES void causal_softmax_backward(float* __restrict dsm, const float* __restrict pm,
                                             int T) {
  for (int t = 0; t < T; ++t) {
    float* __restrict ds = dsm + static_cast<size_t>(t) * T;
    const float* __restrict p = pm + static_cast<size_t>(t) * T;
    const int n8 = std::min(T, (t + 8) & ~7);
    const int n = n8 & ~7;
    float acc[8] = {};
    for (int j = 0; j < n; j += 8)
      for (int l = 0; l < 8; ++l) acc[l] += p[j + l] * ds[j + l];
    float dot = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (int j = n; j < n8; ++j) dot += p[j] * ds[j];
    for (int j = 0; j < n; j += 8)
      for (int l = 0; l < 8; ++l) ds[j + l] = p[j + l] * (ds[j + l] - dot);
    for (int j = n; j < n8; ++j) ds[j] = p[j] * (ds[j] - dot);
    for (int j = n8; j < T; ++j) ds[j] = 0.0f;
  }
}

// Products with a lower-triangular [T, T] matrix L (leading dimension T; its
// zeros above the diagonal are stored) in row blocks of kBlock, skipping the
// blocks of zeros: about half the flops of the full square for large T.
constexpr int kBlock = 16;

// y[T, HS] = alpha · L · x + beta · y  (x, y: leading dimensions ldx, ldy)
void lower_times(int T, int HS, float alpha, const float* L, const float* x, int ldx, float beta,
                 float* y, int ldy) {
  for (int r0 = 0; r0 < T; r0 += kBlock) {
    const int r1 = std::min(T, r0 + kBlock);  // rows [r0, r1) need columns [0, r1)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r1 - r0, HS, r1, alpha,
                L + static_cast<size_t>(r0) * T, T, x, ldx, beta, y + static_cast<size_t>(r0) * ldy,
                ldy);
  }
}

// y[T, HS] += alpha · Lᵀ · x
void lower_t_times_acc(int T, int HS, float alpha, const float* L, const float* x, int ldx,
                       float* y, int ldy) {
  for (int r0 = 0; r0 < T; r0 += kBlock) {
    const int r1 = std::min(T, r0 + kBlock);  // rows [r0, r1) of Lᵀ: L[r0.., r0..r1)
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1 - r0, HS, T - r0, alpha,
                L + static_cast<size_t>(r0) * T + r0, T, x + static_cast<size_t>(r0) * ldx, ldx,
                1.0f, y + static_cast<size_t>(r0) * ldy, ldy);
  }
}

}  // namespace

void attention_forward(float* out, float* att, const float* qkv, int B, int T, int NH, int HS) {
  if (T <= 0 || HS <= 0) return;
  const int C = NH * HS;
  const int C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const size_t tt = static_cast<size_t>(T) * T;
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      const float* q = qkv + static_cast<size_t>(b) * T * C3 + static_cast<size_t>(h) * HS;
      const float* k = q + C;
      const float* v = q + 2 * C;
      float* a = att + (static_cast<size_t>(b) * NH + h) * tt;
      // a = scale · q·kᵀ over the full square (blocking does not pay here:
      // the inner dimension is only HS); the softmax zeroes the upper part.
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, HS, scale, q, C3, k, C3, 0.0f, a,
                  T);
      causal_softmax(a, T);
      // out_h = a·v
      float* o = out + static_cast<size_t>(b) * T * C + static_cast<size_t>(h) * HS;
      lower_times(T, HS, 1.0f, a, v, C3, 0.0f, o, C);
    }
  }
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att, int B,
                        int T, int NH, int HS, float* scratch) {
  if (dqkv == nullptr || T <= 0 || HS <= 0) return;
  const int C = NH * HS;
  const int C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const size_t tt = static_cast<size_t>(T) * T;
  float* ds = scratch;  // [T, T]: ∂L/∂att, then ∂L/∂scores (unscaled)
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      const size_t qoff = static_cast<size_t>(b) * T * C3 + static_cast<size_t>(h) * HS;
      const float* q = qkv + qoff;
      const float* k = q + C;
      const float* v = q + 2 * C;
      float* dq = dqkv + qoff;
      float* dk = dq + C;
      float* dv = dq + 2 * C;
      const float* a = att + (static_cast<size_t>(b) * NH + h) * tt;
      const float* dy = dout + static_cast<size_t>(b) * T * C + static_cast<size_t>(h) * HS;
      lower_t_times_acc(T, HS, 1.0f, a, dy, C, dv, C3);  // dv += aᵀ·dy
      // ds = dy·vᵀ (full square), then through the softmax
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, HS, 1.0f, dy, C, v, C3, 0.0f, ds,
                  T);
      causal_softmax_backward(ds, a, T);
      lower_times(T, HS, scale, ds, k, C3, 1.0f, dq, C3);  // dq += scale · ds·k
      lower_t_times_acc(T, HS, scale, ds, q, C3, dk, C3);  // dk += scale · dsᵀ·q
    }
  }
}

size_t attention_scratch_floats(int T, int /*HS*/) { return static_cast<size_t>(T) * T; }

namespace ref {

void attention_forward(float* out, float* att, const float* qkv, int B, int T, int NH, int HS) {
  const size_t C = static_cast<size_t>(NH) * HS;
  const size_t C3 = 3 * C;
  const double scale = 1.0 / std::sqrt(static_cast<double>(HS));
  std::vector<double> p(static_cast<size_t>(T));
  for (int b = 0; b < B; ++b) {
    const float* base = qkv + static_cast<size_t>(b) * T * C3;
    for (int h = 0; h < NH; ++h) {
      const size_t ho = static_cast<size_t>(h) * HS;
      for (int t = 0; t < T; ++t) {
        const float* q = base + t * C3 + ho;
        double m = -std::numeric_limits<double>::infinity();
        for (int j = 0; j <= t; ++j) {
          const float* k = base + j * C3 + C + ho;
          double s = 0.0;
          for (int d = 0; d < HS; ++d) s += static_cast<double>(q[d]) * k[d];
          p[j] = s * scale;
          m = std::max(m, p[j]);
        }
        double sum = 0.0;
        for (int j = 0; j <= t; ++j) {
          p[j] = std::exp(p[j] - m);
          sum += p[j];
        }
        float* a = att + ((static_cast<size_t>(b) * NH + h) * T + t) * T;
        for (int j = 0; j < T; ++j) {
          if (j <= t) p[j] /= sum;
          a[j] = j <= t ? static_cast<float>(p[j]) : 0.0f;
        }
        float* o = out + (static_cast<size_t>(b) * T + t) * C + ho;
        for (int d = 0; d < HS; ++d) {
          double s = 0.0;
          for (int j = 0; j <= t; ++j) s += p[j] * base[j * C3 + 2 * C + ho + d];
          o[d] = static_cast<float>(s);
        }
      }
    }
  }
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att, int B,
                        int T, int NH, int HS) {
  if (dqkv == nullptr) return;
  const size_t C = static_cast<size_t>(NH) * HS;
  const size_t C3 = 3 * C;
  const double scale = 1.0 / std::sqrt(static_cast<double>(HS));
  std::vector<double> g(static_cast<size_t>(T) * C3);  // this batch row's ∂L/∂qkv
  std::vector<double> ds(static_cast<size_t>(T));
  for (int b = 0; b < B; ++b) {
    const float* base = qkv + static_cast<size_t>(b) * T * C3;
    std::fill(g.begin(), g.end(), 0.0);
    for (int h = 0; h < NH; ++h) {
      const size_t ho = static_cast<size_t>(h) * HS;
      for (int t = 0; t < T; ++t) {
        const float* a = att + ((static_cast<size_t>(b) * NH + h) * T + t) * T;
        const float* dy = dout + (static_cast<size_t>(b) * T + t) * C + ho;
        double dot = 0.0;
        for (int j = 0; j <= t; ++j) {
          const float* v = base + j * C3 + 2 * C + ho;
          double s = 0.0;
          for (int d = 0; d < HS; ++d) s += static_cast<double>(dy[d]) * v[d];
          ds[j] = s;  // ∂L/∂att[t, j]
          dot += a[j] * s;
        }
        for (int j = 0; j <= t; ++j) {
          const double dsc = a[j] * (ds[j] - dot) * scale;  // ∂L/∂(q·k)
          for (int d = 0; d < HS; ++d) {
            g[t * C3 + ho + d] += dsc * base[j * C3 + C + ho + d];
            g[j * C3 + C + ho + d] += dsc * base[t * C3 + ho + d];
            g[j * C3 + 2 * C + ho + d] += static_cast<double>(a[j]) * dy[d];
          }
        }
      }
    }
    float* dst = dqkv + static_cast<size_t>(b) * T * C3;
    for (size_t i = 0; i < g.size(); ++i) dst[i] += static_cast<float>(g[i]);
  }
}

}  // namespace ref

}  // namespace tide_train::ops
