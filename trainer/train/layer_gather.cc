// ZeRO-3's per-block parameter gathers (train/layer_gather.h).
#include "train/layer_gather.h"

#include <string>
#include <utility>

#include "io/error.h"

namespace tide_train {

LayerGather::LayerGather(tideReducer_t reducer, const float* shard, std::vector<void*> outs,
                         std::vector<std::vector<int>> layer_buckets, std::vector<int> others,
                         const tideCompressConfig_t* compress)
    : reducer_(reducer),
      shard_(shard),
      outs_(std::move(outs)),
      layer_buckets_(std::move(layer_buckets)),
      others_(std::move(others)),
      compress_(compress) {}

void LayerGather::check(tideResult_t r, const char* what) const {
  if (r != tideSuccess)
    throw Error(std::string("ZeRO-3 ") + what + ": " + tideGetErrorString(r) + " (" +
                tideReducerGetLastError(reducer_) + ")");
}

void LayerGather::start(int layer) {
  const int s = layer % 2;
  if (pending_[s]) finish(s);  // its buffer is still receiving another block
  for (int b : layer_buckets_[static_cast<size_t>(layer)])
    check(tideReducerAllGatherStart(reducer_, shard_, outs_.data(), b, compress_),
          "gathering a block's weights (tideReducerAllGatherStart)");
  slot_[s] = layer;
  pending_[s] = true;
  gathers_++;
}

void LayerGather::finish(int slot) {
  for (int b : layer_buckets_[static_cast<size_t>(slot_[slot])])
    check(tideReducerAllGatherWait(reducer_, b),
          "gathering a block's weights (tideReducerAllGatherWait)");
  pending_[slot] = false;
}

void LayerGather::need(int layer, int next) {
  const int s = layer % 2;
  if (slot_[s] != layer) start(layer);
  if (pending_[s]) finish(s);
  if (next >= 0 && slot_[next % 2] != next) start(next);
}

void LayerGather::refresh() {
  for (int s = 0; s < 2; ++s) {
    if (pending_[s]) finish(s);
    slot_[s] = -1;
  }
  for (int b : others_)
    check(tideReducerAllGatherStart(reducer_, shard_, outs_.data(), b, compress_),
          "gathering the embeddings (tideReducerAllGatherStart)");
  check(tideReducerAllGatherWait(reducer_, -1),
        "gathering the embeddings (tideReducerAllGatherWait)");
}

}  // namespace tide_train
