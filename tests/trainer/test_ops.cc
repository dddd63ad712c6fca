// Unit tests of the trainer's per-operation kernels (trainer/ops): each fast
// kernel against its ref:: oracle on random inputs of awkward shapes, each
// ref:: backward against central finite differences of the ref:: forward
// (loss = Σ out·R for a random R, so ∂L/∂out = R), the accumulate (+=) and
// null-output contracts of the backwards, and the vocabulary-parallel
// cross-entropy split over 2 and 3 slices against the unsplit result.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "ops/attention.h"
#include "ops/cross_entropy.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/layernorm.h"
#include "ops/linear.h"

namespace tide_train::ops {
namespace {

using Vec = std::vector<float>;
using Outs = std::vector<float*>;
using Kernel = std::function<void(const Outs&)>;

constexpr double kFastTol = 1e-5;  // fast vs ref, relative Frobenius error
constexpr double kFdTol = 1e-3;    // ref backward vs finite differences
constexpr float kFdStep = 1e-2f;

std::mt19937& Rng() {
  static std::mt19937 rng(20240607);
  return rng;
}

Vec Random(size_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> d(lo, hi);
  Vec v(n);
  for (float& x : v) x = d(Rng());
  return v;
}

double Dot(const Vec& a, const Vec& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

// ‖got − want‖ / ‖want‖ (Frobenius), with the absolute error when want is 0.
template <typename W>
::testing::AssertionResult Close(const Vec& got, const std::vector<W>& want, double tol) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "size mismatch";
  double num = 0.0;
  double den = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = static_cast<double>(got[i]) - static_cast<double>(want[i]);
    num += d * d;
    den += static_cast<double>(want[i]) * want[i];
  }
  const double err = den > 0.0 ? std::sqrt(num / den) : std::sqrt(num);
  if (err <= tol) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "relative error " << err << " > " << tol;
}

// Central differences of loss() in every element of *x, against grad.
::testing::AssertionResult MatchesFd(Vec* x, const Vec& grad, const std::function<double()>& loss,
                                     double tol = kFdTol) {
  std::vector<double> num(x->size());
  for (size_t i = 0; i < x->size(); ++i) {
    const float x0 = (*x)[i];
    const float xp = x0 + kFdStep;
    const float xm = x0 - kFdStep;
    (*x)[i] = xp;
    const double lp = loss();
    (*x)[i] = xm;
    const double lm = loss();
    (*x)[i] = x0;
    num[i] = (lp - lm) / (static_cast<double>(xp) - xm);
  }
  return Close(grad, num, tol);
}

Outs Ptrs(std::vector<Vec>& v) {
  Outs p;
  for (Vec& x : v) p.push_back(x.empty() ? nullptr : x.data());
  return p;
}

// The backward contract, for every subset of outputs left null (`nullable`
// marks the outputs that may be): ref into zeros gives G; ref into a random P
// (of G's scale, so that P + G keeps G's digits) must give P + G, and fast
// into P must give P + G to `tol`.
void CheckBackward(const std::vector<size_t>& sizes, const std::vector<bool>& nullable,
                   const Kernel& fast, const Kernel& ref, double tol = kFastTol) {
  const size_t n = sizes.size();
  for (unsigned mask = 0; mask < (1u << n); ++mask) {
    std::vector<Vec> g(n), p(n), rp(n), fp(n);
    bool skip = false;
    for (size_t k = 0; k < n; ++k) {
      const bool null = ((mask >> k) & 1u) != 0;
      skip |= null && !nullable[k];
      g[k] = Vec(null ? 0 : sizes[k], 0.0f);
    }
    if (skip) continue;
    ref(Ptrs(g));
    for (size_t k = 0; k < n; ++k) {
      const double rms = std::sqrt(Dot(g[k], g[k]) / std::max<size_t>(1, g[k].size()));
      p[k] = Random(g[k].size());
      for (float& v : p[k]) v *= rms > 0.0 ? static_cast<float>(rms) : 1.0f;
      rp[k] = fp[k] = p[k];
    }
    ref(Ptrs(rp));
    fast(Ptrs(fp));
    for (size_t k = 0; k < n; ++k) {
      if (g[k].empty()) continue;
      Vec rd(g[k].size()), fd(g[k].size());
      for (size_t i = 0; i < rd.size(); ++i) {
        rd[i] = rp[k][i] - p[k][i];
        fd[i] = fp[k][i] - p[k][i];
      }
      EXPECT_TRUE(Close(rd, g[k], 1e-6)) << "ref does not accumulate: output " << k;
      EXPECT_TRUE(Close(fd, g[k], tol)) << "fast vs ref: output " << k << ", null mask " << mask;
    }
  }
}

// ---------------------------------------------------------------- linear
struct LinShape {
  int N, IC, OC;
};
const LinShape kLinShapes[] = {{1, 1, 1}, {7, 33, 5}, {5, 1, 9}, {13, 17, 64}, {96, 128, 384}};

TEST(LinearTest, MatchesRefAndFiniteDifferences) {
  for (const LinShape& s : kLinShapes) {
    Vec x = Random(s.N * s.IC), w = Random(s.OC * s.IC), b = Random(s.OC), dy = Random(s.N * s.OC);
    for (const float* bp :
         {static_cast<const float*>(b.data()), static_cast<const float*>(nullptr)}) {
      Vec got(s.N * s.OC, NAN), want(s.N * s.OC);
      linear_forward(got.data(), x.data(), w.data(), bp, s.N, s.IC, s.OC);
      ref::linear_forward(want.data(), x.data(), w.data(), bp, s.N, s.IC, s.OC);
      EXPECT_TRUE(Close(got, want, kFastTol)) << s.N << "x" << s.IC << "x" << s.OC;
    }
    auto run = [&](auto fn) {
      return [&, fn](const Outs& o) {
        fn(o[0], o[1], o[2], dy.data(), x.data(), w.data(), s.N, s.IC, s.OC, false);
      };
    };
    CheckBackward({x.size(), w.size(), b.size()}, {true, true, true}, run(linear_backward),
                  run(ref::linear_backward));
    // set_dinp: dinp overwritten (its old contents, NaN here, never read).
    {
      Vec got(x.size(), NAN), want(x.size(), NAN);
      linear_backward(got.data(), nullptr, nullptr, dy.data(), x.data(), w.data(), s.N, s.IC, s.OC,
                      true);
      ref::linear_backward(want.data(), nullptr, nullptr, dy.data(), x.data(), w.data(), s.N, s.IC,
                           s.OC, true);
      EXPECT_TRUE(Close(got, want, kFastTol)) << "set_dinp " << s.N << "x" << s.IC << "x" << s.OC;
    }
    if (x.size() + w.size() > 500) continue;  // finite differences on the small shapes
    Vec out(dy.size()), dx(x.size()), dw(w.size()), db(b.size());
    auto loss = [&] {
      ref::linear_forward(out.data(), x.data(), w.data(), b.data(), s.N, s.IC, s.OC);
      return Dot(out, dy);
    };
    ref::linear_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), s.N, s.IC,
                         s.OC);
    EXPECT_TRUE(MatchesFd(&x, dx, loss));
    EXPECT_TRUE(MatchesFd(&w, dw, loss));
    EXPECT_TRUE(MatchesFd(&b, db, loss));
  }
}

// ---------------------------------------------------------------- layernorm
struct LnShape {
  int N, C;
};
const LnShape kLnShapes[] = {{1, 1}, {7, 33}, {3, 128}, {2, 4096}, {64, 256}};

TEST(LayerNormTest, MatchesRefAndFiniteDifferences) {
  for (const LnShape& sh : kLnShapes) {
    const int N = sh.N, C = sh.C;
    Vec x = Random(N * C, 2.0f, 4.0f), w = Random(C), b = Random(C);  // mean ≫ std
    Vec out(N * C), mean(N), rstd(N), rout(N * C), rmean(N), rrstd(N), dy = Random(N * C);
    layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    ref::layernorm_forward(rout.data(), rmean.data(), rrstd.data(), x.data(), w.data(), b.data(), N,
                           C);
    EXPECT_TRUE(Close(out, rout, kFastTol)) << N << "x" << C;
    EXPECT_TRUE(Close(mean, rmean, 1e-6)) << N << "x" << C;
    EXPECT_TRUE(Close(rstd, rrstd, kFastTol)) << N << "x" << C;
    auto run = [&](auto fn) {
      return [&, fn](const Outs& o) {
        fn(o[0], o[1], o[2], dy.data(), x.data(), w.data(), rmean.data(), rrstd.data(), N, C);
      };
    };
    CheckBackward({x.size(), w.size(), b.size()}, {true, true, true}, run(layernorm_backward),
                  run(ref::layernorm_backward));
    if (x.size() > 500) continue;  // finite differences on the small shapes
    Vec dx(x.size()), dw(w.size()), db(b.size());
    auto loss = [&] {
      ref::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N,
                             C);
      return Dot(out, dy);
    };
    ref::layernorm_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(),
                            rmean.data(), rrstd.data(), N, C);
    EXPECT_TRUE(MatchesFd(&x, dx, loss));
    EXPECT_TRUE(MatchesFd(&w, dw, loss));
    EXPECT_TRUE(MatchesFd(&b, db, loss));
  }
}

// ---------------------------------------------------------------- elementwise
TEST(GeluTest, ForwardMatchesRefOverTheWholeRangeAndPropagatesNan) {
  Vec x = Random(1001, -6.0f, 6.0f);
  for (int i = -3000; i <= 3000; ++i) x.push_back(0.01f * static_cast<float>(i));
  Vec got(x.size()), want(x.size());
  gelu_forward(got.data(), x.data(), x.size());
  ref::gelu_forward(want.data(), x.data(), x.size());
  EXPECT_TRUE(Close(got, want, 1e-6));
  for (float v : {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-6f, 88.0f, -88.0f, 1e30f, -1e30f})
    x.push_back(v);
  got.resize(x.size());
  want.resize(x.size());
  gelu_forward(got.data(), x.data(), x.size());
  ref::gelu_forward(want.data(), x.data(), x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 1e-6 * std::max(1.0f, std::fabs(x[i]))) << "x = " << x[i];
    if (std::fabs(x[i]) < 1.0f) {  // relative accuracy near 0
      EXPECT_NEAR(got[i], want[i], 1e-6 * std::fabs(want[i])) << "x = " << x[i];
    }
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Vec xn = {0.5f, nan, -nan, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f}, y(9), dx(9, 0.0f), dy(9, 1.0f);
  gelu_forward(y.data(), xn.data(), xn.size());
  gelu_backward(dx.data(), xn.data(), dy.data(), xn.size());
  for (size_t i = 0; i < xn.size(); ++i) {
    EXPECT_EQ(std::isnan(y[i]), std::isnan(xn[i])) << "NaN propagates: " << i;
    EXPECT_EQ(std::isnan(dx[i]), std::isnan(xn[i])) << "NaN propagates: " << i;
  }
}

TEST(GeluTest, BackwardMatchesRefAccumulatesAndFiniteDifferences) {
  for (size_t n : {7, 16, 33, 4096}) {  // 7: tail only; 16: blocks only
    Vec x = Random(n, -5.0f, 5.0f), dy = Random(n);
    auto run = [&](auto fn) {
      return [&, fn](const Outs& o) { fn(o[0], x.data(), dy.data(), n, false); };
    };
    CheckBackward({n}, {true}, run(gelu_backward), run(ref::gelu_backward));
    Vec got(n, NAN), want(n, NAN);  // set: overwritten, old contents never read
    gelu_backward(got.data(), x.data(), dy.data(), n, true);
    ref::gelu_backward(want.data(), x.data(), dy.data(), n, true);
    EXPECT_TRUE(Close(got, want, kFastTol)) << "set " << n;
  }
  Vec x = Random(257, -4.0f, 4.0f), r = Random(257), out(257), dx(257, 0.0f);
  auto loss = [&] {
    ref::gelu_forward(out.data(), x.data(), x.size());
    return Dot(out, r);
  };
  ref::gelu_backward(dx.data(), x.data(), r.data(), x.size());
  EXPECT_TRUE(MatchesFd(&x, dx, loss));
}

TEST(ResidualTest, ForwardAllowsAliasingAndBackwardAccumulates) {
  for (size_t n : {1, 7, 8, 33, 1000}) {
    Vec a = Random(n), b = Random(n), want(n), out(n);
    for (size_t i = 0; i < n; ++i) want[i] = a[i] + b[i];
    residual_forward(out.data(), a.data(), b.data(), n);
    EXPECT_EQ(out, want);
    Vec a2 = a, b2 = b;
    residual_forward(a2.data(), a2.data(), b.data(), n);
    residual_forward(b2.data(), a.data(), b2.data(), n);
    EXPECT_EQ(a2, want);
    EXPECT_EQ(b2, want);
    Vec dy = Random(n);
    auto run = [&](const Outs& o) { residual_backward(o[0], o[1], dy.data(), n); };
    auto ref = [&](const Outs& o) {
      for (float* d : o)
        if (d != nullptr)
          for (size_t i = 0; i < n; ++i) d[i] += dy[i];
    };
    CheckBackward({n, n}, {true, true}, run, ref, 1e-6);
  }
}

// ---------------------------------------------------------------- attention
struct AttShape {
  int B, T, NH, HS;
};
const AttShape kAttShapes[] = {
    {1, 1, 1, 1}, {2, 5, 3, 8}, {1, 7, 2, 5}, {1, 33, 1, 16}, {2, 64, 4, 32}};

TEST(AttentionTest, MatchesRefAndFiniteDifferences) {
  for (const AttShape& s : kAttShapes) {
    const int C = s.NH * s.HS;
    Vec qkv = Random(s.B * s.T * 3 * C, -2.0f, 2.0f), dy = Random(s.B * s.T * C);
    Vec out(s.B * s.T * C, NAN), att(s.B * s.NH * s.T * s.T, NAN);
    Vec rout(out.size()), ratt(att.size());
    attention_forward(out.data(), att.data(), qkv.data(), s.B, s.T, s.NH, s.HS);
    ref::attention_forward(rout.data(), ratt.data(), qkv.data(), s.B, s.T, s.NH, s.HS);
    EXPECT_TRUE(Close(out, rout, kFastTol)) << s.B << "," << s.T << "," << s.NH << "," << s.HS;
    EXPECT_TRUE(Close(att, ratt, kFastTol)) << s.B << "," << s.T << "," << s.NH << "," << s.HS;
    for (int row = 0; row < s.B * s.NH * s.T; ++row) {
      double sum = 0.0;
      for (int j = 0; j < s.T; ++j) {
        const float p = att[static_cast<size_t>(row) * s.T + j];
        if (j > row % s.T) {
          EXPECT_EQ(p, 0.0f) << "above the diagonal";
        }
        sum += p;
      }
      EXPECT_NEAR(sum, 1.0, 1e-5);
    }
    Vec scratch(attention_scratch_floats(s.T, s.HS), NAN);  // its contents must not matter
    auto fast = [&](const Outs& o) {
      attention_backward(o[0], dy.data(), qkv.data(), att.data(), s.B, s.T, s.NH, s.HS,
                         scratch.data());
    };
    auto ref = [&](const Outs& o) {
      ref::attention_backward(o[0], dy.data(), qkv.data(), att.data(), s.B, s.T, s.NH, s.HS);
    };
    CheckBackward({qkv.size()}, {true}, fast, ref);
    if (qkv.size() > 1000) continue;  // finite differences on the small shapes
    auto loss = [&] {
      ref::attention_forward(rout.data(), ratt.data(), qkv.data(), s.B, s.T, s.NH, s.HS);
      return Dot(rout, dy);
    };
    Vec g(qkv.size(), 0.0f);
    ref::attention_backward(g.data(), dy.data(), qkv.data(), ratt.data(), s.B, s.T, s.NH, s.HS);
    EXPECT_TRUE(MatchesFd(&qkv, g, loss)) << s.B << "," << s.T << "," << s.NH << "," << s.HS;
  }
}

// ---------------------------------------------------------------- embedding
TEST(EmbeddingTest, ForwardBackwardMatchRefOnAVocabularySlice) {
  const int B = 3, T = 5, C = 33, v0 = 3, Vl = 5;  // tokens in [0, 12): most elsewhere
  std::vector<int> tok(B * T);
  std::uniform_int_distribution<int> d(0, 11);
  for (int& t : tok) t = d(Rng());
  tok[0] = v0;
  tok[1] = v0 + Vl - 1;
  tok[2] = v0 + Vl;
  tok[3] = v0 - 1;
  Vec wte = Random(Vl * C), wpe = Random(T * C), dy = Random(B * T * C);
  for (const float* pe :
       {static_cast<const float*>(wpe.data()), static_cast<const float*>(nullptr)}) {
    Vec out(B * T * C, NAN), rout(out.size());
    embedding_forward(out.data(), tok.data(), wte.data(), v0, Vl, pe, B, T, C);
    ref::embedding_forward(rout.data(), tok.data(), wte.data(), v0, Vl, pe, B, T, C);
    EXPECT_EQ(out, rout);  // one float add per element: exact
  }
  auto run = [&](auto fn) {
    return [&, fn](const Outs& o) { fn(o[0], o[1], dy.data(), tok.data(), v0, Vl, B, T, C); };
  };
  CheckBackward({wte.size(), wpe.size()}, {true, true}, run(embedding_backward),
                run(ref::embedding_backward));
  Vec r = Random(B * T * C), out(r.size()), dwte(wte.size(), 0.0f), dwpe(wpe.size(), 0.0f);
  auto loss = [&] {
    ref::embedding_forward(out.data(), tok.data(), wte.data(), v0, Vl, wpe.data(), B, T, C);
    return Dot(out, r);
  };
  ref::embedding_backward(dwte.data(), dwpe.data(), r.data(), tok.data(), v0, Vl, B, T, C);
  EXPECT_TRUE(MatchesFd(&wte, dwte, loss));
  EXPECT_TRUE(MatchesFd(&wpe, dwpe, loss));
}

// ---------------------------------------------------------------- cross-entropy
// The loss of every row for one rank holding all columns, by the fast kernels.
struct Xent {
  Vec rowmax, sumexp, target, dlogits;
};
Xent XentOneRank(const Vec& logits, const std::vector<int>& tgt, int N, int V, int nvalid,
                 float scale) {
  Xent x{Vec(N), Vec(N), Vec(N), Vec(logits.size(), NAN)};
  xent_local_max(x.rowmax.data(), logits.data(), N, V, nvalid);
  xent_local_sums(x.sumexp.data(), x.target.data(), logits.data(), x.rowmax.data(), tgt.data(), 0,
                  N, V, nvalid);
  xent_backward(x.dlogits.data(), logits.data(), x.rowmax.data(), x.sumexp.data(), tgt.data(), 0, N,
                V, nvalid, scale);
  return x;
}

std::vector<int> Targets(int N, int lo, int hi) {
  std::uniform_int_distribution<int> d(lo, hi - 1);
  std::vector<int> t(N);
  for (int& x : t) x = d(Rng());
  return t;
}

TEST(CrossEntropyTest, LocalKernelsMatchRef) {
  const int N = 7, Vl = 33, v0 = 5;
  for (int nvalid : {33, 20, 1, 0}) {
    Vec l = Random(N * Vl, -8.0f, 8.0f);
    std::vector<int> tgt = Targets(N, -2, 45);  // some here, some elsewhere, one negative
    tgt[0] = v0;
    tgt[1] = v0 + nvalid - 1;
    Vec m(N), s(N), t(N), d(l.size(), NAN), rm(N), rs(N), rt(N), rd(l.size());
    xent_local_max(m.data(), l.data(), N, Vl, nvalid);
    ref::xent_local_max(rm.data(), l.data(), N, Vl, nvalid);
    EXPECT_EQ(m, rm);
    if (nvalid == 0) {
      EXPECT_EQ(m[0], -std::numeric_limits<float>::infinity());
    }
    xent_local_sums(s.data(), t.data(), l.data(), rm.data(), tgt.data(), v0, N, Vl, nvalid);
    ref::xent_local_sums(rs.data(), rt.data(), l.data(), rm.data(), tgt.data(), v0, N, Vl, nvalid);
    EXPECT_TRUE(Close(s, rs, 1e-6)) << nvalid;
    EXPECT_EQ(t, rt);
    if (nvalid == 0) continue;  // nothing to differentiate (sumexp is 0)
    xent_backward(d.data(), l.data(), rm.data(), rs.data(), tgt.data(), v0, N, Vl, nvalid, 0.25f);
    ref::xent_backward(rd.data(), l.data(), rm.data(), rs.data(), tgt.data(), v0, N, Vl, nvalid,
                       0.25f);
    EXPECT_TRUE(Close(d, rd, kFastTol)) << nvalid;
    for (int n = 0; n < N; ++n)
      for (int v = nvalid; v < Vl; ++v) EXPECT_EQ(d[n * Vl + v], 0.0f) << "padding gradient";
  }
}

TEST(CrossEntropyTest, OneRankLossIsLogSumExpMinusTargetAndGradientIsItsDerivative) {
  const int N = 6, Vp = 40, V = 37;  // columns [37, 40) are padding
  Vec l = Random(N * Vp, -10.0f, 10.0f);
  for (int n = 0; n < N; ++n) l[n * Vp + V] = 1e4f;  // huge padding logits must not matter
  std::vector<int> tgt = Targets(N, 0, V);
  const float scale = 1.0f / N;
  Xent x = XentOneRank(l, tgt, N, Vp, V, scale);
  auto naive = [&](const Vec& logits) {
    double total = 0.0;
    for (int n = 0; n < N; ++n) {
      double s = 0.0;
      for (int v = 0; v < V; ++v) s += std::exp(static_cast<double>(logits[n * Vp + v]));
      total += std::log(s) - logits[n * Vp + tgt[n]];
    }
    return total * scale;
  };
  double total = 0.0;
  for (int n = 0; n < N; ++n)
    total += (std::log(static_cast<double>(x.sumexp[n])) + x.rowmax[n] - x.target[n]) * scale;
  EXPECT_NEAR(total, naive(l), 1e-5 * std::fabs(naive(l)));
  EXPECT_TRUE(MatchesFd(&l, x.dlogits, [&] { return naive(l); }));
}

TEST(CrossEntropyTest, VocabularySplitMatchesUnsplit) {
  const int N = 9, Vp = 12;
  const float scale = 1.0f / N;
  for (auto [V, ranks] : {std::pair{10, 2}, std::pair{8, 3}, std::pair{9, 3}}) {
    const int Vl = Vp / ranks;  // 8 over 3 ranks: the last one holds only padding
    Vec full = Random(N * Vp, -5.0f, 5.0f);
    std::vector<int> tgt = Targets(N, 0, V);
    Xent one = XentOneRank(full, tgt, N, Vp, V, scale);
    std::vector<Vec> slice(ranks, Vec(N * Vl));
    std::vector<int> nvalid(ranks);
    for (int r = 0; r < ranks; ++r) {
      nvalid[r] = std::clamp(V - r * Vl, 0, Vl);
      for (int n = 0; n < N; ++n)
        for (int v = 0; v < Vl; ++v) slice[r][n * Vl + v] = full[n * Vp + r * Vl + v];
    }
    // The two All-Reduces, by hand.
    Vec m(N, -std::numeric_limits<float>::infinity()), s(N, 0.0f), t(N, 0.0f), part(N), part2(N);
    for (int r = 0; r < ranks; ++r) {
      xent_local_max(part.data(), slice[r].data(), N, Vl, nvalid[r]);
      for (int n = 0; n < N; ++n) m[n] = std::max(m[n], part[n]);
    }
    for (int r = 0; r < ranks; ++r) {
      xent_local_sums(part.data(), part2.data(), slice[r].data(), m.data(), tgt.data(), r * Vl, N,
                      Vl, nvalid[r]);
      for (int n = 0; n < N; ++n) {
        s[n] += part[n];
        t[n] += part2[n];
      }
    }
    EXPECT_EQ(m, one.rowmax);
    EXPECT_EQ(t, one.target);
    EXPECT_TRUE(Close(s, one.sumexp, 1e-6));
    for (int r = 0; r < ranks; ++r) {
      Vec d(N * Vl, NAN), want(N * Vl);
      xent_backward(d.data(), slice[r].data(), m.data(), s.data(), tgt.data(), r * Vl, N, Vl,
                    nvalid[r], scale);
      for (int n = 0; n < N; ++n)
        for (int v = 0; v < Vl; ++v) want[n * Vl + v] = one.dlogits[n * Vp + r * Vl + v];
      EXPECT_TRUE(Close(d, want, 1e-6)) << "V " << V << " rank " << r << "/" << ranks;
    }
  }
}

}  // namespace
}  // namespace tide_train::ops
