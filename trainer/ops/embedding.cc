// Token + position embedding over a vocabulary slice (ops/embedding.h). The
// fast versions copy or add whole rows (loops in blocks of 8 that vectorize);
// the ref:: versions accumulate the gradients in double.
#include "ops/embedding.h"

#include <cstddef>
#include <cstring>
#include <vector>

namespace tide_train::ops {

namespace {

// y[i] = a[i] + b[i].
void row_add(float* __restrict y, const float* __restrict a, const float* __restrict b, int n) {
  int i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) y[i + j] = a[i + j] + b[i + j];
  for (; i < n; ++i) y[i] = a[i] + b[i];
}

// y[i] += x[i].
void row_acc(float* __restrict y, const float* __restrict x, int n) {
  int i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) y[i + j] += x[i + j];
  for (; i < n; ++i) y[i] += x[i];
}

}  // namespace

void embedding_forward(float* out, const int* tokens, const float* wte, int v0, int Vl,
                       const float* wpe, int B, int T, int C) {
  const size_t c = static_cast<size_t>(C);
  const size_t row_bytes = c * sizeof(float);
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      const size_t bt = static_cast<size_t>(b) * T + t;
      float* y = out + bt * c;
      const int v = tokens[bt] - v0;
      const bool here = v >= 0 && v < Vl;
      const float* e = here ? wte + static_cast<size_t>(v) * c : nullptr;
      const float* p = wpe != nullptr ? wpe + static_cast<size_t>(t) * c : nullptr;
      if (e != nullptr && p != nullptr) {
        row_add(y, e, p, C);
      } else if (e != nullptr || p != nullptr) {
        std::memcpy(y, e != nullptr ? e : p, row_bytes);
      } else {
        std::memset(y, 0, row_bytes);
      }
    }
  }
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int* tokens, int v0,
                        int Vl, int B, int T, int C) {
  const size_t c = static_cast<size_t>(C);
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      const size_t bt = static_cast<size_t>(b) * T + t;
      const float* dy = dout + bt * c;
      if (dwpe != nullptr) row_acc(dwpe + static_cast<size_t>(t) * c, dy, C);
      const int v = tokens[bt] - v0;
      if (dwte != nullptr && v >= 0 && v < Vl) row_acc(dwte + static_cast<size_t>(v) * c, dy, C);
    }
  }
}

namespace ref {

void embedding_forward(float* out, const int* tokens, const float* wte, int v0, int Vl,
                       const float* wpe, int B, int T, int C) {
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      const size_t bt = static_cast<size_t>(b) * T + t;
      const int v = tokens[bt] - v0;
      for (int i = 0; i < C; ++i) {
        double s = 0.0;
        if (v >= 0 && v < Vl) s += wte[static_cast<size_t>(v) * C + i];
        if (wpe != nullptr) s += wpe[static_cast<size_t>(t) * C + i];
        out[bt * C + i] = static_cast<float>(s);
      }
    }
  }
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int* tokens, int v0,
                        int Vl, int B, int T, int C) {
  const size_t c = static_cast<size_t>(C);
  std::vector<double> gte(dwte != nullptr ? static_cast<size_t>(Vl) * c : 0, 0.0);
  std::vector<double> gpe(dwpe != nullptr ? static_cast<size_t>(T) * c : 0, 0.0);
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      const size_t bt = static_cast<size_t>(b) * T + t;
      const int v = tokens[bt] - v0;
      for (size_t i = 0; i < c; ++i) {
        const double g = dout[bt * c + i];
        if (dwpe != nullptr) gpe[t * c + i] += g;
        if (dwte != nullptr && v >= 0 && v < Vl) gte[v * c + i] += g;
      }
    }
  }
  for (size_t i = 0; i < gte.size(); ++i) dwte[i] += static_cast<float>(gte[i]);
  for (size_t i = 0; i < gpe.size(); ++i) dwpe[i] += static_cast<float>(gpe[i]);
}

}  // namespace ref

}  // namespace tide_train::ops
