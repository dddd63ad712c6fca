// `tide-train --simulate`: the pipeline schedule of the options replayed in
// this one process (no other ranks, no Tide communicator). Prints the
// schedule's facts, `bubble: <fraction>` as the last line, and with
// --timeline draws it. Returns the exit status (1 when the schedule is not
// deadlock-free or the options are wrong; the message names why).
#pragma once

#include "train/options.h"

namespace tide_train::pipeline {

int run_simulation(const Options& o);

}  // namespace tide_train::pipeline
