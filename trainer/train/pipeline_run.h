// One pipeline rank's part of a schedule (pipeline/schedule.h), run for
// real: its compute actions on the GPT chunks of its stages, its sends and
// receives as tideSend/tideRecv on one Channel per direction
// (train/pipeline_channel.h: a two-rank communicator and host stream each):
// a step posts every receive at its start, each send when its data is ready,
// and waits only where a compute action needs a message, so sends complete
// without the rank waiting (the simulator's timing). The micro-batches'
// activations live in per-micro-batch slots of the chunks.
//
// Threads: one runner per rank, used from the thread that owns the GPTs.
// Errors: a failed Tide call (a peer that died: the library's no-progress
// timeout) throws Error with Tide's message.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "model/gpt.h"
#include "pipeline/schedule.h"
#include "tide/tide.h"
#include "train/pipeline_channel.h"

namespace tide_train {

class PipelineRunner {
 public:
  // chunks[c]: the GPT of stage c·P + pp_rank (not owned). pp: the
  // pipeline communicator (its rank = the pipeline rank); the channels are
  // split from it here (collective over it). world_rank[q]: pipeline rank
  // q's world rank (for messages).
  PipelineRunner(pipeline::Schedule schedule, int pp_rank, tideComm_t pp, std::vector<GPT*> chunks,
                 std::vector<int> world_rank);
  ~PipelineRunner();

  // Loads micro-batch mb's token ids (inputs, targets: micro_batch × T).
  using Loader = std::function<void(int mb, int* inputs, int* targets)>;

  struct Timing {
    double start = 0, end = 0;  // seconds since `origin`: first compute's start, last one's end
    double busy = 0;            // seconds spent in compute actions
    int peak_slots = 0;         // most micro-batches holding activations on this rank
  };

  // One step's forward and backward of every micro-batch; gradients
  // accumulate into the chunks' parameters (scaled by `scale`). Returns this
  // rank's loss sum (the last stage's rank; 0 elsewhere).
  double step(const Loader& load, float scale, std::chrono::steady_clock::time_point origin,
              Timing* timing);

  // Forward only, stage after stage (evaluation, --score, --sample), on the
  // chunks' slot 0: returns the loss sum on the last stage's rank (targets
  // null: 0), whose chunk then holds the logits (head_chunk()).
  double forward_only(const int* inputs, const int* targets);
  GPT* head_chunk() const;  // null when this rank does not hold the last stage
  int head_rank() const { return s_.rank_of(s_.stages() - 1); }

 private:
  // A message's identity: (grad, producing stage, micro-batch).
  using Key = std::tuple<bool, int, int>;
  struct Inbox {
    mem::CommFloats data;  // kept from step to step (the same messages every step)
    int peer = 0;
    size_t ticket = 0;
    bool pending = false;  // posted this step and not yet consumed
  };
  void post_receives(const std::vector<pipeline::Action>& acts);
  void send(const pipeline::Action& a);
  const float* received(const Key& k);  // waits for it
  void compute(const pipeline::Action& a, const Loader& load, float scale, double* loss);
  std::string peer_name(int q) const;

  pipeline::Schedule s_;
  int me_;
  tideComm_t pp_;
  std::vector<GPT*> chunks_;
  std::vector<int> world_;
  std::vector<int> inputs_, targets_;
  std::map<int, std::unique_ptr<Channel>> out_, in_;  // by peer pipeline rank
  // Per micro-batch state of this step: (chunk, mb) → activation slot; the
  // messages received or on their way in; the input gradients sent (their
  // buffers reused every step, rewritten once the step's sends completed); the ticket of the
  // activation send out of (chunk, mb)'s slot (waited for before the slot is reused).
  std::map<std::pair<int, int>, int> slot_;
  std::map<Key, Inbox> inbox_;
  std::map<std::pair<int, int>, mem::CommFloats> dsend_;
  std::map<std::pair<int, int>, std::pair<int, size_t>> act_sent_;
};

}  // namespace tide_train
