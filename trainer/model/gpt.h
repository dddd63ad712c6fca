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
#include <string>
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

// The part of the model one GPT object computes: blocks [first, end) (end
// -1: through the last), the embeddings when `embed`, the final LayerNorm,
// the tied head and the loss when `head`. A pipeline stage is one of these;
// the whole model is the default.
// Activation checkpointing (docs/zero.md): kEvery keeps only the input of
// every `every`-th block (segments of `every` blocks are computed again,
// forward, before their backward; Chen et al. 2016, every = ceil(sqrt(L))
// for "sqrt"); kSelective keeps everything but the attention probabilities
// (B x heads x T x T per block), which each block's backward computes
// again (Megatron's selective recomputation).
struct Recompute {
  enum Kind { kNone, kEvery, kSelective } kind = kNone;
  int every = 0;
};
// "none", "every:K", "sqrt" (K = ceil(sqrt(layers))), "selective";
// Error otherwise.
Recompute parse_recompute(const std::string& s, int layers);

struct StageSpec {
  int first = 0, end = -1;
  bool embed = true, head = true;
};

// Which part of a backward to run: everything, or zero-bubble's split into
// the input-gradient pass (what the previous stage waits for; the linear
// layers' weight gradients are left for later) and the weight-gradient pass
// (those GEMMs, from the output gradients the input pass kept).
enum class Pass { kFull, kInput, kWeight };

// ZeRO-3's gathered weights: need(l, next) is called before block l's
// forward, backward or weight pass; block l's weights must be in its
// parameters' data when it returns. `next` is the block this pass computes
// after it (-1: none), which the gate may start gathering meanwhile.
class WeightGate {
 public:
  virtual ~WeightGate() = default;
  virtual void need(int layer, int next) = 0;
};

class GPT {
 public:
  // micro_batch: sequences per forward. reference: use the ops' plain ref::
  // versions (tests). tp may be null when the tensor-parallel size is 1.
  GPT(ParamSet* params, int micro_batch, TpCollectives* tp, bool reference = false,
      StageSpec stage = StageSpec(), Recompute recompute = Recompute());
  GPT(const GPT&) = delete;
  GPT& operator=(const GPT&) = delete;

  // inputs, targets: micro_batch × T token ids. Returns the sum of the
  // per-token cross-entropies (nats) over the micro-batch (targets null:
  // logits only, returns 0). Causal: position t's logits depend on inputs
  // 0..t only, so a shorter prompt may be padded (sampling). Slot 0.
  double forward(const int* inputs, const int* targets) { return forward(0, inputs, targets); }
  // Backward of the last forward (with targets): adds ∂(scale·Σ loss)/∂θ into
  // the parameters' grad. ready(i) is called once parameter i's gradient of
  // this micro-batch is final (in the order the backward finishes them; wte
  // last, as the tied head and the embedding both add to it). Slot 0.
  void backward(float scale, const std::function<void(int)>& ready) {
    backward(0, nullptr, scale, Pass::kFull, ready);
  }

  // Activation slots: every micro-batch in flight on a pipeline stage keeps
  // its activations in its own slot. Slot 0 always exists; acquire() hands
  // out another free one (made on first use), release() returns it.
  int acquire();
  void release(int slot);
  int slots_in_use() const;
  // Floats one activation slot holds now (slot 0's; zb's kept gradients
  // included once a Pass::kInput ran): the planner's activation memory.
  size_t slot_floats() const;
  // The stage's input activation [micro_batch·T, C] of `slot` (a stage
  // without the embeddings: the caller fills it before forward) and its
  // output (a stage without the head: what the next stage receives).
  float* input(int slot);
  const float* output(int slot) const;
  size_t activation_floats() const { return static_cast<size_t>(B_) * T_ * C_; }
  size_t tokens() const { return static_cast<size_t>(B_) * T_; }

  // Forward of this stage on `slot`: inputs (token ids) for the stage with
  // the embeddings, targets for the one with the head (loss returned; 0
  // otherwise).
  double forward(int slot, const int* inputs, const int* targets);
  // Backward of `slot`'s forward: dout is ∂loss/∂(stage output) (null for
  // the stage with the head). After Pass::kFull or kInput, input_grad() holds
  // ∂loss/∂(stage input) until the next backward (a stage without the
  // embeddings sends it back). kWeight needs an earlier kInput of that slot.
  void backward(int slot, const float* dout, float scale, Pass pass,
                const std::function<void(int)>& ready);
  const float* input_grad() const { return dres_.data(); }

  // This rank's logits slice of the last forward on `slot`: [micro_batch·T,
  // Vl] (the columns v0 .. v0+Vl of the padded vocabulary). Head stage only.
  const float* logits(int slot = 0) const { return acts_[static_cast<size_t>(slot)].logits.data(); }
  // Per-token losses of the last forward with targets ([micro_batch·T]).
  const mem::ActFloats& token_losses(int slot = 0) const {
    return acts_[static_cast<size_t>(slot)].losses;
  }
  int micro_batch() const { return B_; }
  void set_gate(WeightGate* gate) { gate_ = gate; }
  const StageSpec& stage() const { return stage_; }

 private:
  struct Layer {
    mem::ActFloats ln1, ln1_mean, ln1_rstd, qkv, att, attn_out, res_mid;
    mem::ActFloats ln2, ln2_mean, ln2_rstd, fc, gelu;
    // Pass::kInput: the linear layers' output gradients, for kWeight.
    mem::ActFloats d_mlp_proj, d_fc, d_attn_proj, d_qkv;
  };
  struct Acts {
    bool used = false;
    std::vector<int> inputs, targets;
    // res[l]: the residual stream entering the stage's block l; res[L]: after the last.
    std::vector<mem::ActFloats> res;
    std::vector<Layer> layers;
    mem::ActFloats lnf, lnf_mean, lnf_rstd, logits, rowmax, sums, losses, dlogits;
  };
  void make_slot(Acts* a) const;
  static void size_layer(Layer* L, size_t N, size_t C, size_t Cl, size_t Fl, size_t att);
  // Where block l (stage-relative) reads and writes in slot a.
  struct View {
    Layer* layer;
    const float* in;
    float* out;
    float* att;  // the attention probabilities
  };
  View view(Acts& a, int l);
  void block_forward(Acts& a, int l);
  void backward_blocks(Acts& a, Pass pass, const std::function<void(int)>& ready);
  void block_backward(Acts& a, int l, Pass pass, const std::function<void(int)>& ready);
  void tp_sum(float* buf, size_t n);
  void weight_pass(Acts& a, const std::function<void(int)>& ready);

  // Before block li (stage-relative) of a pass going up (forward) or down.
  void need(size_t li, bool up) const;
  ParamSet* p_;
  TpCollectives* tp_;
  WeightGate* gate_ = nullptr;
  Recompute rc_;
  // Recomputation scratch (shared by the slots: one backward at a time):
  // kEvery: one segment's blocks and inner residuals; kSelective: one
  // block's attention probabilities and a throwaway attention output.
  std::vector<Layer> seg_layers_;
  std::vector<mem::ActFloats> seg_res_;
  mem::ActFloats att_scratch_, recompute_out_;
  bool ref_;
  StageSpec stage_;
  int B_, T_, C_, NH_, HS_, Vl_, v0_, nvalid_, L_;
  std::vector<Acts> acts_;
  // Gradient scratch, reused by every block.
  mem::ActFloats dres_, dln_, dqkv_, dattn_, dfc_, dgelu_, dlogits_, attn_scratch_;
};

}  // namespace tide_train
