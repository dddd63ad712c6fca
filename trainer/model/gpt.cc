// Forward and backward of the GPT over one micro-batch (model/gpt.h).
#include "model/gpt.h"

#include <algorithm>
#include <cmath>

#include "io/error.h"
#include "model/gpt_ops.h"

namespace tide_train {

namespace {

using gpt_internal::kFast;
using gpt_internal::kRef;
using gpt_internal::Ops;

void zero(mem::ActFloats* v) { std::fill(v->begin(), v->end(), 0.0f); }

}  // namespace

Recompute parse_recompute(const std::string& s, int layers) {
  Recompute r;
  if (s == "none") return r;
  if (s == "selective") {
    r.kind = Recompute::kSelective;
    return r;
  }
  if (s == "sqrt") {
    r.kind = Recompute::kEvery;
    r.every = std::max(1, static_cast<int>(std::ceil(std::sqrt(static_cast<double>(layers)))));
    return r;
  }
  if (s.starts_with("every:")) {
    char* end = nullptr;
    const long k = std::strtol(s.c_str() + 6, &end, 10);
    if (end != nullptr && *end == '\0' && k >= 1 && k <= 1 << 20) {
      r.kind = Recompute::kEvery;
      r.every = static_cast<int>(k);
      return r;
    }
  }
  throw Error("--checkpoint-activations " + s +
              ": expected none, every:K (K >= 1), sqrt or selective");
}

GPT::GPT(ParamSet* params, int micro_batch, TpCollectives* tp, bool reference, StageSpec stage,
         Recompute recompute)
    : p_(params), tp_(tp), rc_(recompute), ref_(reference), stage_(stage) {
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
  const size_t att = static_cast<size_t>(B_) * NH_ * T_ * T_;
  if (rc_.kind == Recompute::kEvery) {
    const int K = std::min(rc_.every, std::max(L_, 1));
    seg_layers_.resize(static_cast<size_t>(K));
    for (Layer& L : seg_layers_) size_layer(&L, N, C, Cl, Fl, att);
    seg_res_.assign(static_cast<size_t>(K), mem::ActFloats(N * C));
  } else if (rc_.kind == Recompute::kSelective) {
    att_scratch_.resize(att);
    recompute_out_.resize(N * Cl);
  }
}

void GPT::make_slot(Acts* a) const {
  const size_t N = static_cast<size_t>(B_) * T_, C = C_;
  const size_t Cl = static_cast<size_t>(NH_) * HS_;
  const size_t Fl = 4 * C / p_->tp().size;
  a->inputs.resize(N);
  a->targets.resize(N);
  const size_t att = static_cast<size_t>(B_) * NH_ * T_ * T_;
  a->res.resize(static_cast<size_t>(L_) + 1);
  for (int l = 0; l <= L_; ++l)  // kEvery: only each segment's input and the output
    if (rc_.kind != Recompute::kEvery || l % rc_.every == 0 || l == L_)
      a->res[static_cast<size_t>(l)].resize(N * C);
  if (rc_.kind != Recompute::kEvery) {
    a->layers.resize(static_cast<size_t>(L_));
    for (Layer& L : a->layers)
      size_layer(&L, N, C, Cl, Fl, rc_.kind == Recompute::kSelective ? 0 : att);
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

void GPT::size_layer(Layer* L, size_t N, size_t C, size_t Cl, size_t Fl, size_t att) {
  L->ln1.resize(N * C);
  L->ln1_mean.resize(N);
  L->ln1_rstd.resize(N);
  L->qkv.resize(N * 3 * Cl);
  L->att.resize(att);
  L->attn_out.resize(N * Cl);
  L->res_mid.resize(N * C);
  L->ln2.resize(N * C);
  L->ln2_mean.resize(N);
  L->ln2_rstd.resize(N);
  L->fc.resize(N * Fl);
  L->gelu.resize(N * Fl);
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

void GPT::need(size_t li, bool up) const {
  if (gate_ == nullptr) return;
  const int l = stage_.first + static_cast<int>(li);
  const int n = static_cast<int>(acts_.front().layers.size());
  const int next = up ? (static_cast<int>(li) + 1 < n ? l + 1 : -1) : (li > 0 ? l - 1 : -1);
  gate_->need(l, next);
}

void GPT::tp_sum(float* buf, size_t n) {
  if (tp_ != nullptr && p_->tp().size > 1) tp_->allreduce_sum(buf, n);
}

double GPT::forward(int slot, const int* inputs, const int* targets) {
  const Ops& o = ref_ ? kRef : kFast;
  const int N = B_ * T_, C = C_;
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

  for (int l = 0; l < L_; ++l) {
    need(static_cast<size_t>(l), true);
    block_forward(a, l);
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
    need(li, false);
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
  const int N = B_ * T_, C = C_;
  const size_t NC = static_cast<size_t>(N) * C;
  const bool full = pass == Pass::kFull;
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

  backward_blocks(a, pass, ready);

  if (stage_.embed) {
    o.emb_bwd(G(p_->wte), G(p_->wpe), dres_.data(), a.inputs.data(), v0_, Vl_, B_, T_, C);
    ready(p_->wpe);
    if (full || !stage_.head) ready(p_->wte);
  } else if (full && stage_.head) {
    ready(p_->wte);
  }
}

}  // namespace tide_train
