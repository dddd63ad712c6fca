// Issuing operations: validation, Avg lowering, algorithm choice, groups,
// host streams and issue-order execution.
#pragma once

#include <memory>

#include "core/algorithm.h"
#include "core/comm.h"
#include "core/lane.h"
#include "core/op.h"
#include "core/status.h"

struct tideStream;

namespace tide {

// Validates one call and, unless inside a group, runs it (NULL stream) or
// queues it on its host stream. Inside a group it is held until GroupEnd.
// `codec`: a compressed call's codec (include/tide/compress.h, validated by
// the caller; id, params and state; not kCodecAuto), or null.
Status issueOp(tideComm* comm, tideStream* stream, CollType type, const void* sendbuff,
               void* recvbuff, size_t count, int dtype, int op, int rootOrPeer,
               const Codec* codec = nullptr);

// The small-collective lane of a communicator (core/lane.h, tideComm::lane).
// attachLane takes ownership; detachLane destroys it. Call only while nothing
// uses the communicator (creation, teardown).
void attachLane(tideComm* comm, std::unique_ptr<Lane> lane);
void detachLane(tideComm* comm);

Status groupStart();
Status groupEnd();

}  // namespace tide

// Host stream (core/exec/stream.cc).
tide::Status tideStreamCreateImpl(tideStream** out);
tide::Status tideStreamSynchronizeImpl(tideStream* s);
tide::Status tideStreamAddCallbackImpl(tideStream* s, tideStreamCallback_t callback, void* data);
tide::Status tideStreamQueryImpl(tideStream* s);
tide::Status tideStreamDestroyImpl(tideStream* s);
