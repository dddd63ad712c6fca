// Small-collective lane: an inline path for small blocking collectives on a
// communicator whose ranks all share one node.
//
// The core creates at most one Lane per communicator, at the end of
// communicator creation (after the transports are connected), through the
// factory registered with registerLane() (core/registry.h). The planner
// (core/issue/planner.h) routes every host-memory collective whose shape the lane
// accepts (accepts()) to it, whatever stream or group it is issued in: a
// blocking call alone runs it on the calling thread (run()); a host stream's
// job or a group runs it through the progress engine (start/poll/finish).
//
// Determinism: accepts() is a pure function of the call's shape and of the
// lane's creation parameters, which every rank shares, so all ranks of a
// communicator that issue matching calls take the same path.
//
// Thread-safety: one thread at a time per communicator calls run() or the
// steps (the thread that runs the communicator's next operation in issue
// order); the object is destroyed only when no call is using it.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "core/algorithm.h"
#include "core/status.h"
#include "core/transport.h"

namespace tide {

// One collective as the lane sees it: the validated, lowered arguments.
struct LaneOp {
  CollArgs args;         // Avg already lowered to Sum (see preScale/postDiv)
  double preScale = 0;   // non-zero: multiply inputs by it first (Avg, floats)
  uint64_t postDiv = 0;  // non-zero: divide results by it after (Avg, integers)
  uint32_t tag = 0;      // operation tag (core/exec/check.h opTagOf), identical on all ranks
  uint64_t seq = 0;      // operation sequence number, for messages
};

// What the lane may use of the communicator. Valid for the lane's lifetime.
struct LaneParams {
  const std::atomic<bool>* abortFlag = nullptr;  // raised by tideCommAbort
  int timeoutSec = 0;                            // no-progress limit; 0: none
  int spinUs = 20;                               // communicator's waiting tuning
  int yieldUs = 200;
  bool oversubscribed = false;     // more ranks on this node than CPUs this process may use
  PeerTraffic* traffic = nullptr;  // nranks counters (tideCommGetTraffic), or null
};

class Lane {
 public:
  virtual ~Lane() = default;
  // True when run() would take this call. Pure; cheap; no side effects.
  virtual bool accepts(const CollArgs& args) const = 0;
  // Runs one accepted collective to completion on the calling thread.
  // Blocking, bounded by the timeout and the abort flag; notices a dead peer.
  // An error leaves the lane unusable (the caller makes it sticky on the
  // communicator). Never reads or writes outside the caller's buffers as
  // described by `op.args`, even when peers disagree about the call.
  virtual Status run(const LaneOp& op) = 0;

  // The same protocol in steps, for a call that the progress engine runs
  // beside other work (a host stream's job, a group): start() publishes this
  // rank's contribution; poll() never blocks and returns true once every peer
  // has joined (false with *error set when one is gone: the call failed);
  // finish() checks the peers' calls and computes the result. A call through
  // steps and a call through run() are the same protocol, so ranks may mix
  // them freely. One call at a time per lane, in issue order; errors leave
  // the lane unusable, as with run().
  virtual Status start(const LaneOp& op) = 0;
  virtual bool poll(const LaneOp& op, Status* error) = 0;
  virtual Status finish(const LaneOp& op) = 0;
  // The doorbell peers ring when they publish: sleep on it between polls.
  virtual Doorbell* doorbell() = 0;
};

// Collective over all ranks of the communicator (like Transport::connect).
// Sets *out to a lane, or leaves it null when the communicator cannot have
// one (peers on several nodes, lane disabled, shared memory unavailable):
// every rank reaches the same answer. An error fails communicator creation.
using LaneFactory = Status (*)(SetupContext& ctx, const LaneParams& params,
                               std::unique_ptr<Lane>* out);

}  // namespace tide
