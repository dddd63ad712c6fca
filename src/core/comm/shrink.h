// tideCommShrink: a communicator of the surviving ranks of another one.
//
// How survivors meet without contacting excluded (possibly dead) ranks: every
// rank keeps its bootstrap listening socket and the root's address table from
// init (core/boot/bootstrap.h). The lowest surviving rank (the leader) turns its
// listener into a fresh bootstrap root; the others connect to the leader's
// address from the table, prove the job secret, and the usual init runs among
// the survivors only. Nothing else is exchanged beforehand, so it works after
// the old communicator's connections broke. A communicator can be shrunk
// once (its leader's listener moves into the root); shrink the result again
// to exclude more ranks.
#pragma once

#include "core/status.h"
#include "tide/tide.h"

struct tideComm;

namespace tide {

// Validates the exclusion list: nExclude in [0, nranks), no duplicates, every
// entry in range, excludeRanks non-NULL when nExclude > 0. Pure.
Status validateExcludeList(const int* excludeRanks, int nExclude, int nranks);

// The collective part of tideCommShrink (the caller counts as a user of
// `comm`). With TIDE_SHRINK_ABORT, pending work on `comm` is aborted first
// (comm's abort flag stays set); otherwise pending work is an error. Blocking
// unless config->blocking == 0: then *newcomm is returned at once, its init
// runs on its own thread and tideCommGetAsyncError reports tideInProgress
// until it is done; the Status is then tideInProgress.
Status shrinkCommunicator(tideComm* comm, const int* excludeRanks, int nExclude, tideComm** newcomm,
                          const tideConfig_t* config, int flags);

}  // namespace tide
