// One validated operation as the core carries it from issue to execution
// (OpDesc), and the route the planner gave it (core/issue/planner.h).
//
// Ownership: an OpDesc is a value; it is copied into the Job that runs it.
// It does not own the communicator, the stream or the buffers.
#pragma once

#include <cstdint>

#include "core/algorithm.h"
#include "core/lane.h"

struct tideComm;
struct tideStream;

namespace tide {

// Where an operation runs. Chosen once per operation by planRoute()
// (core/issue/planner.h) from what every rank of the communicator knows, so every
// rank that issues the same call takes the same route (or routes that speak
// the same protocol).
enum class Route : uint8_t {
  kP2p,               // Send/Recv on the point-to-point channel
  kLane,              // the small-collective lane (one node, host memory, small)
  kHost,              // a row of the algorithm table on the progress engine
  kHostStaged,        // device buffers on a CUDA stream: a host row over pinned staging
  kHostStagedChunks,  // the same, a large All-Reduce split into pipelined chunks
  kDevice,            // the device engine: kernels on the caller's CUDA stream
};
const char* routeName(Route r);

struct OpDesc {
  tideComm* comm = nullptr;
  tideStream* stream = nullptr;
  bool cudaStream = false;  // `stream` is a CUDA stream (decided once, in issueOp)
  CollArgs args;
  double preScale = 0;                  // Avg on floats: multiply inputs by this first
  uint64_t postDiv = 0;                 // Avg on integers: divide results by this after
  bool avg = false;                     // the caller asked for tideAvg (lowered above)
  Route route = Route::kHost;           // set by planRoute()
  const AlgorithmInfo* algo = nullptr;  // the table row (host rows; device rows for kDevice)
  bool algoForced = false;              // `algo` is TIDE_ALGO's, not the cost model's
  uint64_t seq = 0;
  uint32_t tag = 0;  // operation tag on the collective channel (core/exec/check.h opTagOf)

  // A collective carried by the job machinery's collective chain (a table
  // row or the lane), as opposed to Send/Recv.
  bool chained() const {
    return route == Route::kLane || (algo != nullptr && route != Route::kDevice);
  }
};

// The lane's view of an operation routed to it (Route::kLane).
inline LaneOp laneOpOf(const OpDesc& d) {
  LaneOp op;
  op.args = d.args;
  op.preScale = d.preScale;
  op.postDiv = d.postDiv;
  op.tag = d.tag;
  op.seq = d.seq;
  return op;
}

}  // namespace tide
