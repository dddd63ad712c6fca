// CPU affinity of a rank's process (TIDE_PIN).
#pragma once

#include <vector>

#include "core/transport.h"

namespace tide {

// Pins the calling thread, and so the threads it starts later (executor,
// progress, helpers), to one CPU of the process's allowed set, spreading the
// node's ranks of this communicator evenly: local rank i of L gets allowed
// CPU i * n / L. Does nothing when TIDE_PIN is 0, when the process was
// already restricted (its allowed set is smaller than the online CPUs: a
// launcher or the user bound it), when another of the node's ranks is a
// thread of this process, when the node's ranks outnumber the allowed CPUs
// (then the scheduler balances better than any fixed map), when the rank is
// alone on its node (nothing to spread; independent single-rank jobs on one
// machine would all land on the first CPU), or when this process already
// pinned for an earlier communicator. Never fails: a refused
// sched_setaffinity is logged at INFO. Thread-safe.
void pinToLocalCpu(const std::vector<PeerInfo>& peers, int rank);

// CPUs this process may run on, counted before any pinning by
// pinToLocalCpu (so later communicators judge oversubscription as the first
// one did). Thread-safe.
int allowedCpus();

}  // namespace tide
