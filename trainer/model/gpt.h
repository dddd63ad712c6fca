// The GPT (nanoGPT's model without dropout), forward and backward over one
// micro-batch, written out per operation (trainer/ops), under Megatron-style
// tensor parallelism: c_attn and c_fc split by columns (whole heads), the
// output projections by rows, the vocabulary split for the embedding and the
// loss. Per block: two All-Reduces forward (after each row-parallel
// projection) and two backward (the input gradients of the column-parallel
// layers), plus one each for the embedding and the head, and the
// cross-entropy's max and sums. With one tensor-parallel rank there is no
// communication at all.
//
// Threads: one GPT per rank, used from one thread. Not copyable.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "model/params.h"

namespace tide_train {

// The collectives the model needs over its tensor-parallel group (the
// trainer implements them with Tide; blocking; an error throws).
class TpCollectives {
 public:
  virtual ~TpCollectives() = default;
  virtual void allreduce_sum(float* buf, size_t n) = 0;
  virtual void allreduce_max(float* buf, size_t n) = 0;
  virtual void allreduce_sum(double* buf, size_t n) = 0;
};

class GPT {
 public:
  // micro_batch: sequences per forward. reference: use the ops' plain ref::
  // versions (tests). tp may be null when the tensor-parallel size is 1.
  GPT(ParamSet* params, int micro_batch, TpCollectives* tp, bool reference = false);
  GPT(const GPT&) = delete;
  GPT& operator=(const GPT&) = delete;

  // inputs, targets: micro_batch × T token ids. Returns the sum of the
  // per-token cross-entropies (nats) over the micro-batch (targets null:
  // logits only, returns 0). Causal: position t's logits depend on inputs
  // 0..t only, so a shorter prompt may be padded (sampling).
  double forward(const int* inputs, const int* targets);
  // Backward of the last forward (with targets): adds ∂(scale·Σ loss)/∂θ into
  // the parameters' grad. ready(i) is called once parameter i's gradient of
  // this micro-batch is final (in the order the backward finishes them; wte
  // last, as the tied head and the embedding both add to it).
  void backward(float scale, const std::function<void(int)>& ready);

  // This rank's logits slice of the last forward: [micro_batch·T, Vl] (the
  // columns v0 .. v0+Vl of the padded vocabulary).
  const float* logits() const { return logits_.data(); }
  // Per-token losses of the last forward with targets ([micro_batch·T]).
  const std::vector<float>& token_losses() const { return losses_; }
  int micro_batch() const { return B_; }

 private:
  struct Layer {
    std::vector<float> ln1, ln1_mean, ln1_rstd, qkv, att, attn_out, res_mid;
    std::vector<float> ln2, ln2_mean, ln2_rstd, fc, gelu;
  };
  void tp_sum(float* buf, size_t n);

  ParamSet* p_;
  TpCollectives* tp_;
  bool ref_;
  int B_, T_, C_, NH_, HS_, Vl_, v0_, nvalid_;
  std::vector<int> inputs_, targets_;
  // res_[l]: the residual stream entering block l; res_[L]: after the last.
  std::vector<std::vector<float>> res_;
  std::vector<Layer> layers_;
  std::vector<float> lnf_, lnf_mean_, lnf_rstd_, logits_, rowmax_, sums_, losses_;
  // Gradient scratch, reused by every block.
  std::vector<float> dres_, dln_, dqkv_, dattn_, dfc_, dgelu_, dlogits_, attn_scratch_;
};

}  // namespace tide_train
