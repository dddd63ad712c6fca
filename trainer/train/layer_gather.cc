// ZeRO-3's per-block parameter gathers (train/layer_gather.h).
#include "train/layer_gather.h"

#include <algorithm>
#include <string>
#include <utility>

#include "io/error.h"

namespace tide_train {

LayerGather::LayerGather(tideReducer_t reducer, const void* shard, std::vector<void*> outs,
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

UpdateGather::UpdateGather(tideReducer_t reducer, std::vector<void*> outs,
                           std::vector<std::vector<int>> layer_buckets, std::vector<int> others)
    : reducer_(reducer),
      outs_(std::move(outs)),
      layer_buckets_(std::move(layer_buckets)),
      others_(std::move(others)),
      pending_(layer_buckets_.size(), 0) {}

void UpdateGather::check(tideResult_t r, const char* what) const {
  if (r != tideSuccess)
    throw Error(std::string("all-gathering the updated parameters (") + what +
                "): " + tideGetErrorString(r) + " (" + tideReducerGetLastError(reducer_) + ")");
}

void UpdateGather::start_all() {
  wait_all();
  // In place: each rank's updated elements are read from its tensors now.
  for (int b : others_)
    check(tideReducerAllGatherStart(reducer_, nullptr, outs_.data(), b, nullptr),
          "tideReducerAllGatherStart");
  check(tideReducerAllGatherWait(reducer_, -1), "tideReducerAllGatherWait");
  for (size_t l = 0; l < layer_buckets_.size(); ++l) {
    for (int b : layer_buckets_[l])
      check(tideReducerAllGatherStart(reducer_, nullptr, outs_.data(), b, nullptr),
            "tideReducerAllGatherStart");
    pending_[l] = layer_buckets_[l].empty() ? 0 : 1;
  }
}

void UpdateGather::need(int layer, int /*next*/) {
  if (!pending_[static_cast<size_t>(layer)]) return;
  for (int b : layer_buckets_[static_cast<size_t>(layer)])
    check(tideReducerAllGatherWait(reducer_, b), "tideReducerAllGatherWait");
  pending_[static_cast<size_t>(layer)] = 0;
}

void UpdateGather::wait_all() {
  bool any = false;
  for (char p : pending_) any |= p != 0;
  if (!any) return;
  check(tideReducerAllGatherWait(reducer_, -1), "tideReducerAllGatherWait");
  std::fill(pending_.begin(), pending_.end(), 0);
}

}  // namespace tide_train
