// AdamW (PyTorch's torch.optim.AdamW arithmetic) and LAMB (You et al. 2020,
// Algorithm 2, with bias correction) over this rank's parameter shards, the
// learning-rate schedule (nanoGPT's: linear warm-up, cosine decay to min_lr)
// and global gradient-norm clipping. Weight decay applies to the 2-D weights
// (Param::decay: matrices and embeddings), not to biases or LayerNorms.
//
// LAMB's trust ratio ‖w‖/‖u‖ (1 when either is 0) uses whole-tensor norms:
// the squares of sharded tensors are summed over the tensor-parallel group
// (one All-Reduce per step for all tensors).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/gpt.h"
#include "model/params.h"

namespace tide_train {

struct OptimConfig {
  std::string kind = "adamw";  // adamw | lamb
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
};

struct Schedule {
  double lr = 1e-3, min_lr = 1e-4;
  int64_t warmup = 100, decay_steps = 2000;
  // The rate of 0-based step `it`.
  double at(int64_t it) const;
};

// A run of the elements the optimizer updates: n elements of parameter
// `param` from local element `offset`, whose moments (and, when the
// optimizer reads a shard of gradients, whose gradients) are at [at, at+n).
struct Segment {
  int param = 0;
  size_t offset = 0, n = 0, at = 0;
};

class Optimizer {
 public:
  // Every element this rank holds (ZeRO 0): one segment per held tensor,
  // gradients read from the parameters' grad. tp: the tensor-parallel
  // collectives (null with one rank). moments false: none made yet (ZeRO:
  // set_shard makes the shard's).
  Optimizer(ParamSet* params, OptimConfig config, TpCollectives* tp, bool moments = true);
  // ZeRO 1-3: only `segments` (this rank's shard of count elements, the
  // rest padding), gradients read from `grads` (the shard, laid out as the
  // segments say; null: from the parameters' grad at each segment's
  // offset); dp: the data-parallel collectives (LAMB's whole-tensor norms,
  // the gradient norm). The moments are made again (zero).
  void set_shard(std::vector<Segment> segments, size_t count, float* grads, TpCollectives* dp);
  // ZeRO-3: the weights too are the shard's (laid out as the segments say).
  void set_weight_shard(float* weights) { weights_ = weights; }
  // Mixed precision (after set_shard, if any): the optimizer holds fp32
  // master weights of its segments (master(), laid out as the moments; the
  // caller fills them), reads 16-bit gradients (grads16: the shard's, laid
  // out as the segments; null: the parameters' grad16) and writes each
  // updated master weight rounded into the 16-bit weights (weights16: the
  // shard's; null: the parameters' data16).
  void set_mixed(ops::Half format, uint16_t* grads16, uint16_t* weights16);
  bool mixed() const { return mixed_; }
  mem::Floats<mem::Kind::kOptim>& master() { return w_; }
  // Every 16-bit weight again from the master weights (after a load).
  void write_weights16();
  // The gradients the optimizer reads zeroed without an update (a skipped
  // fp16 step).
  void zero_grads();
  // One update with rate lr from the (already reduced) gradients, each first
  // multiplied by grad_scale (clipping: clip_scale()); advances the step
  // count and leaves every gradient it read zero (the next step accumulates
  // into them: no separate zeroing pass).
  void step(double lr, float grad_scale = 1.0f);
  // The squared L2 norm of the gradients the optimizer reads, each whole
  // tensor once (over the tensor- and, for a shard, data-parallel groups),
  // parameter `skip` left out (-1: none). Mixed precision: +inf when a
  // 16-bit gradient overflowed on any rank (ops::half_sum_squares).
  double grad_norm_squared(int skip = -1) const;

  int64_t steps() const { return t_; }
  void set_steps(int64_t t) { t_ = t; }
  // The moments, laid out as segments() say.
  mem::Floats<mem::Kind::kOptim>& exp_avg() { return m_; }
  mem::Floats<mem::Kind::kOptim>& exp_avg_sq() { return v_; }
  const std::vector<Segment>& segments() const { return segs_; }
  bool sharded() const { return sharded_; }
  const OptimConfig& config() const { return cfg_; }

 private:
  float* grad_of(const Segment& s) const;
  float* weight_of(const Segment& s) const;
  uint16_t* grad16_of(const Segment& s) const;
  uint16_t* weight16_of(const Segment& s) const;
  // fn(w, g, m, v, n) over every run of segment s: whole in fp32; in
  // mixed precision in chunks, g converted from 16 bits (and the 16-bit
  // gradients zeroed), w the master weights, then rounded into the 16-bit
  // weights when store.
  template <class Fn>
  void runs(const Segment& s, bool store, Fn fn);
  void adamw(double lr, float gs);
  void lamb(double lr, float gs);
  ParamSet* p_;
  OptimConfig cfg_;
  TpCollectives* tp_;
  TpCollectives* dp_ = nullptr;
  float* grads_ = nullptr;    // the shard's gradients (null: the parameters')
  bool sharded_ = false;      // set_shard was called
  float* weights_ = nullptr;  // ZeRO-3: the shard's weights (null: the parameters')
  int64_t t_ = 0;
  std::vector<Segment> segs_;
  mem::Floats<mem::Kind::kOptim> m_, v_;
  bool mixed_ = false;
  ops::Half format_ = ops::Half::kBf16;
  uint16_t* grads16_ = nullptr;
  uint16_t* weights16_ = nullptr;
  mem::Floats<mem::Kind::kOptim> w_;  // mixed precision: the master weights
};

// The squared L2 norm of every parameter's gradient (mixed precision: the
// 16-bit ones; +inf on an overflow), each whole tensor once
// (sharded tensors summed over the tensor-parallel group; replicated ones
// counted once), in double. Parameter `skip` (an index; -1: none) is left
// out (a pipeline stage holding a copy another stage counts).
double grad_norm_squared(const ParamSet& params, TpCollectives* tp, int skip = -1);
// The factor PyTorch's clip_grad_norm_ multiplies the gradients by:
// min(1, clip/(norm + 1e-6)) when clip > 0, else 1.
float clip_scale(double norm, double clip);

}  // namespace tide_train
