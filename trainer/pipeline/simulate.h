// Replays a pipeline schedule (schedule.h) with given per-action costs and no
// communication cost, as every rank would run it: compute actions in order,
// each group of sends and receives completing once every one of its
// messages' partners has been posted (tideSend/tideRecv's rendezvous, the
// strictest case). Proves the schedule free of deadlock and of mismatched
// message order, and computes its bubble. Pure, single-threaded.
#pragma once

#include <string>
#include <vector>

#include "pipeline/schedule.h"

namespace tide_train::pipeline {

struct Span {
  double start = 0, end = 0;
  Op op = Op::kForward;
  int mb = 0, stage = 0;
};

struct SimResult {
  bool ok = true;                     // no deadlock, every message matched in order
  std::string problem;                // when !ok: what is wrong (the ranks and what they wait for)
  double wall = 0;                    // first start to last end
  std::vector<double> busy;           // per rank: compute time
  std::vector<int> peak_activations;  // per rank: most (micro-batch, stage) pairs held
  double bubble = 0;                  // mean over ranks of idle / wall
  std::vector<std::vector<Span>> timeline;  // per rank
};

SimResult simulate(const Schedule& s, const Costs& costs = Costs());

// The textbook bubbles with balanced stages: gpipe and 1f1b (p-1)/(m+p-1),
// interleaved (p-1)/(v m + p-1).
double formula_bubble(ScheduleKind kind, int p, int m, int v);

// Writes the timeline as JSON ({"p":..,"ranks":[[{"start":..,"end":..,
// "op":"F","mb":..,"stage":..},..],..]}) for a plotting script.
std::string timeline_json(const Schedule& s, const SimResult& r);

}  // namespace tide_train::pipeline
