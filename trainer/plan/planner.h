// The layout planner (docs/trainer.md, "Layout planner"): for a world of N
// ranks on K nodes, every D x T x P = N (T dividing heads and width, P at
// most the layers, D dividing the batch) x micro-batch count M x schedule
// (with P > 1: gpipe, 1f1b, zb, interleaved with V = 2) is priced from
// the measured per-layer costs (plan/profile.h) and Tide's collective cost
// model over the topology (tideTopoPredictTime: the same model the library
// plans its own calls with), and ranked by predicted step time.
//
// The model of one step, per layout:
//  - compute: each stage's blocks (balanced by cost: the stage partition
//    that minimises the slowest stage) plus the embeddings and head on the
//    first and last stage, with the tensor-parallel All-Reduces of every
//    block (2 forward, 2 backward) and of the embedding and head inside
//    them; the activation and gradient messages between stages added to
//    the sending stage's actions;
//  - the pipeline phase: the schedule replayed by the simulator with those
//    per-stage costs (P = 1: M forwards and backwards back to back);
//  - ranks sharing cores: with R ranks per node on C cores, computing
//    ranks beyond C run time-shared, so compute (and the node's
//    shared-memory traffic) is scaled by max(1, R (1 - bubble) / C);
//  - the data-parallel All-Reduce of the gradients: after the pipeline
//    phase when P > 1; at P = 1 the reducer overlaps it with the last
//    micro-batch's backward except its last bucket;
//  - the tied embedding's gradient exchange (P > 1), the loss and norm
//    All-Reduces, and the optimizer step on the rank's parameters.
// Memory per rank: parameters, gradients and the optimizer's two moments
// (16 bytes per fp32 parameter) of the fullest rank, plus its activations
// times the most micro-batches the schedule keeps alive on it.
//
// Threads: one thread. Errors: Error for a model no layout fits.
#pragma once

#include <string>
#include <vector>

#include "model/config.h"
#include "pipeline/schedule.h"
#include "plan/profile.h"

namespace tide_train::plan {

struct Machine {
  int world = 1, nodes = 1;
  int cores_per_node = 1;  // CPUs a node's ranks share
  std::string topo_file;   // empty: this node as detected
};

struct Job {
  ModelConfig model;
  int batch = 1;
  double bucket_mb = 25;
};

struct Candidate {
  int dp = 1, tp = 1, pp = 1, micro_batches = 1, virtual_stages = 1;
  pipeline::ScheduleKind schedule = pipeline::ScheduleKind::k1f1b;
  std::vector<int> stage_layers;  // blocks per stage (P x V)
  // Predicted seconds per step and its parts.
  double step = 0, pipeline = 0, dp_exposed = 0, tp_comm = 0, optimizer = 0, other = 0;
  double bubble = 0;      // the schedule's, with these costs
  double core_share = 1;  // the compute slow-down of ranks sharing cores
  double mem_bytes = 0;   // the fullest rank's parameters, gradients, moments, activations
  // The tide-train flags of this layout ("--dp 2 --tp 1 --pp 4 ...").
  std::string flags() const;
  std::string layout() const;  // "dp 2 x tp 1 x pp 4"
};

// Every candidate, fastest first (steps within 0.1%: less memory first).
std::vector<Candidate> plan_layouts(const Job& job, const Machine& machine, Profile* profile);

}  // namespace tide_train::plan
