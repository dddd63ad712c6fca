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

class Optimizer {
 public:
  // tp: the tensor-parallel collectives (null with one rank).
  Optimizer(ParamSet* params, OptimConfig config, TpCollectives* tp);
  // One update with rate lr from the parameters' grad (already reduced),
  // each gradient first multiplied by grad_scale (clipping: clip_scale());
  // advances the step count and leaves every gradient zero (the next step
  // accumulates into them: no separate zeroing pass).
  void step(double lr, float grad_scale = 1.0f);

  int64_t steps() const { return t_; }
  void set_steps(int64_t t) { t_ = t; }
  std::vector<std::vector<float>>& exp_avg() { return m_; }
  std::vector<std::vector<float>>& exp_avg_sq() { return v_; }
  const OptimConfig& config() const { return cfg_; }

 private:
  void adamw(double lr, float gs);
  void lamb(double lr, float gs);
  ParamSet* p_;
  OptimConfig cfg_;
  TpCollectives* tp_;
  int64_t t_ = 0;
  std::vector<std::vector<float>> m_, v_;
  std::vector<float> u_;  // LAMB's update, one tensor at a time
};

// The squared L2 norm of every parameter's gradient, each whole tensor once
// (sharded tensors summed over the tensor-parallel group; replicated ones
// counted once), in double. Parameter `skip` (an index; -1: none) is left
// out (a pipeline stage holding a copy another stage counts).
double grad_norm_squared(const ParamSet& params, TpCollectives* tp, int skip = -1);
// The factor PyTorch's clip_grad_norm_ multiplies the gradients by:
// min(1, clip/(norm + 1e-6)) when clip > 0, else 1.
float clip_scale(double norm, double clip);

}  // namespace tide_train
