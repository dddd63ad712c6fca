// ZeRO-3's parameter gathering (docs/zero.md, "Stage 3"): each block's
// weights are all-gathered from the data-parallel group's shards just
// before the block computes, into one of two block-sized buffers (block l
// in buffer l % 2: at most two gathered blocks alive), and the next block's
// gather is started meanwhile (prefetch) on the reducer's gather thread and
// communicator. The other tensors (embeddings, final LayerNorm) are
// gathered once per update into buffers of their own.
//
// Every data-parallel rank runs the same passes in the same order, so each
// starts the same gathers in the same order (the reducer's contract).
#pragma once

#include <vector>

#include "model/gpt.h"
#include "tide/compress.h"
#include "tide/reducer.h"

namespace tide_train {

class LayerGather : public WeightGate {
 public:
  // shard: the weight shard (laid out as the reducer's shard); outs: per
  // reducer gradient, its parameter's data; layer_buckets[l]: the buckets of
  // block l's tensors (none of another block's); others: the remaining
  // buckets. compress: the gathers' codec (null: none).
  LayerGather(tideReducer_t reducer, const void* shard, std::vector<void*> outs,
              std::vector<std::vector<int>> layer_buckets, std::vector<int> others,
              const tideCompressConfig_t* compress);
  void need(int layer, int next) override;
  // After the shard changed (an update, a load): every gathered block is
  // stale; the other tensors are gathered again now (blocking).
  void refresh();
  long gathers() const { return gathers_; }  // block gathers started so far

 private:
  void start(int layer);
  void finish(int slot);
  void check(tideResult_t r, const char* what) const;

  tideReducer_t reducer_;
  const void* shard_;
  std::vector<void*> outs_;
  std::vector<std::vector<int>> layer_buckets_;
  std::vector<int> others_;
  const tideCompressConfig_t* compress_;
  int slot_[2] = {-1, -1};  // the block each buffer holds (or is receiving)
  bool pending_[2] = {false, false};
  long gathers_ = 0;
};

// ZeRO 1-2: the weights are whole on every rank; after an update each
// rank's updated elements are all-gathered in place, block by block, on the
// reducer's gather thread, and each block's forward waits only for its own
// gather (the next step's forward overlaps the rest), instead of one
// exposed All-Gather of the whole model after the update.
class UpdateGather : public WeightGate {
 public:
  UpdateGather(tideReducer_t reducer, std::vector<void*> outs,
               std::vector<std::vector<int>> layer_buckets, std::vector<int> others);
  // After the update: the other tensors gathered now, every block's started.
  void start_all();
  void need(int layer, int next) override;
  // Every started gather done (before the weights are read whole).
  void wait_all();

 private:
  void check(tideResult_t r, const char* what) const;
  tideReducer_t reducer_;
  std::vector<void*> outs_;
  std::vector<std::vector<int>> layer_buckets_;
  std::vector<int> others_;
  std::vector<char> pending_;  // per block
};

}  // namespace tide_train
