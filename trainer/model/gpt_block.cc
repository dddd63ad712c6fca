// The transformer blocks of the GPT (model/gpt.h): one block's forward and
// backward, and activation checkpointing (docs/zero.md, "Activation
// checkpointing"). Recomputation runs the same kernels on the same inputs in
// the same order, so the activations, and with them the gradients, are bit
// for bit those of a run that kept them.
#include <algorithm>
#include <cmath>

#include "model/gpt.h"
#include "model/gpt_ops.h"

namespace tide_train {

namespace {

void zero(mem::ActFloats* v) { std::fill(v->begin(), v->end(), 0.0f); }

// out[n, :] += bias for every row.
void add_bias(float* out, const float* bias, int N, int C) {
  for (int n = 0; n < N; ++n) {
    float* row = out + static_cast<size_t>(n) * C;
    for (int c = 0; c < C; ++c) row[c] += bias[c];
  }
}

}  // namespace

GPT::View GPT::view(Acts& a, int l) {
  if (rc_.kind != Recompute::kEvery) {
    Layer& L = a.layers[static_cast<size_t>(l)];
    float* att = rc_.kind == Recompute::kSelective ? att_scratch_.data() : L.att.data();
    return View{&L, a.res[static_cast<size_t>(l)].data(), a.res[static_cast<size_t>(l) + 1].data(),
                att};
  }
  // Segments of K blocks: the slot keeps each segment's input; the blocks'
  // activations live in the segment scratch while it is computed.
  const int K = rc_.every, s0 = l - l % K, s1 = std::min(s0 + K, L_);
  Layer& L = seg_layers_[static_cast<size_t>(l - s0)];
  const float* in =
      l == s0 ? a.res[static_cast<size_t>(l)].data() : seg_res_[static_cast<size_t>(l - s0)].data();
  float* out = l + 1 == s1 ? a.res[static_cast<size_t>(l) + 1].data()
                           : seg_res_[static_cast<size_t>(l + 1 - s0)].data();
  return View{&L, in, out, L.att.data()};
}

void GPT::block_forward(Acts& a, int l) {
  const gpt_internal::Ops& o = gpt_internal::ops_for(ref_);
  const int N = B_ * T_, C = C_, Cl = NH_ * HS_, Fl = 4 * C_ / p_->tp().size;
  auto P = [&](int i) { return p_->params[static_cast<size_t>(i)].data.data(); };
  const View v = view(a, l);
  Layer& L = *v.layer;
  const BlockParams& bp = p_->blocks[static_cast<size_t>(stage_.first + l)];
  const float* in = v.in;
  float* out = v.out;
  o.ln_fwd(L.ln1.data(), L.ln1_mean.data(), L.ln1_rstd.data(), in, P(bp.ln1_w), P(bp.ln1_b), N, C);
  o.linear_fwd(L.qkv.data(), L.ln1.data(), P(bp.qkv_w), P(bp.qkv_b), N, C, 3 * Cl);
  o.attn_fwd(L.attn_out.data(), v.att, L.qkv.data(), B_, T_, NH_, HS_);
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

void GPT::backward_blocks(Acts& a, Pass pass, const std::function<void(int)>& ready) {
  if (rc_.kind != Recompute::kEvery) {
    for (int l = L_; l-- > 0;) {
      need(static_cast<size_t>(l), false);
      block_backward(a, l, pass, ready);
    }
    return;
  }
  // Last segment first: its forward again from the kept input, then its
  // backward.
  const int K = rc_.every;
  for (int s1 = L_; s1 > 0;) {
    const int s0 = (s1 - 1) - (s1 - 1) % K;
    for (int l = s0; l < s1; ++l) {
      need(static_cast<size_t>(l), true);
      block_forward(a, l);
    }
    for (int l = s1; l-- > s0;) {
      need(static_cast<size_t>(l), false);
      block_backward(a, l, pass, ready);
    }
    s1 = s0;
  }
}

void GPT::block_backward(Acts& a, int l, Pass pass, const std::function<void(int)>& ready) {
  const gpt_internal::Ops& o = gpt_internal::ops_for(ref_);
  const int N = B_ * T_, C = C_, Cl = NH_ * HS_, Fl = 4 * C_ / p_->tp().size;
  const size_t NC = static_cast<size_t>(N) * C;
  const bool full = pass == Pass::kFull;
  auto keep = [&](mem::ActFloats* dst, const float* src, size_t n) {
    if (!full) dst->assign(src, src + n);
  };
  auto P = [&](int i) { return p_->params[static_cast<size_t>(i)].data.data(); };
  auto G = [&](int i) { return p_->params[static_cast<size_t>(i)].grad.data(); };
  auto GW = [&](int i) { return full ? G(i) : nullptr; };
  // The weight and bias gradients of a linear layer now (kFull), or its
  // output gradient kept for the weight pass (kInput).
  const View v = view(a, l);
  Layer& L = *v.layer;
  const BlockParams& bp = p_->blocks[static_cast<size_t>(stage_.first + l)];
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
  // Selective recomputation: the attention core's probabilities again.
  if (rc_.kind == Recompute::kSelective)
    o.attn_fwd(recompute_out_.data(), v.att, L.qkv.data(), B_, T_, NH_, HS_);
  zero(&dqkv_);
  if (o.ref)
    ops::ref::attention_backward(dqkv_.data(), dattn_.data(), L.qkv.data(), v.att, B_, T_, NH_,
                                 HS_);
  else
    ops::attention_backward(dqkv_.data(), dattn_.data(), L.qkv.data(), v.att, B_, T_, NH_, HS_,
                            attn_scratch_.data());
  keep(&L.d_qkv, dqkv_.data(), dqkv_.size());
  o.linear_bwd(dln_.data(), GW(bp.qkv_w), GW(bp.qkv_b), dqkv_.data(), L.ln1.data(), P(bp.qkv_w), N,
               C, 3 * Cl, true);
  if (full) {
    ready(bp.qkv_w);
    ready(bp.qkv_b);
  }
  tp_sum(dln_.data(), NC);
  o.ln_bwd(dres_.data(), G(bp.ln1_w), G(bp.ln1_b), dln_.data(), v.in, P(bp.ln1_w),
           L.ln1_mean.data(), L.ln1_rstd.data(), N, C);
  ready(bp.ln1_w);
  ready(bp.ln1_b);
}

}  // namespace tide_train
