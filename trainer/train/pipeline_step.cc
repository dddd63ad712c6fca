// The pipeline phase of a training step (train/trainer.h).
#include <algorithm>

#include "io/error.h"
#include "train/trainer.h"

namespace tide_train {

double Trainer::pipeline_phase(int64_t step, float scale, StepRecord* r) {
  const int share = o_.batch / groups_->dp_size;
  auto load = [&](int mb, int* inputs, int* targets) {
    data_->train_batch(static_cast<uint64_t>(o_.seed), static_cast<uint64_t>(step),
                       groups_->dp_rank * share + mb * micro_, micro_, inputs, targets);
  };
  // The stages start together; the phase's wall time runs from the first
  // compute's start to the last one's end over the pipeline group.
  barrier(groups_->pp);
  const auto origin = std::chrono::steady_clock::now();
  PipelineRunner::Timing t;
  const double loss = pipe_->step(load, scale, origin, &t);
  double span[3] = {t.end, -t.start, static_cast<double>(t.peak_slots)};
  allreduce(groups_->pp, span, 3, tideMax);
  double busy = t.busy;
  allreduce(groups_->pp, &busy, 1, tideSum);
  const double wall = span[0] + span[1];
  r->bubble = wall > 0.0 ? std::max(0.0, 1.0 - busy / (groups_->pp_size * wall)) : 0.0;
  r->peak_slots = static_cast<int>(span[2]);

  // The tied embedding: the first stage's (embedding) and the last stage's
  // (head) parts of its gradient, summed on both (a + b and b + a: the
  // same bits).
  Param& wte = params_->params[static_cast<size_t>(params_->wte)];
  const int last = pipe_->head_rank();
  if (last != 0 && wte.owned) {
    const int peer = groups_->pp_rank == 0 ? last : 0;
    std::vector<float> other(wte.grad.size());
    check_tide(tideGroupStart(), groups_->pp, "tideGroupStart");
    check_tide(tideSend(wte.grad.data(), wte.grad.size(), tideFloat32, peer, groups_->pp, nullptr),
               groups_->pp, "sending the tied embedding's gradient");
    check_tide(tideRecv(other.data(), other.size(), tideFloat32, peer, groups_->pp, nullptr),
               groups_->pp, "receiving the tied embedding's gradient");
    check_tide(tideGroupEnd(), groups_->pp, "summing the tied embedding's gradient");
    for (size_t k = 0; k < other.size(); ++k) wte.grad[k] += other[k];
  }
  return loss;
}

}  // namespace tide_train
