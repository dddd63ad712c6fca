// Mixed precision in the training loop (--precision bf16|fp16; docs/zero.md,
// "Mixed precision"): the gate that fills the fp32 working copies of each
// block's weights from the 16-bit ones just before the block computes, and
// fp16's dynamic loss scale.
#pragma once

#include <cstdint>
#include <string>

#include "model/gpt.h"
#include "model/params.h"

namespace tide_train {

// need(l, next): the inner gate first (ZeRO 1-3's gathers of the 16-bit
// weights; may be null), then block l's 16-bit weights widened into its
// fp32 working buffer (l % 2), unless that buffer holds block l already.
class CastGate : public WeightGate {
 public:
  CastGate(ParamSet* params, WeightGate* inner) : p_(params), inner_(inner) {}
  void need(int layer, int next) override;
  // After the 16-bit weights changed (an update, a load; the inner gate's
  // own refresh done): every block is stale; the other tensors (embeddings,
  // final LayerNorm) are widened now.
  void refresh();

 private:
  void widen(int layer);  // layer -1: the tensors of no block
  ParamSet* p_;
  WeightGate* inner_;
  int slot_[2] = {-1, -1};
};

// fp16's dynamic loss scale (as DeepSpeed's and PyTorch's GradScaler): the
// loss is multiplied by scale() before the backward; a step whose gradients
// overflowed anywhere is skipped and the scale halved; after `window` clean
// steps in a row it doubles. An overflow at the minimum scale is an Error
// (the run cannot go on: its gradients overflow unscaled).
class LossScaler {
 public:
  LossScaler(double initial, int64_t window, double minimum)
      : scale_(initial), window_(window), min_(minimum) {}
  double scale() const { return scale_; }
  int64_t clean() const { return clean_; }
  // After a step: overflowed → halves the scale (Error below the minimum);
  // else counts a clean step (doubling after the window). Returns whether
  // the step is to be applied. step: for the Error's text.
  bool update(bool overflowed, int64_t step);
  void restore(double scale, int64_t clean) {
    scale_ = scale;
    clean_ = clean;
  }

 private:
  double scale_;
  int64_t window_;
  double min_;
  int64_t clean_ = 0;
};

}  // namespace tide_train
