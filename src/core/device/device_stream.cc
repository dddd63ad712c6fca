// Stream-ordered operations on CUDA streams: see core/device/device_stream.h and the
// protocol in cuda/stream_order.h. Threads: the issuing thread stages the
// buffers and enqueues every driver call; CUDA's callback thread only arms
// the word and posts (no CUDA calls, short locks); the communicator's proxy
// thread runs the host algorithms and releases the word. The proxy makes no
// CUDA calls either. This file: the issuing thread's part; the callbacks, the
// proxy thread and the per-communicator state: core/device/device_stream_proxy.cc.
#include "core/device/device_stream.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "core/comm.h"
#include "core/config.h"
#include "core/device/device_stream_state.h"
#include "core/exec/job.h"
#include "core/log.h"
#include "cuda/cuda_loader.h"
#include "cuda/stream_order.h"

namespace tide {

namespace {

using devstream::CommState;
using devstream::Copy;
using devstream::CuDevPtr;
using devstream::CuStream;
using devstream::drain;
using devstream::driverError;
using devstream::Entry;
using devstream::postFn;
using devstream::releaseFn;
using devstream::SlotMem;
using devstream::stateOf;

constexpr size_t kAlign = 256;  // slot regions (16-byte vector access and more)
constexpr double kReleaseWaitSec = 10.0;

size_t alignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// ---- Staging plan -------------------------------------------------------------------

// The bytes an op reads (in) and writes (out) on this rank, and whether the
// output is to be written back (NCCL leaves a non-root's Reduce output alone).
void opBytes(const OpDesc& op, size_t* in, size_t* out, bool* writeBack) {
  const CollArgs& a = op.args;
  const size_t b = a.count * a.elemSize;
  const size_t n = static_cast<size_t>(op.comm->nranks);
  const bool root = op.comm->rank == a.root;
  *writeBack = true;
  switch (a.type) {
    case CollType::AllGather:
      *in = b;
      *out = b * n;
      break;
    case CollType::ReduceScatter:
      *in = b * n;
      *out = b;
      break;
    case CollType::AlltoAll:
      *in = b * n;
      *out = b * n;
      break;
    case CollType::Broadcast:
      *in = root ? b : 0;
      *out = b;
      break;
    case CollType::Reduce:
      *in = b;
      *out = root ? b : 0;
      *writeBack = root;
      break;
    case CollType::Send:
      *in = b;
      *out = 0;
      break;
    case CollType::Recv:
      *in = 0;
      *out = b;
      break;
    default:
      *in = b;
      *out = b;
  }
}

// A slot of at least `bytes`: recycled (uncaptured) or new (pinned,
// device-mapped). Allocation is allowed during a stream capture (relaxed
// mode for this thread) and happens outside st->mu, which CUDA's callback
// thread takes (releaseFn).
Status getSlot(CommState* st, size_t bytes, bool persistent, int* slot) {
  if (!persistent) {
    std::lock_guard<std::mutex> lock(st->mu);
    *slot = st->pool.acquire(bytes);
    if (*slot != cuda::SlotPool::kNone) return Status::Ok();
  }
  const cuda::DriverApi* api = cuda::driver();
  int mode = cuda::kCaptureModeRelaxed;
  if (api->cuThreadExchangeStreamCaptureMode) api->cuThreadExchangeStreamCaptureMode(&mode);
  void* host = nullptr;
  CuDevPtr dev = 0;
  int rc =
      api->cuMemHostAlloc(&host, bytes, cuda::kMemHostAllocPortable | cuda::kMemHostAllocDeviceMap);
  if (rc == cuda::kCudaSuccess) rc = api->cuMemHostGetDevicePointer(&dev, host, 0);
  if (api->cuThreadExchangeStreamCaptureMode) api->cuThreadExchangeStreamCaptureMode(&mode);
  if (rc != cuda::kCudaSuccess) {
    if (host != nullptr) api->cuMemFreeHost(host);
    char what[96];
    snprintf(what, sizeof(what), "pinned slot of %zu bytes (cuMemHostAlloc, device-mapped)", bytes);
    return driverError(what, rc);
  }
  std::lock_guard<std::mutex> lock(st->mu);
  *slot = st->pool.add(bytes, persistent);
  st->mem.push_back({static_cast<char*>(host), dev, bytes});
  return Status::Ok();
}

Status checkDriver() {
  const cuda::DriverApi* api = cuda::driver();
  if (api == nullptr) {
    return makeStatus(tideUnhandledDeviceError, "CUDA stream given but no GPU is usable: %s",
                      cuda::probeGpu().detail.c_str());
  }
  if (!api->cuLaunchHostFunc || !api->cuStreamWaitValue32 || !api->cuStreamIsCapturing) {
    return makeStatus(tideUnhandledDeviceError,
                      "CUDA stream path needs cuLaunchHostFunc, cuStreamWaitValue32_v2 and "
                      "cuStreamIsCapturing (driver %d is too old)",
                      cuda::probeGpu().driverVersion);
  }
  std::string why;
  if (cuda::ensureContext(&why) < 0) return makeStatus(tideUnhandledDeviceError, "%s", why.c_str());
  return Status::Ok();
}

// Builds the entry of `ops` (all on CUDA streams): slot, rewritten buffers,
// copies. Takes no ticket.
Status prepare(std::vector<OpDesc>& ops, std::unique_ptr<Entry>* out) {
  TIDE_TRY(checkDriver());
  const cuda::DriverApi* api = cuda::driver();
  auto e = std::make_unique<Entry>();
  int capturedStreams = 0;
  for (const OpDesc& op : ops) {
    auto s = reinterpret_cast<CuStream>(op.stream);
    if (std::find(e->streams.begin(), e->streams.end(), s) != e->streams.end()) continue;
    int status = cuda::kCaptureStatusNone;
    const int rc = api->cuStreamIsCapturing(s, &status);
    if (rc != cuda::kCudaSuccess) return driverError("cuStreamIsCapturing", rc);
    if (status != cuda::kCaptureStatusNone && status != cuda::kCaptureStatusActive) {
      return invalidUsage("CUDA stream path: the stream's capture was invalidated");
    }
    capturedStreams += status == cuda::kCaptureStatusActive ? 1 : 0;
    e->streams.push_back(s);
  }
  if (capturedStreams != 0 && capturedStreams != static_cast<int>(e->streams.size())) {
    return invalidUsage("a group mixes CUDA streams under capture with streams that are not");
  }
  e->captured = capturedStreams != 0;
  e->posts.reset(static_cast<int>(e->streams.size()));
  e->releases.reset(static_cast<int>(e->streams.size()));
  // Layout: word, then each staged device buffer at an aligned offset.
  struct Plan {
    size_t inOff = 0, outOff = 0, in = 0, out = 0;
    bool inDev = false, outDev = false, writeBack = true;
  };
  std::vector<Plan> plans(ops.size());
  std::vector<bool> p2pDev(ops.size(), false), direct;
  for (size_t i = 0; i < ops.size(); ++i) {
    Plan& p = plans[i];
    const CollArgs& a = ops[i].args;
    opBytes(ops[i], &p.in, &p.out, &p.writeBack);
    p.inDev = p.in > 0 && cuda::isDevicePointer(a.sendbuff);
    p.outDev = p.out > 0 && cuda::isDevicePointer(a.recvbuff);
    p2pDev[i] = a.type == CollType::Send ? p.inDev : a.type == CollType::Recv && p.outDev;
    // Managed memory migrates between host and GPU: no NIC registration.
    if (p2pDev[i]) {
      p2pDev[i] = !cuda::isManagedPointer(a.type == CollType::Send ? a.sendbuff : a.recvbuff);
    }
  }
  // GPUDirect RDMA: these ops keep their device buffers (no slot region, no
  // copies); the proxy posts them directly, still in stream order.
  devstream::planGdr(ops, p2pDev, cuda::canFlushRdmaWrites(), &direct);
  size_t total = kAlign;
  for (size_t i = 0; i < ops.size(); ++i) {
    Plan& p = plans[i];
    if (direct[i]) p.inDev = p.outDev = false;
    if (p.inDev) {
      p.inOff = total;
      total += alignUp(p.in);
    }
    if (p.outDev) {
      p.outOff = total;
      total += alignUp(p.out);
    }
  }
  e->st = stateOf(ops.front().comm);
  TIDE_TRY(getSlot(e->st, total, e->captured, &e->slot));
  SlotMem m;
  {
    std::lock_guard<std::mutex> lock(e->st->mu);
    m = e->st->mem[e->slot];
  }
  e->word = reinterpret_cast<uint32_t*>(m.host);
  e->wordDev = m.dev;
  *e->word = cuda::kWordPending;
  for (size_t i = 0; i < ops.size(); ++i) {
    OpDesc op = ops[i];
    const Plan& p = plans[i];
    auto s = reinterpret_cast<CuStream>(op.stream);
    CollArgs& a = op.args;
    if (direct[i]) a.mem = MemType::Device;
    if (p.inDev) {
      e->ins.push_back({s, m.dev + p.inOff, reinterpret_cast<CuDevPtr>(a.sendbuff), p.in});
      a.sendbuff = m.host + p.inOff;
    }
    if (p.outDev) {
      if (p.writeBack)
        e->outs.push_back({s, reinterpret_cast<CuDevPtr>(a.recvbuff), m.dev + p.outOff, p.out});
      a.recvbuff = m.host + p.outOff;
    }
    // A non-root Broadcast reads nothing: hand the algorithm its output.
    if (a.type == CollType::Broadcast && op.comm->rank != a.root) a.sendbuff = a.recvbuff;
    op.stream = nullptr;
    e->ops.push_back(op);
  }
  *out = std::move(e);
  return Status::Ok();
}

// Registers the entry and, uncaptured, takes its tickets (core + proxy).
Entry* admit(std::unique_ptr<Entry> owned) {
  Entry* e = owned.get();
  if (!e->captured) {
    e->job = std::make_shared<Job>();
    e->job->ops = e->ops;
    takeTickets(*e->job, [e] { e->ticket = e->st->queue.reserve(); });
  }
  std::lock_guard<std::mutex> lock(e->st->mu);
  e->st->live.emplace(e, std::move(owned));
  return e;
}

// Copies in, then the post callback on every stream.
Status emitHead(Entry* e) {
  const cuda::DriverApi* api = cuda::driver();
  Status s;
  for (const Copy& c : e->ins) {
    const int rc = api->cuMemcpyAsync(c.dst, c.src, c.bytes, c.stream);
    if (rc != cuda::kCudaSuccess) {
      s = driverError("copy to the pinned slot (cuMemcpyAsync)", rc);
      break;
    }
  }
  size_t launched = 0;
  if (s.ok()) {
    for (CuStream st : e->streams) {
      const int rc = api->cuLaunchHostFunc(st, postFn, e);
      if (rc != cuda::kCudaSuccess) {
        s = driverError("cuLaunchHostFunc", rc);
        break;
      }
      ++launched;
    }
  }
  if (s.ok()) return s;
  // The job holds tickets: it must still pass through the proxy, which
  // fails it (sticky) without running it.
  e->failed = true;
  e->why = s.message();
  if (launched > 0) e->abandoned.store(true);
  if (!e->captured) {
    if (!e->st->queue.post(e->ticket, e)) cuda::wordRelease(e->word);
  }
  return s;
}

// On every stream: wait for the word, copy out, release the slot (uncaptured).
Status emitTail(Entry* e) {
  const cuda::DriverApi* api = cuda::driver();
  for (CuStream st : e->streams) {
    int rc = api->cuStreamWaitValue32(st, e->wordDev, cuda::kWordDone, cuda::kStreamWaitValueEq);
    if (rc != cuda::kCudaSuccess) return driverError("cuStreamWaitValue32", rc);
    for (const Copy& c : e->outs) {
      if (c.stream != st) continue;
      rc = api->cuMemcpyAsync(c.dst, c.src, c.bytes, c.stream);
      if (rc != cuda::kCudaSuccess) return driverError("copy from the pinned slot", rc);
    }
    if (!e->captured) {
      rc = api->cuLaunchHostFunc(st, releaseFn, e);
      if (rc != cuda::kCudaSuccess) return driverError("cuLaunchHostFunc (release)", rc);
    }
  }
  return Status::Ok();
}

Status failSticky(const std::vector<OpDesc>& ops, Status s) {
  if (!s.ok()) {
    for (const OpDesc& op : ops) op.comm->setAsyncError(s);
  }
  return s;
}

}  // namespace

Status classifyStream(tideStream* s, StreamKind* kind) {
  if (isHostStream(s)) {
    *kind = StreamKind::kHost;
    return Status::Ok();
  }
  if (cuda::driver() == nullptr) {
    return invalidArgument(
        "stream %p was not made by tideStreamCreate, and it cannot be a CUDA stream: %s",
        static_cast<void*>(s), cuda::probeGpu().detail.c_str());
  }
  *kind = StreamKind::kCuda;
  return Status::Ok();
}

Status submitDevice(std::vector<OpDesc>& ops) {
  if (ops.empty()) return Status::Ok();
  std::unique_ptr<Entry> owned;
  Status s = prepare(ops, &owned);
  std::vector<OpDesc> mine = std::move(ops);
  ops.clear();
  if (!s.ok()) return s;  // nothing enqueued, no ticket taken
  Entry* e = admit(std::move(owned));
  TIDE_TRY(emitHead(e));
  return failSticky(mine, emitTail(e));
}

Status submitDevicePipelined(std::vector<OpDesc>& chunks, size_t window) {
  std::vector<Entry*> entries;
  std::vector<OpDesc> all = std::move(chunks);
  chunks.clear();
  Status s;
  for (const OpDesc& op : all) {
    std::vector<OpDesc> one{op};
    std::unique_ptr<Entry> owned;
    s = prepare(one, &owned);
    if (!s.ok()) break;
    entries.push_back(admit(std::move(owned)));
  }
  if (!s.ok() && !entries.empty()) {
    // Earlier chunks hold tickets: the other ranks run all chunks, so this
    // communicator cannot continue consistently.
    s = failSticky(all, s);
  }
  size_t emitted = 0;
  for (long step : cuda::pipelineOrder(entries.size(), window)) {
    if (!s.ok()) break;
    if (step > 0) {
      s = emitHead(entries[step - 1]);
      emitted = static_cast<size_t>(step);
    } else {
      s = failSticky(all, emitTail(entries[-step - 1]));
    }
  }
  // Entries never emitted still hold tickets: fail them through the proxy.
  for (size_t k = emitted; k < entries.size(); ++k) {
    entries[k]->failed = true;
    entries[k]->why = "an earlier chunk of the same All-Reduce failed";
    if (!entries[k]->st->queue.post(entries[k]->ticket, entries[k])) {
      cuda::wordRelease(entries[k]->word);
    }
  }
  return s;
}

void stopDeviceStreams(tideComm* comm) {
  std::unique_ptr<CommState> st = devstream::takeState(comm);
  if (!st) return;
  closeEngine(st.get());
  drain(st.get());   // every posted entry's word is released
  st->proxy.join();  // its own drain finds nothing left
  // Uncaptured entries are freed by their release callbacks once the streams
  // copied the results out; wait for them (bounded), then free the slots.
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    size_t inFlight = 0;
    {
      std::lock_guard<std::mutex> lock(st->mu);
      for (auto& [p, e] : st->live) inFlight += (e->captured || e->failed) ? 0 : 1;
    }
    if (inFlight == 0) break;
    if (std::chrono::steady_clock::now() - start > std::chrono::duration<double>(kReleaseWaitSec)) {
      TIDE_WARN(
          "comm %08x: %zu CUDA stream operations still in flight at destroy; their pinned "
          "slots are leaked",
          static_cast<unsigned>(comm->commHash), inFlight);
      (void)st.release();  // leaked on purpose: callbacks may still touch it
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const cuda::DriverApi* api = cuda::driver();
  if (api != nullptr) {
    for (const SlotMem& m : st->mem) api->cuMemFreeHost(m.host);
  }
}

}  // namespace tide
