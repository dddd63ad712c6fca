// tide-train --plan (print the planner's ranking; one process, no other
// ranks) and --layout auto (train with its first choice: world rank 0 plans
// while the others wait, and every rank takes the flags it broadcasts).
#pragma once

#include <string>

#include "tide/tide.h"
#include "train/options.h"

namespace tide_train::plan {

// --plan: prints the ranking (docs/trainer.md, "Layout planner"); returns
// the exit status. Throws Error on a bad machine description or profile.
int run_plan(const Options& o);

// --layout auto, on every rank of `world` (world_size ranks): rank 0 plans
// for this job on the nodes the launcher describes and prints its choice;
// all ranks get that layout's flags applied to *o. Collective over world.
void choose_layout(Options* o, tideComm_t world, int world_size, int world_rank);

// Applies a layout's flags ("--dp 2 --tp 1 --pp 4 --micro-batches 8
// --schedule zb --stage-layers 2,2,2,2") to *o. Throws Error on a bad one.
void apply_layout(const std::string& flags, Options* o);

}  // namespace tide_train::plan
