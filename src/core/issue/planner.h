// The planner: the one place that decides where an operation runs.
//
// planRoute() gives every validated operation its route (core/op.h): the
// small-collective lane, a row of the algorithm table on the progress engine
// (host memory, or device buffers staged through pinned host memory), the
// device engine, or the point-to-point channel. It is called once per
// operation at issue (issueOp), again for the lone operation of a group at
// tideGroupEnd (a group of one runs like an ungrouped call), and by the
// device submit path only through the route it already set.
//
// Agreement: the route depends only on the call's shape (collective, count,
// datatype, op, root), its memory kind (host, or device buffers on a CUDA
// stream), whether it is the lone operation of its launch, and facts every
// rank of the communicator shares (topology, knobs read at creation, the
// lane and the device engine's agreed state). It does not depend on which
// host stream or thread issues it, so ranks that mix the NULL stream, host
// streams and groups for the same calls still meet: the lane's protocol runs
// the same whether the caller's thread or the progress engine drives it.
//
// Thread-safety: pure apart from a per-thread cache of the cost model's
// answers; safe from any thread.
#pragma once

#include "core/op.h"
#include "core/status.h"

struct tideComm;

namespace tide {

// Sets op->route and op->algo. `alone`: the operation is launched by itself
// (not inside a group of several). The first lone device call of a one-node
// communicator creates its device engine (collective, in issue order; see
// deviceEngineReady): where that failed on any rank, every rank plans the
// staged route. An error when no row of the table implements the call or
// the engine's creation broke the bootstrap.
Status planRoute(OpDesc* op, bool alone);

// tideCodecAuto: the codec (a CodecId) a compressed call of `args` runs
// with, from the cost model: the cheapest of none, bf16 and int8 by the rows'
// predictions over the communicator's link classes; none on a communicator
// whose ranks are all on one node (never a lossy codec over shared memory)
// and for calls under 256 KiB (latency-bound: the model's error exceeds the gain).
// args.codec carries the compressor's params and state. The same on every
// rank (a function of the call and the shared topology).
int chooseCodec(const CollArgs& args, const tideComm* comm);

// The table row that runs `args` on `comm`, among the rows of args.mem's
// kind (host or device): TIDE_ALGO's forced row where it supports the call,
// else the cost model's choice. *wasForced (when given) tells which.
const AlgorithmInfo* chooseAlgorithm(const CollArgs& args, const tideComm* comm,
                                     bool* wasForced = nullptr);

// Parses TIDE_ALGO / TIDE_PROTO into comm->algo (warns once about names that
// do not apply).
void parseAlgoChoice(tideComm* comm);

}  // namespace tide
