// The device collective engine (cuda/device_coll.h) as the CUDA-stream path
// of All-Reduce, and of a lone AllGather / ReduceScatter / Broadcast, on a
// one-node communicator: created on first use in issue
// order, agreed unusable by all ranks when creation fails anywhere (the
// staged path of core/device/device_stream.cc then serves), closed collectively at
// teardown. See core/device/device_stream.h.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/boot/bootstrap.h"
#include "core/comm.h"
#include "core/device/device_stream.h"
#include "core/device/device_stream_state.h"
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
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(limit));
    comm->waitTicket(lock, ticket, deadline);
    if (comm->doneTicket.load() < ticket && !comm->abortFlag.load()) {
      s = timeoutError(
          "device all-reduce engine of comm %08x rank %d: earlier operations did not finish "
          "within %.0f s (TIDE_TIMEOUT)",
          static_cast<unsigned>(comm->commHash), comm->rank, limit);
    }
  }
  if (s.ok() && comm->abortFlag.load()) {
    s = remoteError("communicator %08x was aborted", static_cast<unsigned>(comm->commHash));
  }
  if (s.ok()) s = comm->stickyError();
  if (s.ok()) s = fn();
  comm->finishTicket(ticket);
  return s;
}

// The engine's All-Reduce facts from the communicator's topology (the same
// CommTopo on every rank, so the options are equal everywhere): the slowest
// path between the node's ranks, the most ranks per GPU, and the ring order
// of rings[0]. TIDE_DEVICE_ALGO is read by the engine itself.
cuda::DeviceCollOptions engineOptions(const tideComm* comm) {
  cuda::DeviceCollOptions o;
  const CommTopo& topo = comm->topo;
  const auto n = static_cast<size_t>(comm->nranks);
  if (topo.nranks == comm->nranks && topo.path.size() == n * n) {
    std::vector<int> ranks(n);
    for (size_t r = 0; r < n; ++r) ranks[r] = static_cast<int>(r);
    cuda::deviceTopoFacts(topo, ranks, &o.slowest, &o.ranksPerGpu);
  }
  if (!topo.rings.empty()) o.ringOrder = topo.rings[0];  // checked by the engine
  return o;
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
    Status s =
        cuda::DeviceAllReduce::create(comm->rank, comm->nranks, engineOptions(comm), gather, &e);
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
  if (h->inBytes > 0) memcpy(h->host, h->send, h->inBytes);
}
void stageOutFn(void* arg) {
  auto* h = static_cast<HostStage*>(arg);
  memcpy(h->recv, h->host + h->outOff, h->bytes);
}

// Input and output bytes of `a` on this rank, and whether the engine runs
// the output apart from the input in the stage.
struct StageShape {
  size_t inBytes;
  size_t outBytes;
  bool apart;
};
StageShape shapeOf(const CollArgs& a, int rank, int nranks) {
  const size_t bytes = a.count * a.elemSize;
  const auto n = static_cast<size_t>(nranks);
  switch (a.type) {
    case CollType::AllGather:
      return {bytes, bytes * n, true};
    case CollType::ReduceScatter:
      return {bytes * n, bytes, true};
    case CollType::Broadcast:
      return {rank == a.root ? bytes : 0, bytes, false};
    default:
      return {bytes, bytes, false};
  }
}

// The stage of a host-buffer call (engineMu held). Allocation is allowed
// during a stream capture (relaxed mode for this thread).
Status stageFor(CommState* st, CuStream stream, const CollArgs& a, HostStage** out) {
  const StageShape sh = shapeOf(a, st->comm->rank, st->comm->nranks);
  const StageKey key{stream, a.sendbuff, a.recvbuff, sh.outBytes, static_cast<int>(a.type)};
  auto& slot = st->stages[key];
  if (!slot) {
    const cuda::DriverApi* api = cuda::driver();
    auto h = std::make_unique<HostStage>();
    h->send = a.sendbuff;
    h->recv = a.recvbuff;
    h->bytes = sh.outBytes;
    h->inBytes = sh.inBytes;
    h->outOff = sh.apart ? (sh.inBytes + 255) / 256 * 256 : 0;
    int mode = cuda::kCaptureModeRelaxed;
    if (api->cuThreadExchangeStreamCaptureMode) api->cuThreadExchangeStreamCaptureMode(&mode);
    void* host = nullptr;
    int rc = api->cuMemHostAlloc(&host, std::max(h->outOff + h->bytes, h->inBytes),
                                 cuda::kMemHostAllocPortable | cuda::kMemHostAllocDeviceMap);
    if (rc == cuda::kCudaSuccess) rc = api->cuMemHostGetDevicePointer(&h->dev, host, 0);
    if (api->cuThreadExchangeStreamCaptureMode) api->cuThreadExchangeStreamCaptureMode(&mode);
    if (rc != cuda::kCudaSuccess) {
      if (host != nullptr) api->cuMemFreeHost(host);
      st->stages.erase(key);
      return driverError("pinned stage for host buffers of the device collective engine", rc);
    }
    h->host = static_cast<char*>(host);
    slot = std::move(h);
  }
  *out = slot.get();
  return Status::Ok();
}

// The engine call of `a` on the given buffers. engineMu held.
Status runOnEngine(CommState* st, const CollArgs& a, const void* send, void* recv, CuStream stream,
                   bool avg, cuda::DeviceAlgo algo) {
  cuda::DeviceAllReduce* e = st->engine.get();
  switch (a.type) {
    case CollType::AllGather:
      return e->allGather(send, recv, a.count, a.dtype, stream);
    case CollType::ReduceScatter:
      return e->reduceScatter(send, recv, a.count, a.dtype, a.op, stream, avg);
    case CollType::Broadcast:
      return e->broadcast(send, recv, a.count, a.dtype, a.root, stream);
    default:
      return e->allReduce(send, recv, a.count, a.dtype, a.op, algo, stream, avg);
  }
}

// Host buffers: copy in (host callback), the engine on the mapped stage,
// copy out (host callback). engineMu held.
Status engineOnHostBuffers(CommState* st, const CollArgs& a, CuStream stream, bool avg,
                           cuda::DeviceAlgo algo) {
  const cuda::DriverApi* api = cuda::driver();
  HostStage* h = nullptr;
  TIDE_TRY(stageFor(st, stream, a, &h));
  int rc = api->cuLaunchHostFunc(stream, stageInFn, h);
  if (rc != cuda::kCudaSuccess) return driverError("cuLaunchHostFunc (stage in)", rc);
  void* p = reinterpret_cast<void*>(h->dev);
  void* q = reinterpret_cast<void*>(h->dev + h->outOff);
  TIDE_TRY(runOnEngine(st, a, p, q, stream, avg, algo));
  rc = api->cuLaunchHostFunc(stream, stageOutFn, h);
  if (rc != cuda::kCudaSuccess) return driverError("cuLaunchHostFunc (stage out)", rc);
  return Status::Ok();
}

// Whether this rank's buffers of `a` are device memory (the engine then
// works on them directly). A Broadcast non-root's send is never read.
bool onDevice(const CollArgs& a, int rank) {
  const bool sendRead = a.type != CollType::Broadcast || rank == a.root;
  return (!sendRead || cuda::isDevicePointer(a.sendbuff)) && cuda::isDevicePointer(a.recvbuff);
}

// The engine path of any kind (see submitDeviceEngine).
Status submitEngine(const OpDesc& op, bool avg) {
  tideComm* comm = op.comm;
  const CollArgs& a = op.args;
  CommState* st = stateOf(comm);
  std::lock_guard<std::mutex> lock(st->engineMu);
  if (st->engineState != EngineState::kReady) {
    return internalError("%s routed to a device engine the communicator does not have",
                         collName(a.type));
  }
  if (const unsigned bit = 1u << static_cast<unsigned>(a.type); (st->loggedKinds & bit) == 0) {
    st->loggedKinds |= bit;
    TIDE_INFO("device engine: comm %08x rank %d: %s runs on the engine path",
              static_cast<unsigned>(comm->commHash), comm->rank, collName(a.type));
  }
  // The planner's row (algorithms/device/): its kernel for All-Reduce (the
  // single-kernel rows of the other collectives name none).
  const cuda::DeviceAlgo algo = op.algo != nullptr && op.algo->mem == MemType::Device
                                    ? static_cast<cuda::DeviceAlgo>(op.algo->deviceKernel)
                                    : cuda::DeviceAlgo::kAuto;
  Status s;
  std::string why;
  const auto stream = reinterpret_cast<CuStream>(op.stream);
  if (cuda::ensureContext(&why) < 0) {
    s = makeStatus(tideUnhandledDeviceError, "%s", why.c_str());
  } else if (a.count > 0 && !onDevice(a, comm->rank)) {
    // Not device memory on this rank (the path is chosen alike on every
    // rank): the kernels work on a pinned copy.
    s = engineOnHostBuffers(st, a, stream, avg, algo);
  } else {
    s = runOnEngine(st, a, a.sendbuff, a.recvbuff, stream, avg, algo);
  }
  if (!s.ok()) {
    // The other ranks' kernels wait for this rank: stop this rank's
    // device-side part; the error sticks (peers time out, bounded).
    st->engine->abort();
    comm->setAsyncError(s);
  }
  return s;
}

}  // namespace

bool deviceEngineEligible(const tideComm* comm) {
  return comm->topo.singleNode() && comm->nranks >= 1 && comm->nranks <= 8 &&
         comm->bootstrap != nullptr;
}

Status deviceEngineReady(tideComm* comm, bool* ready) {
  *ready = false;
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
    std::lock_guard<std::mutex> lock(st->engineMu);
    state = st->engineState;
  }
  *ready = state == EngineState::kReady;
  return Status::Ok();
}

Status submitDeviceEngine(const OpDesc& op) {
  const CollType t = op.args.type;
  if (t != CollType::AllReduce && t != CollType::AllGather && t != CollType::ReduceScatter &&
      t != CollType::Broadcast) {
    return internalError("%s routed to the device engine", collName(t));
  }
  return submitEngine(op, op.avg);
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
