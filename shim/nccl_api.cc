// libnccl.so.2: NCCL's C API (the header at /usr/local/cuda/include/nccl.h,
// NCCL 2.28) implemented on Tide's public API. Every function is defined as
// pnccl* (the profiling name) and exported; nccl* is a weak alias, as tools
// that interpose on NCCL expect. No C++ exception leaves an entry point.
//
// Buffers: in host-buffer mode (TIDE_SHIM_HOST_BUFFERS=1) pointers are host
// memory and operations complete before the call returns (the cudaStream_t
// is ignored). In GPU mode, host buffers are accepted after the caller's
// stream has drained; device buffers on one-rank communicators are local
// copies on the caller's stream, and otherwise are staged through host memory
// around the same Tide collective (shim/staging.h, nccl_coll.cc).
//
// This file: versions, unique ids and error strings; the state and teardown
// of a communicator. Creation (init, split, shrink): nccl_init.cc; buffer
// registration and memory: nccl_mem.cc; operations and groups: nccl_coll.cc.
#include <chrono>
#include <cstring>
#include <thread>

#include "shim/shim_internal.h"

using tide::shim::fail;
using tide::shim::fromTide;
namespace shim = tide::shim;

static_assert(sizeof(ncclUniqueId) == sizeof(tideUniqueId), "unique id sizes differ");
static_assert(static_cast<int>(ncclFloat8e5m2) == static_cast<int>(tideFloat8e5m2));
static_assert(static_cast<int>(ncclAvg) == static_cast<int>(tideAvg));

// ---- Version, ids, errors ---------------------------------------------------

SHIM_API ncclResult_t pncclGetVersion(int* version) {
  if (version == nullptr)
    return fail(nullptr, ncclInvalidArgument, "ncclGetVersion: version is NULL");
  *version = NCCL_VERSION_CODE;  // the API level implemented, not Tide's version
  return ncclSuccess;
}
SHIM_ALIAS(ncclGetVersion)

SHIM_API ncclResult_t pncclGetUniqueId(ncclUniqueId* uniqueId) {
  return shim::guarded(nullptr, "ncclGetUniqueId", [&]() -> ncclResult_t {
    if (uniqueId == nullptr) return fail(nullptr, ncclInvalidArgument, "ncclGetUniqueId: NULL");
    tideUniqueId id;
    const tideResult_t r = tideGetUniqueId(&id);
    if (r != tideSuccess) return fromTide(nullptr, r, "ncclGetUniqueId");
    memcpy(uniqueId, &id, sizeof(id));
    return ncclSuccess;
  });
}
SHIM_ALIAS(ncclGetUniqueId)

SHIM_API const char* pncclGetErrorString(ncclResult_t result) {
  switch (static_cast<int>(result)) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError:
      return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
      return "internal error - please report this issue to the Tide developers";
    case ncclInvalidArgument:
      return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
      return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
    default:
      return "unknown result code";
  }
}
SHIM_ALIAS(ncclGetErrorString)

SHIM_API const char* pncclGetLastError(ncclComm_t comm) {
  try {
    return shim::lastErrorOf(comm);
  } catch (...) {
    return "Tide NCCL shim: out of memory while reading the last error";
  }
}
SHIM_ALIAS(ncclGetLastError)

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
SHIM_API void pncclResetDebugInit() {}  // the shim reads NCCL_DEBUG on every message
SHIM_ALIAS(ncclResetDebugInit)
#pragma GCC diagnostic pop

// ---- Communicator state and teardown -----------------------------------------

SHIM_API ncclResult_t pncclCommFinalize(ncclComm_t comm) {
  return shim::guarded(comm, "ncclCommFinalize", [&]() -> ncclResult_t {
    if (comm == nullptr)
      return fail(nullptr, ncclInvalidArgument, "ncclCommFinalize: comm is NULL");
    if (comm->initState != ncclSuccess) {
      return comm->initState == ncclInProgress ? ncclSuccess : comm->initState;
    }
    // Host-buffer mode completes operations before their call (or group)
    // returns. Operations on CUDA streams finish on their streams (the caller
    // synchronizes them); what already failed is reported here.
    if (comm->tide == nullptr || comm->hostMode) return ncclSuccess;
    tideResult_t te = tideSuccess;
    const tideResult_t r = tideCommGetAsyncError(comm->tide, &te);
    if (r != tideSuccess) return fromTide(comm, r, "ncclCommFinalize");
    if (te == tideSuccess || te == tideInProgress) return ncclSuccess;
    return fail(comm, shim::mapResult(te, comm->callerVersion), "ncclCommFinalize: %s",
                tideGetLastError(comm->tide));
  });
}
SHIM_ALIAS(ncclCommFinalize)

namespace {

// ncclCommDestroy / ncclCommAbort: ends the Tide communicator with `end`
// (tideCommDestroy or tideCommAbort; an abort unblocks calls of other threads
// waiting inside Tide) and frees the wrapper whatever `end` returns, once no
// call uses it any more; a call still not out after 10 s (a CUDA stream
// that never drains) leaks the wrapper instead of freeing it under that
// call. NULL is a no-op.
ncclResult_t endComm(ncclComm_t comm, const char* what, tideResult_t (*end)(tideComm_t)) {
  if (comm == nullptr) return ncclSuccess;
  return shim::guarded(nullptr, what, [&] {
    comm->closing.store(true);
    const tideResult_t r = comm->tide != nullptr ? end(comm->tide) : tideSuccess;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (comm->users.load() > 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    if (comm->users.load() == 0) delete comm;
    return r == tideSuccess ? ncclSuccess : fromTide(nullptr, r, what);
  });
}

}  // namespace

SHIM_API ncclResult_t pncclCommDestroy(ncclComm_t comm) {
  return endComm(comm, "ncclCommDestroy", tideCommDestroy);
}
SHIM_ALIAS(ncclCommDestroy)

SHIM_API ncclResult_t pncclCommAbort(ncclComm_t comm) {
  return endComm(comm, "ncclCommAbort", tideCommAbort);
}
SHIM_ALIAS(ncclCommAbort)

SHIM_API ncclResult_t pncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  return shim::guarded(comm, "ncclCommRevoke", [&]() -> ncclResult_t {
    return fail(comm, ncclInvalidUsage,
                "ncclCommRevoke (flags %d) is not supported by Tide; use ncclCommAbort, or "
                "ncclCommShrink with NCCL_SHRINK_ABORT",
                revokeFlags);
  });
}
SHIM_ALIAS(ncclCommRevoke)

SHIM_API ncclResult_t pncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  return shim::guarded(comm, "ncclCommGetAsyncError", [&]() -> ncclResult_t {
    if (comm == nullptr || asyncError == nullptr) {
      return fail(comm, ncclInvalidArgument, "ncclCommGetAsyncError: comm or asyncError is NULL");
    }
    if (comm->initState != ncclSuccess || comm->tide == nullptr) {
      *asyncError = comm->tide == nullptr && comm->initState == ncclSuccess ? ncclInvalidUsage
                                                                            : comm->initState;
      return ncclSuccess;
    }
    tideResult_t te = tideSuccess;
    const tideResult_t r = tideCommGetAsyncError(comm->tide, &te);
    if (r != tideSuccess) return fromTide(comm, r, "ncclCommGetAsyncError");
    *asyncError = shim::mapResult(te, comm->callerVersion);
    if (te != tideSuccess && te != tideInProgress) {
      fail(comm, *asyncError, "asynchronous error: %s", tideGetLastError(comm->tide));
    }
    return ncclSuccess;
  });
}
SHIM_ALIAS(ncclCommGetAsyncError)

namespace {
ncclResult_t ready(ncclComm_t comm, const void* out, const char* what) {
  if (comm == nullptr || out == nullptr) {
    return fail(comm, ncclInvalidArgument, "%s: comm or output is NULL", what);
  }
  if (comm->tide == nullptr)
    return fail(comm, ncclInvalidUsage, "%s: communicator not initialised", what);
  return ncclSuccess;
}
}  // namespace

SHIM_API ncclResult_t pncclCommCount(const ncclComm_t comm, int* count) {
  return shim::guarded(comm, "ncclCommCount", [&]() -> ncclResult_t {
    ncclResult_t r = ready(comm, count, "ncclCommCount");
    return r != ncclSuccess ? r : fromTide(comm, tideCommCount(comm->tide, count), "ncclCommCount");
  });
}
SHIM_ALIAS(ncclCommCount)

SHIM_API ncclResult_t pncclCommUserRank(const ncclComm_t comm, int* rank) {
  return shim::guarded(comm, "ncclCommUserRank", [&]() -> ncclResult_t {
    ncclResult_t r = ready(comm, rank, "ncclCommUserRank");
    return r != ncclSuccess
               ? r
               : fromTide(comm, tideCommUserRank(comm->tide, rank), "ncclCommUserRank");
  });
}
SHIM_ALIAS(ncclCommUserRank)

SHIM_API ncclResult_t pncclCommCuDevice(const ncclComm_t comm, int* device) {
  return shim::guarded(comm, "ncclCommCuDevice", [&]() -> ncclResult_t {
    if (comm == nullptr || device == nullptr) {
      return fail(comm, ncclInvalidArgument, "ncclCommCuDevice: comm or device is NULL");
    }
    *device = comm->cudaDev;  // -1 in host-buffer mode
    return ncclSuccess;
  });
}
SHIM_ALIAS(ncclCommCuDevice)
