// The device All-Reduce engine (cuda/device_coll.h) as the CUDA-stream path
// of All-Reduce on a one-node communicator: created on first use in issue
// order, agreed unusable by all ranks when creation fails anywhere (the
// staged path of core/device_stream.cc then serves), closed collectively at
// teardown. See core/device_stream.h.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "core/comm.h"
#include "core/device_stream.h"
#include "core/device_stream_state.h"
#include "core/log.h"
#include "cuda/cuda_loader.h"
#include "cuda/device_coll.h"

namespace tide {

namespace {

using devstream::CommState;
using devstream::CuDevPtr;
using devstream::CuStream;
using devstream::driverError;
using devstream::EngineState;
using devstream::gEngines;
using devstream::HostStage;
using devstream::StageKey;
using devstream::stateOf;

// Runs `fn` holding the next issue-order ticket of `comm`: every earlier job
// of the communicator is done before it starts, no later one starts before
// it ends. The wait is bounded by TIDE_TIMEOUT and the abort flag.
Status withTicket(tideComm* comm, const std::function<Status()>& fn) {
  uint64_t ticket;
  Status s;
  {
    std::unique_lock<std::mutex> lock(comm->execMu);
    ticket = comm->nextTicket++;
    const double limit = comm->timeoutSec > 0 ? comm->timeoutSec : 300;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit);
    while (comm->doneTicket < ticket && !comm->abortFlag.load()) {
      if (std::chrono::steady_clock::now() > deadline) {
        s = timeoutError(
            "device all-reduce engine of comm %08x rank %d: earlier operations did not finish "
            "within %.0f s (TIDE_TIMEOUT)",
            static_cast<unsigned>(comm->commHash), comm->rank, limit);
        break;
      }
      comm->execCv.wait_for(lock, std::chrono::milliseconds(100));
    }
  }
  if (s.ok() && comm->abortFlag.load()) {
    s = remoteError("communicator %08x was aborted", static_cast<unsigned>(comm->commHash));
  }
  if (s.ok()) s = comm->stickyError();
  if (s.ok()) s = fn();
  {
    std::lock_guard<std::mutex> lock(comm->execMu);
    comm->doneTicket = std::max(comm->doneTicket, ticket + 1);
  }
  comm->execCv.notify_all();
  return s;
}

// Creates the engine of `st` in issue order. Ok with state kReady or
// kFailed (agreed by all ranks); an error when the bootstrap itself failed
// (the communicator is then unusable).
Status createEngine(CommState* st) {
  tideComm* comm = st->comm;
  return withTicket(comm, [&]() -> Status {
    bool gatherFailed = false;
    cuda::AllGatherFn gather = [&](void* all, size_t bytes) {
      Status g = comm->bootstrap->allGather(all, bytes);
      gatherFailed |= !g.ok();
      return g;
    };
    std::unique_ptr<cuda::DeviceAllReduce> e;
    Status s = cuda::DeviceAllReduce::create(comm->rank, comm->nranks, {}, gather, &e);
    std::lock_guard<std::mutex> lock(st->engineMu);
    if (gatherFailed) {
      st->engineState = EngineState::kFailed;
      return s;
    }
    if (!s.ok()) {
      st->engineState = EngineState::kFailed;
      TIDE_INFO("comm %08x rank %d: device all-reduce engine unavailable, staged path: %s",
                static_cast<unsigned>(comm->commHash), comm->rank, s.message().c_str());
      return Status::Ok();
    }
    st->engine = std::move(e);
    st->engineState = EngineState::kReady;
    gEngines.fetch_add(1);
    TIDE_INFO("device all-reduce engine: comm %08x rank %d/%d uses the engine path (%s mode)",
              static_cast<unsigned>(comm->commHash), comm->rank, comm->nranks,
              st->engine->direct() ? "direct" : "scratch");
    return Status::Ok();
  });
}

void stageInFn(void* arg) {
  auto* h = static_cast<HostStage*>(arg);
  memcpy(h->host, h->send, h->bytes);
}
void stageOutFn(void* arg) {
  auto* h = static_cast<HostStage*>(arg);
  memcpy(h->recv, h->host, h->bytes);
}

// The stage of a host-buffer call (engineMu held). Allocation is allowed
// during a stream capture (relaxed mode for this thread).
Status stageFor(CommState* st, CuStream stream, const void* send, void* recv, size_t bytes,
                HostStage** out) {
  auto& slot = st->stages[StageKey{stream, send, recv, bytes}];
  if (!slot) {
    const cuda::DriverApi* api = cuda::driver();
    auto h = std::make_unique<HostStage>();
    h->send = send;
    h->recv = recv;
    h->bytes = bytes;
    int mode = cuda::kCaptureModeRelaxed;
    if (api->cuThreadExchangeStreamCaptureMode) api->cuThreadExchangeStreamCaptureMode(&mode);
    void* host = nullptr;
    int rc = api->cuMemHostAlloc(&host, bytes,
                                 cuda::kMemHostAllocPortable | cuda::kMemHostAllocDeviceMap);
    if (rc == cuda::kCudaSuccess) rc = api->cuMemHostGetDevicePointer(&h->dev, host, 0);
    if (api->cuThreadExchangeStreamCaptureMode) api->cuThreadExchangeStreamCaptureMode(&mode);
    if (rc != cuda::kCudaSuccess) {
      if (host != nullptr) api->cuMemFreeHost(host);
      st->stages.erase(StageKey{stream, send, recv, bytes});
      return driverError("pinned stage for host buffers of the device all-reduce engine", rc);
    }
    h->host = static_cast<char*>(host);
    slot = std::move(h);
  }
  *out = slot.get();
  return Status::Ok();
}

// Host buffers: copy in (host callback), the engine in place on the mapped
// stage, copy out (host callback). engineMu held.
Status engineOnHostBuffers(CommState* st, const CollArgs& a, CuStream stream, bool avg) {
  const cuda::DriverApi* api = cuda::driver();
  HostStage* h = nullptr;
  TIDE_TRY(stageFor(st, stream, a.sendbuff, a.recvbuff, a.count * a.elemSize, &h));
  int rc = api->cuLaunchHostFunc(stream, stageInFn, h);
  if (rc != cuda::kCudaSuccess) return driverError("cuLaunchHostFunc (stage in)", rc);
  void* p = reinterpret_cast<void*>(h->dev);
  TIDE_TRY(
      st->engine->allReduce(p, p, a.count, a.dtype, a.op, cuda::DeviceAlgo::kAuto, stream, avg));
  rc = api->cuLaunchHostFunc(stream, stageOutFn, h);
  if (rc != cuda::kCudaSuccess) return driverError("cuLaunchHostFunc (stage out)", rc);
  return Status::Ok();
}

}  // namespace

bool deviceEngineEligible(const tideComm* comm) {
  return comm->topo.singleNode() && comm->nranks >= 1 && comm->nranks <= 8 &&
         comm->bootstrap != nullptr;
}

Status submitDeviceAllReduce(const OpDesc& op, bool avg, bool* used) {
  *used = false;
  tideComm* comm = op.comm;
  const CollArgs& a = op.args;
  CommState* st = stateOf(comm);
  EngineState state;
  {
    std::lock_guard<std::mutex> lock(st->engineMu);
    state = st->engineState;
  }
  if (state == EngineState::kUntried) {
    Status s = createEngine(st);
    if (!s.ok()) {
      comm->setAsyncError(s);
      return s;
    }
  }
  std::lock_guard<std::mutex> lock(st->engineMu);
  if (st->engineState != EngineState::kReady) return Status::Ok();
  *used = true;
  Status s;
  std::string why;
  const auto stream = reinterpret_cast<CuStream>(op.stream);
  if (cuda::ensureContext(&why) < 0) {
    s = makeStatus(tideUnhandledDeviceError, "%s", why.c_str());
  } else if (a.count > 0 &&
             (!cuda::isDevicePointer(a.sendbuff) || !cuda::isDevicePointer(a.recvbuff))) {
    // Not device memory on this rank (the path is chosen alike on every
    // rank): the kernels work on a pinned copy.
    s = engineOnHostBuffers(st, a, stream, avg);
  } else {
    s = st->engine->allReduce(a.sendbuff, a.recvbuff, a.count, a.dtype, a.op,
                              cuda::DeviceAlgo::kAuto, stream, avg);
  }
  if (!s.ok()) {
    // The other ranks' kernels wait for this rank: stop this rank's
    // device-side part; the error sticks (peers time out, bounded).
    st->engine->abort();
  }
  if (!s.ok()) comm->setAsyncError(s);
  return s;
}

Status deviceEngineError(tideComm* comm) {
  if (gEngines.load(std::memory_order_relaxed) == 0) return Status::Ok();
  CommState* st = devstream::findState(comm);
  if (st == nullptr) return Status::Ok();
  std::lock_guard<std::mutex> lock(st->engineMu);
  return st->engine ? st->engine->peek() : Status::Ok();
}

namespace devstream {

void closeEngine(CommState* st) {
  if (!st->engine) return;
  tideComm* comm = st->comm;
  // Collective close; after an abort the device-side waits give up first
  // and the bootstrap's exchange fails fast on the abort flag.
  if (comm->abortFlag.load()) st->engine->abort();
  std::string why;
  Status s = cuda::ensureContext(&why) >= 0 ? st->engine->close([comm](void* all, size_t bytes) {
    return comm->bootstrap->allGather(all, bytes);
  })
                                            : systemError("%s", why.c_str());
  if (!s.ok() && !comm->abortFlag.load()) {
    TIDE_WARN("comm %08x rank %d: closing the device all-reduce engine: %s",
              static_cast<unsigned>(comm->commHash), comm->rank, s.message().c_str());
  }
  st->engine.reset();
  gEngines.fetch_sub(1);
  if (const cuda::DriverApi* api = cuda::driver(); api != nullptr) {
    for (auto& [key, h] : st->stages) api->cuMemFreeHost(h->host);
  }
  st->stages.clear();
}

}  // namespace devstream

}  // namespace tide
