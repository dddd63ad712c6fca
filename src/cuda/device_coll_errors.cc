// The device collective engine's error state (see device_coll.h): the abort
// word the host raises, and the coded error word the kernels write, decoded
// into a Status that names the phase, the peer and the block.
#include "cuda/device_coll.h"
#include "cuda/device_coll_logic.h"
#include "cuda/device_ring_logic.h"

namespace tide::cuda {

void DeviceAllReduce::abort() {
  if (hostWords_ != nullptr) __atomic_store_n(&hostWords_[0], 1u, __ATOMIC_RELEASE);
}

Status DeviceAllReduce::check() {
  if (!sticky_.ok()) return sticky_;
  if (hostWords_ == nullptr) return invalidUsage("device all-reduce: engine is closed");
  const uint32_t code = __atomic_load_n(&hostWords_[1], __ATOMIC_ACQUIRE);
  if (code != 0) sticky_ = errorStatus(code);
  return sticky_;
}

Status DeviceAllReduce::peek() const {
  if (hostWords_ == nullptr) return Status::Ok();
  const uint32_t code = __atomic_load_n(&hostWords_[1], __ATOMIC_ACQUIRE);
  return code != 0 ? errorStatus(code) : Status::Ok();
}

Status DeviceAllReduce::errorStatus(uint32_t code) const {
  const int ph = dc::errorPhase(code);
  if (dc::errorKind(code) == ring::kErrBadArgs) {
    return internalError(
        "device ring all-reduce (rank %d of %d): the kernel rejected its arguments (block %d; "
        "ring %u x %u B)",
        rank_, nranks_, dc::errorPart(code), ringSlots_, ringSlotBytes_);
  }
  const char* phase = ph == 0                       ? "input ready"
                      : ph == 1                     ? "slice reduced"
                      : ph == 2                     ? "done"
                      : ph == ring::kRingPhaseData  ? "ring piece sent (FIFO data)"
                      : ph == ring::kRingPhaseSpace ? "ring slot freed (FIFO room)"
                                                    : "?";
  if (dc::errorKind(code) == dc::kErrAborted) {
    return remoteError(
        "device collective engine (rank %d of %d): aborted while waiting for rank %d's "
        "'%s' signal (block %d)",
        rank_, nranks_, dc::errorPeer(code), phase, dc::errorPart(code));
  }
  if (dc::errorKind(code) == dc::kErrTimeout) {
    return timeoutError(
        "device collective engine (rank %d of %d): no '%s' signal from rank %d within "
        "%.1f s (block %d); the peer is stuck, gone, or its kernel cannot run "
        "beside this one",
        rank_, nranks_, phase, dc::errorPeer(code), static_cast<double>(timeoutNs_) / 1e9,
        dc::errorPart(code));
  }
  return internalError("device collective engine (rank %d): unknown device error code 0x%x", rank_,
                       code);
}

}  // namespace tide::cuda
