// Link calibration for the cost model (see probe.cc).
#pragma once

#include "core/comm.h"
#include "core/status.h"

namespace tide {

// Collective over the communicator's ranks, after its connections are up and
// before any user operation. Per TIDE_LINK_PROBE, measures one intra-node and
// one inter-node pair and writes the figures into comm->topo (identically on
// every rank). Bounded by the communicator's timeout and abort flag.
Status calibrateLinks(tideComm* comm);

}  // namespace tide
