// AdamW, LAMB, the schedule and gradient clipping (optim/optimizer.h).
#include "optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "io/error.h"
#include "ops/vec_math.h"

namespace tide_train {

namespace {

// One tensor's AdamW update (and its gradient zeroed), in PyTorch's order
// of operations; compiled for AVX-512, AVX2 and baseline x86-64 (vec_math.h).
TIDE_OPS_CLONES void adamw_update(float* __restrict w, float* __restrict g, float* __restrict m,
                                  float* __restrict v, size_t n, float gs, float decay, float b1,
                                  float b2, float bc2_sqrt, float eps, float step_size) {
  for (size_t k = 0; k < n; ++k) {
    const float gk = g[k] * gs;
    g[k] = 0.0f;
    w[k] *= decay;
    m[k] = m[k] * b1 + gk * (1.0f - b1);
    v[k] = v[k] * b2 + gk * gk * (1.0f - b2);
    const float denom = std::sqrt(v[k]) / bc2_sqrt + eps;
    w[k] -= step_size * (m[k] / denom);
  }
}

}  // namespace

double Schedule::at(int64_t it) const {
  if (it < warmup) return lr * static_cast<double>(it + 1) / static_cast<double>(warmup + 1);
  if (it > decay_steps) return min_lr;
  const double ratio = decay_steps > warmup ? static_cast<double>(it - warmup) /
                                                  static_cast<double>(decay_steps - warmup)
                                            : 1.0;
  return min_lr + 0.5 * (1.0 + std::cos(std::numbers::pi * ratio)) * (lr - min_lr);
}

Optimizer::Optimizer(ParamSet* params, OptimConfig config, TpCollectives* tp, bool moments)
    : p_(params), cfg_(std::move(config)), tp_(tp) {
  if (cfg_.kind != "adamw" && cfg_.kind != "lamb")
    throw Error("--optimizer " + cfg_.kind + ": expected adamw or lamb");
  size_t at = 0;
  for (size_t i = 0; i < p_->params.size(); ++i) {
    const Param& p = p_->params[i];
    if (p.size() == 0) continue;
    segs_.push_back(Segment{static_cast<int>(i), 0, p.size(), at});
    at += p.size();
  }
  if (!moments) return;  // set_shard follows
  mem::Label l("the optimizer's moments (" + std::to_string(2 * at) + " floats)");
  m_.assign(at, 0.0f);
  v_.assign(at, 0.0f);
}

void Optimizer::set_shard(std::vector<Segment> segments, size_t count, float* grads,
                          TpCollectives* dp) {
  segs_ = std::move(segments);
  grads_ = grads;
  sharded_ = true;
  dp_ = dp;
  mem::Floats<mem::Kind::kOptim>().swap(m_);  // released before the shard's are made
  mem::Floats<mem::Kind::kOptim>().swap(v_);
  mem::Label l("the optimizer's moments of this rank's shard (" + std::to_string(2 * count) +
               " floats)");
  m_.assign(count, 0.0f);
  v_.assign(count, 0.0f);
}

void Optimizer::set_mixed(ops::Half format, uint16_t* grads16, uint16_t* weights16) {
  mixed_ = true;
  format_ = format;
  grads16_ = grads16;
  weights16_ = weights16;
  mem::Label l("the optimizer's fp32 master weights (" + std::to_string(m_.size()) + " floats)");
  w_.assign(m_.size(), 0.0f);
}

uint16_t* Optimizer::grad16_of(const Segment& s) const {
  return grads16_ != nullptr ? grads16_ + s.at
                             : p_->params[static_cast<size_t>(s.param)].grad16 + s.offset;
}

uint16_t* Optimizer::weight16_of(const Segment& s) const {
  return weights16_ != nullptr ? weights16_ + s.at
                               : p_->params[static_cast<size_t>(s.param)].data16 + s.offset;
}

template <class Fn>
void Optimizer::runs(const Segment& s, bool store, Fn fn) {
  float* m = m_.data() + s.at;
  float* v = v_.data() + s.at;
  if (!mixed_) {
    fn(weight_of(s), grad_of(s), m, v, s.n);
    return;
  }
  constexpr size_t kChunk = 4096;
  float g[kChunk];
  float* w = w_.data() + s.at;
  uint16_t* g16 = grad16_of(s);
  uint16_t* w16 = weight16_of(s);
  for (size_t at = 0; at < s.n; at += kChunk) {
    const size_t n = std::min(kChunk, s.n - at);
    ops::from_half(format_, g16 + at, g, n);
    std::fill(g16 + at, g16 + at + n, uint16_t{0});
    fn(w + at, g, m + at, v + at, n);
    if (store) ops::to_half(format_, w + at, w16 + at, n);
  }
}

void Optimizer::write_weights16() {
  if (!mixed_) return;
  for (const Segment& s : segs_) ops::to_half(format_, w_.data() + s.at, weight16_of(s), s.n);
}

void Optimizer::zero_grads() {
  for (const Segment& s : segs_) {
    if (mixed_) {
      uint16_t* g = grad16_of(s);
      std::fill(g, g + s.n, uint16_t{0});
    } else {
      float* g = grad_of(s);
      std::fill(g, g + s.n, 0.0f);
    }
  }
}

float* Optimizer::weight_of(const Segment& s) const {
  return weights_ != nullptr ? weights_ + s.at
                             : p_->params[static_cast<size_t>(s.param)].data.data() + s.offset;
}

float* Optimizer::grad_of(const Segment& s) const {
  return grads_ != nullptr ? grads_ + s.at
                           : p_->params[static_cast<size_t>(s.param)].grad.data() + s.offset;
}

void Optimizer::step(double lr, float grad_scale) {
  ++t_;
  if (cfg_.kind == "lamb")
    lamb(lr, grad_scale);
  else
    adamw(lr, grad_scale);
}

// torch.optim.AdamW (single-tensor path) step for step: decay, moments, then
// the bias-corrected update; the scalars are formed in double and applied in
// float, as PyTorch does.
void Optimizer::adamw(double lr, float gs) {
  const double bc1 = 1.0 - std::pow(cfg_.beta1, static_cast<double>(t_));
  const double bc2 = 1.0 - std::pow(cfg_.beta2, static_cast<double>(t_));
  const float step_size = static_cast<float>(lr / bc1);
  const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  const float b1 = static_cast<float>(cfg_.beta1), b2 = static_cast<float>(cfg_.beta2);
  const float eps = static_cast<float>(cfg_.eps);
  for (const Segment& s : segs_) {
    Param& p = p_->params[static_cast<size_t>(s.param)];
    const float decay = p.decay ? static_cast<float>(1.0 - lr * cfg_.weight_decay) : 1.0f;
    runs(s, true, [&](float* w, float* g, float* m, float* v, size_t n) {
      adamw_update(w, g, m, v, n, gs, decay, b1, b2, bc2_sqrt, eps, step_size);
    });
  }
}

// LAMB: Adam moments with bias correction, u = m̂/(√v̂ + eps) + wd·w, then
// w −= lr·(‖w‖/‖u‖)·u per tensor (whole-tensor norms: a tensor's segments
// summed, over the data-parallel group for a shard, over the tensor-parallel
// group for a sharded tensor).
void Optimizer::lamb(double lr, float gs) {
  const float bc1 = static_cast<float>(1.0 - std::pow(cfg_.beta1, static_cast<double>(t_)));
  const float bc2 = static_cast<float>(1.0 - std::pow(cfg_.beta2, static_cast<double>(t_)));
  const float b1 = static_cast<float>(cfg_.beta1), b2 = static_cast<float>(cfg_.beta2);
  const float eps = static_cast<float>(cfg_.eps);
  const size_t np = p_->params.size();
  const bool tp = tp_ != nullptr && p_->tp().size > 1;
  // Pass 1: moments, and the squared norms of w and u (u recomputed in pass 2).
  std::vector<double> norms(2 * np, 0.0);
  for (const Segment& s : segs_) {
    Param& p = p_->params[static_cast<size_t>(s.param)];
    const float wd = p.decay ? static_cast<float>(cfg_.weight_decay) : 0.0f;
    double ww = 0.0, uu = 0.0;
    runs(s, false, [&](float* w, float* g, float* m, float* v, size_t n) {
      for (size_t k = 0; k < n; ++k) {
        const float gk = g[k] * gs;
        g[k] = 0.0f;
        m[k] = m[k] * b1 + gk * (1.0f - b1);
        v[k] = v[k] * b2 + gk * gk * (1.0f - b2);
        const float u = (m[k] / bc1) / (std::sqrt(v[k] / bc2) + eps) + wd * w[k];
        ww += static_cast<double>(w[k]) * w[k];
        uu += static_cast<double>(u) * u;
      }
    });
    // Replicated tensors are whole on every rank: count them on one only.
    const bool counted = p.sharded() || !tp || p_->tp().rank == 0;
    norms[2 * static_cast<size_t>(s.param)] += counted ? ww : 0.0;
    norms[2 * static_cast<size_t>(s.param) + 1] += counted ? uu : 0.0;
  }
  if (dp_ != nullptr) dp_->allreduce_sum(norms.data(), norms.size());
  if (tp) tp_->allreduce_sum(norms.data(), norms.size());
  for (const Segment& s : segs_) {
    Param& p = p_->params[static_cast<size_t>(s.param)];
    const float wd = p.decay ? static_cast<float>(cfg_.weight_decay) : 0.0f;
    const float wn = static_cast<float>(std::sqrt(norms[2 * static_cast<size_t>(s.param)]));
    const float un = static_cast<float>(std::sqrt(norms[2 * static_cast<size_t>(s.param) + 1]));
    const float trust = (wn > 0.0f && un > 0.0f) ? wn / un : 1.0f;
    const float rate = static_cast<float>(lr) * trust;
    float* w = mixed_ ? w_.data() + s.at : weight_of(s);
    const float* m = m_.data() + s.at;
    const float* v = v_.data() + s.at;
    for (size_t k = 0; k < s.n; ++k) {
      const float u = (m[k] / bc1) / (std::sqrt(v[k] / bc2) + eps) + wd * w[k];
      w[k] -= rate * u;
    }
    if (mixed_) ops::to_half(format_, w, weight16_of(s), s.n);
  }
}

namespace {

// Σ g² of n floats, in 1024-element blocks of 16 float lanes, each block's
// sum added in double.
double sum_squares(const float* g, size_t n) {
  double s = 0.0;
  for (size_t at = 0; at < n; at += 1024) {
    const size_t end = std::min(n, at + 1024);
    float lanes[16] = {};
    size_t k = at;
    for (; k + 16 <= end; k += 16)
      for (int j = 0; j < 16; ++j) lanes[j] += g[k + j] * g[k + j];
    double block = 0.0;
    for (float x : lanes) block += x;
    for (; k < end; ++k) block += static_cast<double>(g[k]) * g[k];
    s += block;
  }
  return s;
}

}  // namespace

double Optimizer::grad_norm_squared(int skip) const {
  if (!sharded_) return tide_train::grad_norm_squared(*p_, tp_, skip);
  const bool many = tp_ != nullptr && p_->tp().size > 1;
  double parts[2] = {0.0, 0.0};  // sharded over TP, replicated
  bool overflow = false;
  for (const Segment& s : segs_) {
    if (s.param == skip) continue;
    const Param& p = p_->params[static_cast<size_t>(s.param)];
    parts[p.sharded() ? 0 : 1] += mixed_
                                      ? ops::half_sum_squares(format_, grad16_of(s), s.n, &overflow)
                                      : sum_squares(grad_of(s), s.n);
  }
  if (overflow) parts[0] = INFINITY;  // summed into every rank's norm
  if (dp_ != nullptr) dp_->allreduce_sum(parts, 2);
  if (!many) return parts[0] + parts[1];
  double both = parts[0] + (p_->tp().rank == 0 ? parts[1] : 0.0);
  tp_->allreduce_sum(&both, 1);
  return both;
}

double grad_norm_squared(const ParamSet& params, TpCollectives* tp, int skip) {
  const bool many = tp != nullptr && params.tp().size > 1;
  double sharded = 0.0, replicated = 0.0;
  bool overflow = false;
  const HalfStorage* half = params.half();
  for (size_t i = 0; i < params.params.size(); ++i) {
    const Param& p = params.params[i];
    if (static_cast<int>(i) == skip) continue;
    (p.sharded() ? sharded : replicated) +=
        half != nullptr ? ops::half_sum_squares(half->format, p.grad16, p.size(), &overflow)
                        : sum_squares(p.grad.data(), p.size());
  }
  if (overflow) sharded = INFINITY;
  if (!many) return sharded + replicated;
  // Summed over the group: sharded tensors' parts, replicated ones once.
  double both = sharded + (params.tp().rank == 0 ? replicated : 0.0);
  tp->allreduce_sum(&both, 1);
  return both;
}

float clip_scale(double norm, double clip) {
  if (clip <= 0.0) return 1.0f;
  const double coef = clip / (norm + 1e-6);
  return coef >= 1.0 ? 1.0f : static_cast<float>(coef);
}

}  // namespace tide_train
