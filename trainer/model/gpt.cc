// Forward and backward of the GPT over one micro-batch (model/gpt.h).
#include "model/gpt.h"

#include <algorithm>
#include <cmath>

#include "io/error.h"
#include "ops/attention.h"
#include "ops/cross_entropy.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/layernorm.h"
#include "ops/linear.h"

namespace tide_train {

namespace {

// The fast kernels or their plain references, chosen once per model.
struct Ops {
  decltype(&ops::linear_forward) linear_fwd;
  decltype(&ops::linear_backward) linear_bwd;
  decltype(&ops::layernorm_forward) ln_fwd;
  decltype(&ops::layernorm_backward) ln_bwd;
  decltype(&ops::gelu_forward) gelu_fwd;
  decltype(&ops::gelu_backward) gelu_bwd;
  decltype(&ops::embedding_forward) emb_fwd;
  decltype(&ops::embedding_backward) emb_bwd;
  decltype(&ops::xent_local_max) xent_max;
  decltype(&ops::xent_local_sums) xent_sums;
  decltype(&ops::xent_backward) xent_bwd;
  decltype(&ops::attention_forward) attn_fwd;
  bool ref;
};

const Ops kFast{ops::linear_forward,
                ops::linear_backward,
                ops::layernorm_forward,
                ops::layernorm_backward,
                ops::gelu_forward,
                ops::gelu_backward,
                ops::embedding_forward,
                ops::embedding_backward,
                ops::xent_local_max,
                ops::xent_local_sums,
                ops::xent_backward,
                ops::attention_forward,
                false};
const Ops kRef{ops::ref::linear_forward,
               ops::ref::linear_backward,
               ops::ref::layernorm_forward,
               ops::ref::layernorm_backward,
               ops::ref::gelu_forward,
               ops::ref::gelu_backward,
               ops::ref::embedding_forward,
               ops::ref::embedding_backward,
               ops::ref::xent_local_max,
               ops::ref::xent_local_sums,
               ops::ref::xent_backward,
               ops::ref::attention_forward,
               true};

void zero(mem::ActFloats* v) { std::fill(v->begin(), v->end(), 0.0f); }

// out[n, :] += bias for every row.
void add_bias(float* out, const float* bias, int N, int C) {
  for (int n = 0; n < N; ++n) {
    float* row = out + static_cast<size_t>(n) * C;
    for (int c = 0; c < C; ++c) row[c] += bias[c];
  }
}

}  // namespace

GPT::GPT(ParamSet* params, int micro_batch, TpCollectives* tp, bool reference, StageSpec stage)
    : p_(params), tp_(tp), ref_(reference), stage_(stage) {
  const ModelConfig& m = p_->model();
  const TensorParallel& t = p_->tp();
  if (stage_.end < 0) stage_.end = m.n_layer;
  if (stage_.first < 0 || stage_.first > stage_.end || stage_.end > m.n_layer)
    throw Error("a stage's layers " + std::to_string(stage_.first) + ".." +
                std::to_string(stage_.end) + " are not within the model's " +
                std::to_string(m.n_layer));
  L_ = stage_.end - stage_.first;
  B_ = micro_batch;
  T_ = m.block_size;
  C_ = m.n_embd;
  NH_ = t.heads(m);
  HS_ = m.head_size();
  Vl_ = t.local_vocab(m);
  v0_ = t.vocab_begin(m);
  nvalid_ = t.valid_vocab(m);
  const size_t N = static_cast<size_t>(B_) * T_, C = C_;
  const size_t Cl = static_cast<size_t>(NH_) * HS_;  // this rank's attention width
  const size_t Fl = 4 * C / t.size;                  // this rank's MLP width
  acts_.resize(1);
  make_slot(&acts_[0]);
  acts_[0].used = true;
  dres_.resize(N * C);
  dln_.resize(N * C);
  dqkv_.resize(N * 3 * Cl);
  dattn_.resize(N * Cl);
  dfc_.resize(N * Fl);
  dgelu_.resize(N * Fl);
  if (stage_.head) dlogits_.resize(N * static_cast<size_t>(Vl_));
  attn_scratch_.resize(ops::attention_scratch_floats(T_, HS_));
}

void GPT::make_slot(Acts* a) const {
  const size_t N = static_cast<size_t>(B_) * T_, C = C_;
  const size_t Cl = static_cast<size_t>(NH_) * HS_;
  const size_t Fl = 4 * C / p_->tp().size;
  a->inputs.resize(N);
  a->targets.resize(N);
  a->res.assign(static_cast<size_t>(L_) + 1, mem::ActFloats(N * C));
  a->layers.resize(static_cast<size_t>(L_));
  for (Layer& L : a->layers) {
    L.ln1.resize(N * C);
    L.ln1_mean.resize(N);
    L.ln1_rstd.resize(N);
    L.qkv.resize(N * 3 * Cl);
    L.att.resize(static_cast<size_t>(B_) * NH_ * T_ * T_);
    L.attn_out.resize(N * Cl);
    L.res_mid.resize(N * C);
    L.ln2.resize(N * C);
    L.ln2_mean.resize(N);
    L.ln2_rstd.resize(N);
    L.fc.resize(N * Fl);
    L.gelu.resize(N * Fl);
  }
  if (stage_.head) {
    a->lnf.resize(N * C);
    a->lnf_mean.resize(N);
    a->lnf_rstd.resize(N);
    a->logits.resize(N * static_cast<size_t>(Vl_));
    a->rowmax.resize(N);
    a->sums.resize(2 * N);
    a->losses.resize(N);
  }
}

int GPT::acquire() {
  for (size_t i = 1; i < acts_.size(); ++i)
    if (!acts_[i].used) {
      acts_[i].used = true;
      return static_cast<int>(i);
    }
  acts_.emplace_back();
  make_slot(&acts_.back());
  acts_.back().used = true;
  return static_cast<int>(acts_.size()) - 1;
}

void GPT::release(int slot) {
  if (slot > 0) acts_[static_cast<size_t>(slot)].used = false;
}

int GPT::slots_in_use() const {
  int n = 0;
  for (size_t i = 1; i < acts_.size(); ++i) n += acts_[i].used ? 1 : 0;
  return n;
}

size_t GPT::slot_floats() const {
  const Acts& a = acts_.front();
  size_t n = 0;
  for (const auto& r : a.res) n += r.size();
  for (const Layer& L : a.layers)
    for (const mem::ActFloats* v : {&L.ln1, &L.ln1_mean, &L.ln1_rstd, &L.qkv, &L.att, &L.attn_out,
                                    &L.res_mid, &L.ln2, &L.ln2_mean, &L.ln2_rstd, &L.fc, &L.gelu,
                                    &L.d_mlp_proj, &L.d_fc, &L.d_attn_proj, &L.d_qkv})
      n += v->size();
  for (const mem::ActFloats* v :
       {&a.lnf, &a.lnf_mean, &a.lnf_rstd, &a.logits, &a.rowmax, &a.sums, &a.losses, &a.dlogits})
    n += v->size();
  return n;
}

float* GPT::input(int slot) { return acts_[static_cast<size_t>(slot)].res.front().data(); }
const float* GPT::output(int slot) const {
  return acts_[static_cast<size_t>(slot)].res.back().data();
}

void GPT::tp_sum(float* buf, size_t n) {
  if (tp_ != nullptr && p_->tp().size > 1) tp_->allreduce_sum(buf, n);
}

double GPT::forward(int slot, const int* inputs, const int* targets) {
  const Ops& o = ref_ ? kRef : kFast;
  const int N = B_ * T_, C = C_, Cl = NH_ * HS_, Fl = 4 * C_ / p_->tp().size;
  const bool tp = p_->tp().size > 1;
  Acts& a = acts_[static_cast<size_t>(slot)];
  auto P = [&](int i) { return p_->params[static_cast<size_t>(i)].data.data(); };

  // Embedding: the vocabulary slice's rows (summed over the tensor-parallel
  // ranks), then the positions.
  float* x = a.res[0].data();
  if (stage_.embed) {
    std::copy(inputs, inputs + N, a.inputs.begin());
    if (!tp) {
      o.emb_fwd(x, inputs, P(p_->wte), v0_, Vl_, P(p_->wpe), B_, T_, C);
    } else {
      o.emb_fwd(x, inputs, P(p_->wte), v0_, Vl_, nullptr, B_, T_, C);
      tp_sum(x, static_cast<size_t>(N) * C);
      const float* wpe = P(p_->wpe);
      for (int b = 0; b < B_; ++b)
        for (int t = 0; t < T_; ++t) {
          float* row = x + (static_cast<size_t>(b) * T_ + t) * C;
          const float* pos = wpe + static_cast<size_t>(t) * C;
          for (int c = 0; c < C; ++c) row[c] += pos[c];
        }
    }
  }

  for (size_t l = 0; l < a.layers.size(); ++l) {
    Layer& L = a.layers[l];
    const BlockParams& bp = p_->blocks[static_cast<size_t>(stage_.first) + l];
    const float* in = a.res[l].data();
    float* out = a.res[l + 1].data();
    o.ln_fwd(L.ln1.data(), L.ln1_mean.data(), L.ln1_rstd.data(), in, P(bp.ln1_w), P(bp.ln1_b), N,
             C);
    o.linear_fwd(L.qkv.data(), L.ln1.data(), P(bp.qkv_w), P(bp.qkv_b), N, C, 3 * Cl);
    o.attn_fwd(L.attn_out.data(), L.att.data(), L.qkv.data(), B_, T_, NH_, HS_);
    // Row-parallel projection: partial sums, reduced, then the bias once.
    o.linear_fwd(L.res_mid.data(), L.attn_out.data(), P(bp.attn_proj_w), nullptr, N, Cl, C);
    tp_sum(L.res_mid.data(), static_cast<size_t>(N) * C);
    add_bias(L.res_mid.data(), P(bp.attn_proj_b), N, C);
    ops::residual_forward(L.res_mid.data(), L.res_mid.data(), in, static_cast<size_t>(N) * C);

    o.ln_fwd(L.ln2.data(), L.ln2_mean.data(), L.ln2_rstd.data(), L.res_mid.data(), P(bp.ln2_w),
             P(bp.ln2_b), N, C);
    o.linear_fwd(L.fc.data(), L.ln2.data(), P(bp.fc_w), P(bp.fc_b), N, C, Fl);
    o.gelu_fwd(L.gelu.data(), L.fc.data(), static_cast<size_t>(N) * Fl);
    o.linear_fwd(out, L.gelu.data(), P(bp.mlp_proj_w), nullptr, N, Fl, C);
    tp_sum(out, static_cast<size_t>(N) * C);
    add_bias(out, P(bp.mlp_proj_b), N, C);
    ops::residual_forward(out, out, L.res_mid.data(), static_cast<size_t>(N) * C);
  }
  if (!stage_.head) return 0.0;

  o.ln_fwd(a.lnf.data(), a.lnf_mean.data(), a.lnf_rstd.data(), a.res.back().data(), P(p_->lnf_w),
           P(p_->lnf_b), N, C);
  // The tied head over this rank's vocabulary slice.
  o.linear_fwd(a.logits.data(), a.lnf.data(), P(p_->wte), nullptr, N, C, Vl_);
  if (targets == nullptr) return 0.0;
  std::copy(targets, targets + N, a.targets.begin());

  // Vocabulary-parallel cross-entropy: global max, then the sums.
  o.xent_max(a.rowmax.data(), a.logits.data(), N, Vl_, nvalid_);
  if (tp) tp_->allreduce_max(a.rowmax.data(), static_cast<size_t>(N));
  o.xent_sums(a.sums.data(), a.sums.data() + N, a.logits.data(), a.rowmax.data(), targets, v0_, N,
              Vl_, nvalid_);
  tp_sum(a.sums.data(), 2 * static_cast<size_t>(N));
  double total = 0.0;
  for (int n = 0; n < N; ++n) {
    const size_t k = static_cast<size_t>(n);
    const float loss = std::log(a.sums[k]) + a.rowmax[k] - a.sums[static_cast<size_t>(N) + k];
    a.losses[k] = loss;
    total += loss;
  }
  return total;
}

// Zero-bubble's weight-gradient pass: the linear layers' dW and db from the
// output gradients the input pass kept (the same GEMMs a full backward runs).
void GPT::weight_pass(Acts& a, const std::function<void(int)>& ready) {
  const Ops& o = ref_ ? kRef : kFast;
  const int N = B_ * T_, C = C_, Cl = NH_ * HS_, Fl = 4 * C_ / p_->tp().size;
  auto P = [&](int i) { return p_->params[static_cast<size_t>(i)].data.data(); };
  auto G = [&](int i) { return p_->params[static_cast<size_t>(i)].grad.data(); };
  if (stage_.head) {
    o.linear_bwd(nullptr, G(p_->wte), nullptr, a.dlogits.data(), a.lnf.data(), P(p_->wte), N, C,
                 Vl_, false);
  }
  for (size_t li = a.layers.size(); li-- > 0;) {
    Layer& L = a.layers[li];
    const BlockParams& bp = p_->blocks[static_cast<size_t>(stage_.first) + li];
    o.linear_bwd(nullptr, G(bp.mlp_proj_w), G(bp.mlp_proj_b), L.d_mlp_proj.data(), L.gelu.data(),
                 P(bp.mlp_proj_w), N, Fl, C, false);
    o.linear_bwd(nullptr, G(bp.fc_w), G(bp.fc_b), L.d_fc.data(), L.ln2.data(), P(bp.fc_w), N, C, Fl,
                 false);
    o.linear_bwd(nullptr, G(bp.attn_proj_w), G(bp.attn_proj_b), L.d_attn_proj.data(),
                 L.attn_out.data(), P(bp.attn_proj_w), N, Cl, C, false);
    o.linear_bwd(nullptr, G(bp.qkv_w), G(bp.qkv_b), L.d_qkv.data(), L.ln1.data(), P(bp.qkv_w), N, C,
                 3 * Cl, false);
    for (int i : {bp.mlp_proj_w, bp.mlp_proj_b, bp.fc_w, bp.fc_b, bp.attn_proj_w, bp.attn_proj_b,
                  bp.qkv_w, bp.qkv_b})
      ready(i);
  }
  if (stage_.head) ready(p_->wte);
}

void GPT::backward(int slot, const float* dout, float scale, Pass pass,
                   const std::function<void(int)>& ready) {
  Acts& a = acts_[static_cast<size_t>(slot)];
  if (pass == Pass::kWeight) {
    weight_pass(a, ready);
    return;
  }
  const Ops& o = ref_ ? kRef : kFast;
  const int N = B_ * T_, C = C_, Cl = NH_ * HS_, Fl = 4 * C_ / p_->tp().size;
  const size_t NC = static_cast<size_t>(N) * C;
  const bool full = pass == Pass::kFull;
  // The weight and bias gradients of a linear layer now (kFull), or its
  // output gradient kept for the weight pass (kInput).
  auto keep = [&](mem::ActFloats* dst, const float* src, size_t n) {
    if (!full) dst->assign(src, src + n);
  };
  auto P = [&](int i) { return p_->params[static_cast<size_t>(i)].data.data(); };
  auto G = [&](int i) { return p_->params[static_cast<size_t>(i)].grad.data(); };
  auto GW = [&](int i) { return full ? G(i) : nullptr; };

  if (stage_.head) {
    // Loss → logits → final LayerNorm. The head's input gradient is partial
    // over the vocabulary slices.
    if (!full) a.dlogits.resize(dlogits_.size());
    float* dl = full ? dlogits_.data() : a.dlogits.data();
    o.xent_bwd(dl, a.logits.data(), a.rowmax.data(), a.sums.data(), a.targets.data(), v0_, N, Vl_,
               nvalid_, scale);
    o.linear_bwd(dln_.data(), GW(p_->wte), nullptr, dl, a.lnf.data(), P(p_->wte), N, C, Vl_, true);
    tp_sum(dln_.data(), NC);
    zero(&dres_);
    o.ln_bwd(dres_.data(), G(p_->lnf_w), G(p_->lnf_b), dln_.data(), a.res.back().data(),
             P(p_->lnf_w), a.lnf_mean.data(), a.lnf_rstd.data(), N, C);
    ready(p_->lnf_w);
    ready(p_->lnf_b);
  } else {
    std::copy(dout, dout + NC, dres_.begin());
  }

  for (size_t li = a.layers.size(); li-- > 0;) {
    Layer& L = a.layers[li];
    const BlockParams& bp = p_->blocks[static_cast<size_t>(stage_.first) + li];
    // dres_ holds ∂/∂(block output); the residual passes it through.
    keep(&L.d_mlp_proj, dres_.data(), NC);
    o.linear_bwd(dgelu_.data(), GW(bp.mlp_proj_w), GW(bp.mlp_proj_b), dres_.data(), L.gelu.data(),
                 P(bp.mlp_proj_w), N, Fl, C, true);
    if (full) {
      ready(bp.mlp_proj_w);
      ready(bp.mlp_proj_b);
    }
    o.gelu_bwd(dfc_.data(), L.fc.data(), dgelu_.data(), static_cast<size_t>(N) * Fl, true);
    keep(&L.d_fc, dfc_.data(), static_cast<size_t>(N) * Fl);
    o.linear_bwd(dln_.data(), GW(bp.fc_w), GW(bp.fc_b), dfc_.data(), L.ln2.data(), P(bp.fc_w), N, C,
                 Fl, true);
    if (full) {
      ready(bp.fc_w);
      ready(bp.fc_b);
    }
    tp_sum(dln_.data(), NC);
    o.ln_bwd(dres_.data(), G(bp.ln2_w), G(bp.ln2_b), dln_.data(), L.res_mid.data(), P(bp.ln2_w),
             L.ln2_mean.data(), L.ln2_rstd.data(), N, C);
    ready(bp.ln2_w);
    ready(bp.ln2_b);

    keep(&L.d_attn_proj, dres_.data(), NC);
    o.linear_bwd(dattn_.data(), GW(bp.attn_proj_w), GW(bp.attn_proj_b), dres_.data(),
                 L.attn_out.data(), P(bp.attn_proj_w), N, Cl, C, true);
    if (full) {
      ready(bp.attn_proj_w);
      ready(bp.attn_proj_b);
    }
    zero(&dqkv_);
    if (o.ref)
      ops::ref::attention_backward(dqkv_.data(), dattn_.data(), L.qkv.data(), L.att.data(), B_, T_,
                                   NH_, HS_);
    else
      ops::attention_backward(dqkv_.data(), dattn_.data(), L.qkv.data(), L.att.data(), B_, T_, NH_,
                              HS_, attn_scratch_.data());
    keep(&L.d_qkv, dqkv_.data(), dqkv_.size());
    o.linear_bwd(dln_.data(), GW(bp.qkv_w), GW(bp.qkv_b), dqkv_.data(), L.ln1.data(), P(bp.qkv_w),
                 N, C, 3 * Cl, true);
    if (full) {
      ready(bp.qkv_w);
      ready(bp.qkv_b);
    }
    tp_sum(dln_.data(), NC);
    o.ln_bwd(dres_.data(), G(bp.ln1_w), G(bp.ln1_b), dln_.data(), a.res[li].data(), P(bp.ln1_w),
             L.ln1_mean.data(), L.ln1_rstd.data(), N, C);
    ready(bp.ln1_w);
    ready(bp.ln1_b);
  }

  if (stage_.embed) {
    o.emb_bwd(G(p_->wte), G(p_->wpe), dres_.data(), a.inputs.data(), v0_, Vl_, B_, T_, C);
    ready(p_->wpe);
    if (full || !stage_.head) ready(p_->wte);
  } else if (full && stage_.head) {
    ready(p_->wte);
  }
}

}  // namespace tide_train
