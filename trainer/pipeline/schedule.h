// Pipeline schedules as one global list of actions (docs/trainer.md,
// "Pipeline parallelism"). The layers form S = P x V stages; stage s lives on
// pipeline rank s % P (its chunk s / P: V > 1 is the interleaved schedule's
// "virtual stages"). Every schedule is generated here, once, as each pipeline
// rank's ordered list of compute actions and the point-to-point messages
// between them; every rank takes its own list, and the simulator
// (simulate.h) replays all of them. Pure: no communication, no threads.
//
// Messages between two ranks are matched in issue order (as tideSend and
// tideRecv are): a rank receives from a peer in exactly the order that peer
// sends to it, receiving a message early (before the compute that needs it)
// when an earlier-sent one is needed first. The communication actions
// between two compute actions of a rank form one group (tideGroupStart/End).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tide_train::pipeline {

enum class ScheduleKind { kGpipe, k1f1b, kInterleaved, kZeroBubble };

// "gpipe", "1f1b", "interleaved", "zb"; false for anything else.
bool parse_schedule(const std::string& name, ScheduleKind* out);
const char* schedule_name(ScheduleKind k);

enum class Op : uint8_t {
  kForward,         // F: stage s on micro-batch mb
  kBackward,        // B: input and weight gradients together (all but zb)
  kBackwardInput,   // zb's B: the input gradient (what the previous stage needs)
  kBackwardWeight,  // zb's W: the weight gradient (fills the bubbles)
  kSend,            // message `msg` to `peer`
  kRecv,            // message `msg` from `peer`
};

// A message: the activation stage `stage` produced for micro-batch `mb`
// (to stage + 1), or the gradient with respect to stage `stage`'s input
// (to stage - 1).
struct Message {
  bool grad = false;
  int mb = 0;
  int stage = 0;  // the producing stage
  bool operator==(const Message&) const = default;
};

struct Action {
  Op op = Op::kForward;
  int mb = 0;     // compute actions
  int stage = 0;  // compute actions: the stage computed
  int peer = -1;  // kSend / kRecv: the other pipeline rank
  Message msg;    // kSend / kRecv
  int group = 0;  // kSend / kRecv: the group's index on this rank
};

// Relative costs of the compute actions (the simulator's defaults: forward
// 1, backward 2; zb's input and weight gradients 1 each), per stage when
// `per_stage` is given (index = stage).
struct Costs {
  double forward = 1, backward = 2, backward_input = 1, backward_weight = 1;
  std::vector<double> stage_scale;  // empty: balanced stages
  double scale(int stage) const {
    return stage < static_cast<int>(stage_scale.size()) ? stage_scale[stage] : 1.0;
  }
  // The cost of compute action `op` on `stage` (0 for sends and receives).
  double of(Op op, int stage) const;
};

struct Schedule {
  ScheduleKind kind = ScheduleKind::k1f1b;
  int p = 1, m = 1, v = 1;                // ranks, micro-batches, virtual stages per rank
  std::vector<std::vector<Action>> rank;  // rank[r]: rank r's actions, in order
  int stages() const { return p * v; }
  int rank_of(int stage) const { return stage % p; }
};

// Builds the schedule. Throws std::invalid_argument naming the problem
// (p, m, v < 1; v > 1 with a schedule other than interleaved; interleaved
// with m not a multiple of p, as Megatron-LM requires). zb is ZB-H1's order
// (its weight-gradient passes fill 1f1b's idle time; at most p micro-batches
// hold activations on a rank, 1f1b's peak). `costs` set the timing that
// orders the messages (schedule.cc).
Schedule make_schedule(ScheduleKind kind, int p, int m, int v, const Costs& costs = Costs());

}  // namespace tide_train::pipeline
