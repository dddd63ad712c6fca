// The C API: every extern "C" entry point goes through guarded(), which turns
// Status into tideResult_t, records the last error (per thread and per
// communicator) and never lets an exception cross the C boundary.
#include <chrono>
#include <cstring>
#include <new>
#include <string>
#include <thread>
#include <type_traits>

#include "core/boot/bootstrap.h"
#include "core/boot/env_init.h"
#include "core/comm.h"
#include "core/comm/api_call.h"
#include "core/comm/shrink.h"
#include "core/config.h"
#include "core/device/device_stream.h"
#include "core/exec/check.h"
#include "core/exec/executor.h"
#include "core/exec/job.h"
#include "core/issue/enqueue.h"
#include "core/issue/planner.h"
#include "core/log.h"
#include "cuda/cuda_loader.h"
#include "tide/tide.h"
#include "tide_build_config.h"

using tide::Status;

namespace {

thread_local std::string tLastError;
thread_local std::string tLastErrorCopy;

}  // namespace

// Never throws: it runs outside the entry points' try blocks, possibly right
// after an out-of-memory error.
void tide::recordApiError(const char* fn, tideComm* comm, const Status& s) noexcept {
  try {
    std::string msg = std::string(fn) + ": " + s.message();
    tLastError = msg;
    if (comm != nullptr) {
      std::lock_guard<std::mutex> lock(comm->errMu);
      comm->lastError = msg;
    }
    TIDE_WARN("%s failed: %s (%s)", fn, tideGetErrorString(s.code()), s.message().c_str());
  } catch (...) {  // the error code still reaches the caller
  }
}

namespace {

using tide::commCall;
using tide::guarded;

void waitUnused(tideComm* comm) {
  while (comm->users.load() > 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
}

void freeComm(tideComm* comm) {
  tide::liveRemove(comm);  // first: no open group takes it as a user from here on
  if (comm->initThread.joinable()) comm->initThread.join();
  waitUnused(comm);
  tide::checkForget(comm);
  tide::teardownCommunicator(comm);
  delete comm;
}

tide::Status initRank(tideComm_t* out, int nranks, const tideUniqueId& commId, int rank,
                      const tideConfig_t* config) {
  if (out == nullptr) return tide::invalidArgument("comm pointer is NULL");
  *out = nullptr;
  if (nranks < 1) return tide::invalidArgument("nranks %d < 1", nranks);
  if (rank < 0 || rank >= nranks)
    return tide::invalidArgument("rank %d not in [0, %d)", rank, nranks);
  tide::UniqueIdData id;
  TIDE_TRY(tide::decodeUniqueId(commId, &id));
  auto* c = new tideComm();
  bool blocking = true;
  Status s = tide::applyConfig(c, config, &blocking);
  if (!s.ok()) {
    delete c;
    return s;
  }
  tide::parseAlgoChoice(c);
  return tide::startInit(c, id, nranks, rank, blocking, "tideCommInitRankConfig", out);
}

}  // namespace

// ---- Errors and version ----------------------------------------------------------

TIDE_API const char* tideGetErrorString(tideResult_t r) {
  switch (r) {
    case tideSuccess:
      return "no error";
    case tideUnhandledDeviceError:
      return "unhandled device (CUDA) error";
    case tideSystemError:
      return "unhandled system error (socket, memory, shared memory)";
    case tideInternalError:
      return "internal error - please report this issue to the Tide developers";
    case tideInvalidArgument:
      return "invalid argument";
    case tideInvalidUsage:
      return "invalid usage";
    case tideRemoteError:
      return "remote process exited or there was a network error";
    case tideInProgress:
      return "operation in progress";
    case tideTimeout:
      return "timeout: no progress from a peer";
    default:
      return "unknown result code";
  }
}

TIDE_API const char* tideGetLastError(tideComm_t comm) {
  try {
    if (comm != nullptr) {
      std::lock_guard<std::mutex> lock(comm->errMu);
      tLastErrorCopy = comm->lastError;
    } else {
      tLastErrorCopy = tLastError;
    }
    return tLastErrorCopy.c_str();
  } catch (...) {
    return "tideGetLastError: out of memory while copying the message";
  }
}

TIDE_API tideResult_t tideGetVersion(int* version) {
  return guarded("tideGetVersion", nullptr, [&] {
    if (version == nullptr) return tide::invalidArgument("version is NULL");
    *version = TIDE_VERSION_CODE;
    return Status::Ok();
  });
}

// ---- Communicators ---------------------------------------------------------------

TIDE_API tideResult_t tideGetUniqueId(tideUniqueId* uniqueId) {
  return guarded("tideGetUniqueId", nullptr, [&]() -> Status {
    if (uniqueId == nullptr) return tide::invalidArgument("uniqueId is NULL");
    tide::UniqueIdData data;
    std::string commId = tide::knobString(tide::Knob::CommId);
    if (!commId.empty()) {
      TIDE_TRY(tide::parseHostPort(commId, &data.root));
      tide::secretFromEnvironment(data.secret, &data.authenticated);
      data.rank0StartsRoot = true;
    } else {
      TIDE_TRY(tide::defaultRootAddress(&data.root));
      TIDE_TRY(tide::randomBytes(data.secret, sizeof(data.secret)));
      data.authenticated = true;
      TIDE_TRY(tide::startBootstrapRoot(&data));
    }
    tide::encodeUniqueId(data, uniqueId);
    return Status::Ok();
  });
}

TIDE_API tideResult_t tideCommInitRank(tideComm_t* comm, int nranks, tideUniqueId commId,
                                       int rank) {
  return guarded("tideCommInitRank", nullptr,
                 [&] { return initRank(comm, nranks, commId, rank, nullptr); });
}

TIDE_API tideResult_t tideCommInitRankConfig(tideComm_t* comm, int nranks, tideUniqueId commId,
                                             int rank, tideConfig_t* config) {
  return guarded("tideCommInitRankConfig", nullptr,
                 [&] { return initRank(comm, nranks, commId, rank, config); });
}

TIDE_API tideResult_t tideCommInitFromEnv(tideComm_t* comm) {
  return guarded("tideCommInitFromEnv", nullptr, [&]() -> Status {
    if (comm == nullptr) return tide::invalidArgument("comm pointer is NULL");
    return tide::initFromEnvironment(comm);
  });
}

TIDE_API tideResult_t tideCommSplit(tideComm_t comm, int color, int key, tideComm_t* newcomm,
                                    tideConfig_t* config) {
  return commCall("tideCommSplit", comm, [&]() -> Status {
    if (newcomm == nullptr) return tide::invalidArgument("newcomm is NULL");
    *newcomm = nullptr;
    if (comm->initState.load() != tideSuccess)
      return tide::invalidUsage("communicator is not initialized");
    TIDE_TRY(comm->stickyError());
    return tide::splitCommunicator(comm, color, key, newcomm, config);
  });
}

TIDE_API tideResult_t tideCommShrink(tideComm_t comm, const int* excludeRanks, int nExclude,
                                     tideComm_t* newcomm, tideConfig_t* config, int flags) {
  return commCall("tideCommShrink", comm, [&]() -> Status {
    if (newcomm == nullptr) return tide::invalidArgument("newcomm is NULL");
    *newcomm = nullptr;
    return tide::shrinkCommunicator(comm, excludeRanks, nExclude, newcomm, config, flags);
  });
}

TIDE_API tideResult_t tideCommDestroy(tideComm_t comm) {
  return guarded("tideCommDestroy", nullptr, [&]() -> Status {
    if (comm == nullptr) return tide::invalidArgument("comm is NULL");
    freeComm(comm);
    return Status::Ok();
  });
}

TIDE_API tideResult_t tideCommAbort(tideComm_t comm) {
  return guarded("tideCommAbort", nullptr, [&]() -> Status {
    if (comm == nullptr) return Status::Ok();
    comm->abortFlag.store(true);
    comm->bell->ring();
    {
      // A blocking split or shrink of it may be stuck creating a child.
      std::lock_guard<std::mutex> lock(comm->childMu);
      comm->abortCalled = true;
      for (tideComm* child : comm->creating) child->abortFlag.store(true);
    }
    freeComm(comm);
    return Status::Ok();
  });
}

TIDE_API tideResult_t tideCommCount(const tideComm_t comm, int* count) {
  return commCall("tideCommCount", comm, [&]() -> Status {
    if (count == nullptr) return tide::invalidArgument("count is NULL");
    *count = comm->nranks;
    return Status::Ok();
  });
}

TIDE_API tideResult_t tideCommUserRank(const tideComm_t comm, int* rank) {
  return commCall("tideCommUserRank", comm, [&]() -> Status {
    if (rank == nullptr) return tide::invalidArgument("rank is NULL");
    *rank = comm->rank;
    return Status::Ok();
  });
}

TIDE_API tideResult_t tideCommGetAsyncError(tideComm_t comm, tideResult_t* asyncError) {
  return commCall("tideCommGetAsyncError", comm, [&]() -> Status {
    if (asyncError == nullptr) return tide::invalidArgument("asyncError is NULL");
    int st = comm->initState.load();
    if (st != tideSuccess) {
      *asyncError = static_cast<tideResult_t>(st);
    } else {
      *asyncError = comm->stickyError().code();
    }
    return Status::Ok();
  });
}

TIDE_API tideResult_t tideCommGetTraffic(tideComm_t comm, tideTraffic_t* traffic) {
  return commCall("tideCommGetTraffic", comm, [&]() -> Status {
    if (traffic == nullptr) return tide::invalidArgument("traffic is NULL");
    if (traffic->size < sizeof(tideTraffic_t))
      return tide::invalidArgument("traffic->size %zu: set it to sizeof(tideTraffic_t) = %zu",
                                   traffic->size, sizeof(tideTraffic_t));
    if (comm->initState.load() != tideSuccess)
      return tide::invalidUsage("communicator is not initialised");
    const size_t size = traffic->size;
    memset(traffic, 0, sizeof(tideTraffic_t));
    traffic->size = size;
    for (int p = 0; p < comm->nranks; ++p) {
      uint64_t sent = comm->traffic[p].sent.load(std::memory_order_relaxed);
      uint64_t recv = comm->traffic[p].recv.load(std::memory_order_relaxed);
      if (comm->topo.sameNode(comm->rank, p)) {
        traffic->intraNodeSent += sent;
        traffic->intraNodeRecv += recv;
      } else {
        traffic->interNodeSent += sent;
        traffic->interNodeRecv += recv;
      }
      const char* name = comm->transportOf[p];
      int t = 0;
      while (t < traffic->nTransports && strcmp(traffic->transport[t].name, name) != 0) ++t;
      if (t == traffic->nTransports) {
        if (t == TIDE_TRAFFIC_MAX_TRANSPORTS) continue;
        snprintf(traffic->transport[t].name, sizeof(traffic->transport[t].name), "%s", name);
        ++traffic->nTransports;
      }
      traffic->transport[t].sent += sent;
      traffic->transport[t].recv += recv;
    }
    return Status::Ok();
  });
}

// ---- Streams ------------------------------------------------------------------------

namespace {

// A CUDA stream passed as tideStream_t: waits for it (bounded by TIDE_TIMEOUT)
// or, with wait false, polls it. Errors of its Tide operations are reported
// by tideCommGetAsyncError, as with NCCL.
Status cudaStreamWait(tideStream_t stream, bool wait) {
  tide::StreamKind kind;
  TIDE_TRY(tide::classifyStream(stream, &kind));
  std::string why;
  if (tide::cuda::ensureContext(&why) < 0) {
    return tide::makeStatus(tideUnhandledDeviceError, "%s", why.c_str());
  }
  auto s = reinterpret_cast<tide::cuda::CuStream>(stream);
  const int rc =
      wait ? tide::cuda::waitStream(s, static_cast<double>(tide::knobInt(tide::Knob::Timeout)))
           : tide::cuda::driver()->cuStreamQuery(s);
  if (rc == tide::cuda::kCudaErrorNotReady) {
    return wait ? tide::timeoutError("CUDA stream %p did not drain within TIDE_TIMEOUT",
                                     static_cast<void*>(stream))
                : Status(tideInProgress, "");
  }
  if (rc != tide::cuda::kCudaSuccess) {
    return tide::makeStatus(tideUnhandledDeviceError, "CUDA stream %p: %s",
                            static_cast<void*>(stream), tide::cuda::driverErrorString(rc).c_str());
  }
  return Status::Ok();
}

}  // namespace

TIDE_API tideResult_t tideSetThreadWaitMode(tideWaitMode_t mode) {
  return guarded("tideSetThreadWaitMode", nullptr, [&]() -> Status {
    // The caller's bits as an int: a C caller may pass any value, which is
    // not a valid value of the C++ enum (loading it would be undefined).
    int raw = 0;
    static_assert(sizeof(mode) == sizeof(raw), "tideWaitMode_t is an int");
    std::memcpy(&raw, &mode, sizeof raw);
    if (raw != tideWaitDefault && raw != tideWaitSleep)
      return tide::invalidArgument("wait mode %d is not tideWaitDefault (0) or tideWaitSleep (1)",
                                   raw);
    tide::setThreadWaitSleep(raw == tideWaitSleep);
    return Status::Ok();
  });
}

TIDE_API tideResult_t tideStreamCreate(tideStream_t* stream) {
  return guarded("tideStreamCreate", nullptr, [&]() -> Status {
    if (stream == nullptr) return tide::invalidArgument("stream is NULL");
    return tideStreamCreateImpl(stream);
  });
}

TIDE_API tideResult_t tideStreamSynchronize(tideStream_t stream) {
  return guarded("tideStreamSynchronize", nullptr, [&]() -> Status {
    if (stream == nullptr) return Status::Ok();  // NULL stream work is already complete
    if (!tide::isHostStream(stream)) return cudaStreamWait(stream, true);
    return tideStreamSynchronizeImpl(stream);
  });
}

TIDE_API tideResult_t tideStreamAddCallback(tideStream_t stream, tideStreamCallback_t callback,
                                            void* userData) {
  return guarded("tideStreamAddCallback", nullptr, [&]() -> Status {
    if (stream == nullptr) return tide::invalidArgument("stream is NULL (a host stream is needed)");
    if (callback == nullptr) return tide::invalidArgument("callback is NULL");
    if (!tide::isHostStream(stream)) {
      return tide::invalidArgument("stream %p was not made by tideStreamCreate (or was destroyed)",
                                   static_cast<void*>(stream));
    }
    return tideStreamAddCallbackImpl(stream, callback, userData);
  });
}

TIDE_API tideResult_t tideStreamQuery(tideStream_t stream) {
  return guarded("tideStreamQuery", nullptr, [&]() -> Status {
    if (stream == nullptr) return Status::Ok();
    if (!tide::isHostStream(stream)) return cudaStreamWait(stream, false);
    return tideStreamQueryImpl(stream);
  });
}

TIDE_API tideResult_t tideStreamDestroy(tideStream_t stream) {
  return guarded("tideStreamDestroy", nullptr, [&]() -> Status {
    if (stream == nullptr) return tide::invalidArgument("stream is NULL");
    if (!tide::isHostStream(stream)) {
      return tide::invalidArgument("stream %p was not made by tideStreamCreate (or was destroyed)",
                                   static_cast<void*>(stream));
    }
    return tideStreamDestroyImpl(stream);
  });
}

// ---- Collectives and point to point ------------------------------------------------------

// A C caller may pass any int as a datatype or op; in C++ loading a value
// outside an enum's range as the enum is undefined (UBSan reports it), so the
// argument's storage is read as an int and issueOp validates it.
template <class E>
int enumArg(const E& e) {
  if constexpr (std::is_enum_v<E>) {
    static_assert(sizeof(E) == sizeof(int));
    int v;
    std::memcpy(&v, &e, sizeof(v));
    return v;
  } else {
    return static_cast<int>(e);
  }
}

#define TIDE_ISSUE(fn, type, sb, rb, cnt, dt, op, root)                                \
  commCall(fn, comm, [&] {                                                             \
    return tide::issueOp(comm, stream, tide::CollType::type, sb, rb, cnt, enumArg(dt), \
                         enumArg(op), root);                                           \
  })

TIDE_API tideResult_t tideAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                    tideDataType_t datatype, tideRedOp_t op, tideComm_t comm,
                                    tideStream_t stream) {
  return TIDE_ISSUE("tideAllReduce", AllReduce, sendbuff, recvbuff, count, datatype, op, 0);
}

TIDE_API tideResult_t tideBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                    tideDataType_t datatype, int root, tideComm_t comm,
                                    tideStream_t stream) {
  return TIDE_ISSUE("tideBroadcast", Broadcast, sendbuff, recvbuff, count, datatype, 0, root);
}

TIDE_API tideResult_t tideReduce(const void* sendbuff, void* recvbuff, size_t count,
                                 tideDataType_t datatype, tideRedOp_t op, int root, tideComm_t comm,
                                 tideStream_t stream) {
  return TIDE_ISSUE("tideReduce", Reduce, sendbuff, recvbuff, count, datatype, op, root);
}

TIDE_API tideResult_t tideAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                    tideDataType_t datatype, tideComm_t comm, tideStream_t stream) {
  return TIDE_ISSUE("tideAllGather", AllGather, sendbuff, recvbuff, sendcount, datatype, 0, 0);
}

TIDE_API tideResult_t tideReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                        tideDataType_t datatype, tideRedOp_t op, tideComm_t comm,
                                        tideStream_t stream) {
  return TIDE_ISSUE("tideReduceScatter", ReduceScatter, sendbuff, recvbuff, recvcount, datatype, op,
                    0);
}

TIDE_API tideResult_t tideAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                                   tideDataType_t datatype, tideComm_t comm, tideStream_t stream) {
  return TIDE_ISSUE("tideAlltoAll", AlltoAll, sendbuff, recvbuff, count, datatype, 0, 0);
}

TIDE_API tideResult_t tideSend(const void* sendbuff, size_t count, tideDataType_t datatype,
                               int peer, tideComm_t comm, tideStream_t stream) {
  return TIDE_ISSUE("tideSend", Send, sendbuff, nullptr, count, datatype, 0, peer);
}

TIDE_API tideResult_t tideRecv(void* recvbuff, size_t count, tideDataType_t datatype, int peer,
                               tideComm_t comm, tideStream_t stream) {
  return TIDE_ISSUE("tideRecv", Recv, nullptr, recvbuff, count, datatype, 0, peer);
}

TIDE_API tideResult_t tideGroupStart(void) {
  return guarded("tideGroupStart", nullptr, [] { return tide::groupStart(); });
}

TIDE_API tideResult_t tideGroupEnd(void) {
  return guarded("tideGroupEnd", nullptr, [] { return tide::groupEnd(); });
}
