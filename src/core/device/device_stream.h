// Operations on a CUDA stream (a cudaStream_t / CUstream passed as
// tideStream_t): stream-ordered and capturable in CUDA graphs. Device buffers
// are staged through pinned host slots on the caller's stream and the host
// algorithms run on the communicator's proxy thread; host buffers take the
// same path without copies. The protocol (and its driver-free logic) is in
// cuda/stream_order.h; docs/architecture.md, "Device buffers", explains it.
#pragma once

#include <functional>
#include <vector>

#include "core/op.h"
#include "core/status.h"

namespace tide {

struct Job;

// What a non-NULL stream argument is: a Tide host stream, or (when the CUDA
// driver is usable) a CUDA stream. Anything else is an invalid argument.
enum class StreamKind { kHost, kCuda };
Status classifyStream(tideStream* s, StreamKind* kind);

// Enqueues `ops` (one call or one group; every op on a CUDA stream, possibly
// several streams and communicators) as one job and returns at once: the
// results are complete on the streams. Consumes `ops`.
Status submitDevice(std::vector<OpDesc>& ops);

// Enqueues a pipelined elementwise collective: each op is one chunk of it,
// on the same stream; `window` chunks are in flight at once. Consumes `ops`.
Status submitDevicePipelined(std::vector<OpDesc>& chunks, size_t window);

// Device engine path (cuda/device_coll.h) of a lone All-Reduce, AllGather,
// ReduceScatter or Broadcast on a CUDA stream (route Route::kDevice, chosen
// by the planner), for communicators whose ranks are all on one node (at
// most 8 ranks): deviceEngineEligible. The decision depends only on the call
// and on what every rank knows alike.
bool deviceEngineEligible(const tideComm* comm);
// Whether the engine serves `comm` (*ready). On first use the engine is
// created inside the communicator's issue order (a ticket, then the
// bootstrap allGather on this thread); a failed creation on any rank is
// agreed on by all ranks (*ready = false everywhere, Ok): the planner then
// takes the staged route. An error only when the bootstrap itself failed
// (sticky). Blocking only on first use.
Status deviceEngineReady(tideComm* comm, bool* ready);
// Enqueues the kernel of op.algo (a device row) on op.stream (capturable,
// no host wait). With op.avg, op.args.op is Sum and the result is divided by
// the rank count on the device. The engine must be ready.
Status submitDeviceEngine(const OpDesc& op);

// Closes the device All-Reduce engine (collective over the bootstrap,
// bounded; after tideCommAbort its device-side waits are aborted first),
// stops the communicator's proxy thread and frees its pinned slots once the
// streams have released them (bounded wait). Call at teardown, when no call
// uses the communicator. Graphs that captured its operations must not be
// replayed afterwards (as with NCCL).
void stopDeviceStreams(tideComm* comm);

// The first device-side error of the communicator's engine, or Ok (also when
// it has none). Thread-safe, non-blocking; feeds tideComm::stickyError.
Status deviceEngineError(tideComm* comm);

}  // namespace tide
