// Mixed precision's gate and loss scale (train/precision.h).
#include "train/precision.h"

#include <cstdio>
#include <vector>

#include "io/error.h"
#include "train/trainer.h"

namespace tide_train {

void CastGate::widen(int layer) {
  const ops::Half f = p_->half()->format;
  for (Param& p : p_->params)
    if (p.owned && p.layer == layer) ops::from_half(f, p.data16, p.data.data(), p.size());
}

void CastGate::need(int layer, int next) {
  if (inner_ != nullptr) inner_->need(layer, next);
  const int s = layer % 2;
  if (slot_[s] == layer) return;
  widen(layer);
  slot_[s] = layer;
}

void CastGate::refresh() {
  slot_[0] = slot_[1] = -1;
  widen(-1);
}

bool LossScaler::update(bool overflowed, int64_t step) {
  if (!overflowed) {
    if (++clean_ >= window_) {
      scale_ *= 2.0;
      clean_ = 0;
    }
    return true;
  }
  clean_ = 0;
  if (scale_ / 2.0 < min_) {
    char b[160];
    std::snprintf(b, sizeof b,
                  "fp16 loss scale at its minimum (%g): the gradients of step %lld overflow even "
                  "so (lower --lr, or train in bf16)",
                  min_, static_cast<long long>(step));
    throw Error(b);
  }
  scale_ /= 2.0;
  return false;
}

// The initial weights (each tensor drawn whole, as at every layout), or
// --init-from's, into the master weights and the 16-bit ones (ZeRO-3:
// setup_zero3 did so into its shard); then the gate over the 16-bit ones.
void Trainer::init_mixed() {
  if (zero_ < 3) init_weights();
  WeightGate* inner = gate_     ? static_cast<WeightGate*>(gate_.get())
                      : update_ ? static_cast<WeightGate*>(update_.get())
                                : nullptr;
  cast_ = std::make_unique<CastGate>(params_.get(), inner);
  for (auto& c : chunks_) c->set_gate(cast_.get());
  cast_->refresh();
}

// Tensor i's fp32 gradient into its 16-bit one: copied (a ring of copies,
// ZeRO 2-3) or added (whole 16-bit gradients, which accumulate the
// micro-batches). --force-overflow: rank 0's first converted element of the
// step becomes inf.
void Trainer::grad_to_half(int i) {
  Param& p = params_->params[static_cast<size_t>(i)];
  if (!p.owned || p.size() == 0) return;
  if (half_->grads_ring)
    ops::to_half(half_->format, p.grad.data(), p.grad16, p.size());
  else
    ops::add_to_half(half_->format, p.grad.data(), p.grad16, p.size());
  if (force_now_) {
    p.grad16[0] = half_->format == ops::Half::kBf16 ? 0x7f80 : 0x7c00;
    force_now_ = false;
  }
}

}  // namespace tide_train
