// TIDE_CHECK=1: cross-rank comparison of what each rank is about to run.
//
// Before a job's collectives run, every rank of each of its communicators
// exchanges a fingerprint per collective (collective, datatype, count, op,
// root) plus the communicator's checked-job sequence number over the
// bootstrap ring. A difference fails the job with tideInvalidUsage on every
// rank, naming the field and which ranks hold which value; nothing is sent on
// the data connections, so the communicator stays usable. Jobs made only of
// send/recv are not checked (their peers legitimately differ).
//
// Thread-safety: called from executeJob, which runs the jobs of one
// communicator one at a time in issue order; the bootstrap is otherwise only
// used while no job runs (init, split, shrink). checkForget may run
// concurrently with checks of other communicators.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "core/task.h"

struct tideComm;

namespace tide {

struct Job;
struct OpDesc;
class ExecCtx;

// Fingerprint of one collective as exchanged between ranks.
struct OpPrint {
  int32_t coll = 0;
  int32_t dtype = 0;
  int32_t op = -1;    // tideRedOp_t (Avg kept as Avg), -1 when not a reduction
  int32_t root = -1;  // -1 when not rooted
  uint64_t count = 0;
};

// Compares the fingerprints of every rank: prints[r] holds rank r's list and
// seqs[r] its sequence number. Returns Ok when all agree, else a
// tideInvalidUsage naming the first differing field (collective count,
// sequence, collective, datatype, count, op, root) and the ranks per value.
// Pure; thread-safe.
Status compareOpPrints(const std::vector<std::vector<OpPrint>>& prints,
                       const std::vector<uint64_t>& seqs);

// Runs the TIDE_CHECK exchange for every communicator of `job` that has it
// enabled (read from the environment at the communicator's first job).
// A failed exchange (peer gone, timeout, abort) also sticks to the
// communicator; a mismatch does not. Blocking, bounded by the communicator's
// timeout and abort flag.
Status checkJob(Job& job);

// The always-on operation tag of one collective (see SetupContext::opTag):
// a non-zero 32-bit digest of the collective sequence number `collSeq`
// (collectives only, counted per communicator), the collective, count,
// datatype, user-visible operator (-1 when not a reduction) and root (-1 when
// not rooted). Pure.
uint32_t opTagOf(uint64_t collSeq, int coll, uint64_t count, int dtype, int op, int root);

// Runs `op`'s algorithm on `ctx` (whose arguments are op's). For a rooted
// collective (Broadcast, Reduce) on two or more ranks, and unless
// TIDE_CHECK_ROOT=0, adds a root confirmation: rank c = (root + n - 1) % n,
// by each rank's own idea of the root, sends the root a 16-byte note
// carrying its operation tag, posted before the algorithm's own transfers,
// and the root receives it and waits for it. Ranks that disagree on the
// root, or anything else in the tag, so never all return success: a root
// receives a foreign note or data (a transport that carries operation tags
// fails the receive; otherwise the note's content does not match and the
// call fails with tideInvalidUsage naming "root"), or it waits for a note
// nobody sends until the no-progress timeout. `op` must outlive the task.
Task runCollective(ExecCtx& ctx, const OpDesc& op);

// Drops the per-communicator state (called before the communicator is freed).
void checkForget(const tideComm* comm);

}  // namespace tide
