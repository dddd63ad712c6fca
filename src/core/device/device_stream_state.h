// Per-communicator state of the CUDA-stream path, shared by
// core/device/device_stream.cc (pinned staging), core/device/device_stream_proxy.cc (the
// callbacks, the proxy thread and the state table) and core/device/device_engine.cc
// (the device All-Reduce engine). Internal to the core.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "core/comm.h"
#include "core/exec/job.h"
#include "core/op.h"
#include "core/status.h"
#include "cuda/cuda_loader.h"
#include "cuda/device_coll.h"
#include "cuda/stream_order.h"

namespace tide::devstream {

using cuda::CuDevPtr;
using cuda::CuStream;

struct Copy {
  CuStream stream;
  CuDevPtr dst;
  CuDevPtr src;
  size_t bytes;
};

struct CommState;

// One job on CUDA streams: its ops (buffers rewritten to the slot), its
// stream copies and its completion word. Owned by CommState::live.
struct Entry {
  CommState* st = nullptr;
  std::vector<OpDesc> ops;
  std::shared_ptr<Job> job;  // uncaptured: tickets taken at issue
  bool captured = false;
  uint64_t ticket = 0;  // the proxy's issue order (uncaptured)
  int slot = cuda::SlotPool::kNone;
  uint32_t* word = nullptr;
  CuDevPtr wordDev = 0;
  std::vector<CuStream> streams;
  std::vector<Copy> ins, outs;
  cuda::Fanin posts, releases;
  bool failed = false;  // enqueue failed after the tickets were taken
  std::string why;
  std::atomic<bool> abandoned{false};  // proxy gone: callbacks release the word
};

struct SlotMem {
  char* host = nullptr;
  CuDevPtr dev = 0;
  size_t bytes = 0;
};

// Device All-Reduce engine of a communicator: not tried yet, usable, or
// agreed unusable (staged path from then on).
enum class EngineState { kUntried, kReady, kFailed };

// Host buffers of an engine-path collective: a pinned, device-mapped copy
// that the kernels use (All-Reduce and Broadcast in place; AllGather and
// ReduceScatter with the output after the input); host callbacks on the
// stream copy the user's input in and the result out (capturable, no host
// wait). One per (stream, send, recv, bytes, kind), kept until teardown
// (graphs replay it).
struct HostStage {
  const void* send = nullptr;
  void* recv = nullptr;
  size_t bytes = 0;      // output bytes (copied out)
  size_t inBytes = 0;    // input bytes copied in (0: none, a Broadcast non-root)
  size_t outOff = 0;     // offset of the output in the stage
  char* host = nullptr;  // pinned
  CuDevPtr dev = 0;      // its device mapping
};
using StageKey = std::tuple<CuStream, const void*, void*, size_t, int>;

// Per communicator: the proxy thread, its queue and the pinned slots; the
// device All-Reduce engine.
struct CommState {
  tideComm* comm = nullptr;
  std::mutex engineMu;  // engine state and pointer; never held while waiting
  EngineState engineState = EngineState::kUntried;
  std::unique_ptr<cuda::DeviceAllReduce> engine;
  std::map<StageKey, std::unique_ptr<HostStage>> stages;  // under engineMu
  unsigned loggedKinds = 0;  // CollTypes whose first engine call was logged (engineMu)
  cuda::IssueQueue<Entry*> queue;
  std::mutex mu;  // pool, mem, live
  cuda::SlotPool pool;
  std::vector<SlotMem> mem;
  std::map<Entry*, std::unique_ptr<Entry>> live;
  std::thread proxy;
  std::set<int> gdrWarned;  // peers warned about under TIDE_NET_GDR=1 (under mu)
};

// The state of `comm`, made (with its proxy thread) on first use. Thread-safe.
CommState* stateOf(tideComm* comm);
// The state of `comm` if it has one, else null. Thread-safe.
CommState* findState(tideComm* comm);
// Takes the state of `comm` out of the communicator (teardown); null if none.
std::unique_ptr<CommState> takeState(tideComm* comm);
// Open device All-Reduce engines of the process (0: nothing to poll).
extern std::atomic<int> gEngines;

// GPUDirect RDMA plan of `ops` (core/device/device_stream_gdr.cc): (*direct)[i] when
// op i posts its device buffer straight to its peer's connection; `isDev[i]`:
// whether op i's Send/Recv buffer is device memory; `canFlush`: whether the
// driver can flush GPUDirect RDMA writes (cuda::canFlushRdmaWrites; receives
// stage without it). Logs the TIDE_NET_GDR=1 warnings. Thread-safe.
void planGdr(const std::vector<OpDesc>& ops, const std::vector<bool>& isDev, bool canFlush,
             std::vector<bool>* direct);

// The host functions an entry's streams run (CUDA's callback thread: no CUDA
// calls, never waits), `arg` the Entry: postFn arms the word, and the last
// stream to arrive posts the entry to the proxy; releaseFn, on the last
// stream done with it, frees its slot and the entry.
void postFn(void* arg);
void releaseFn(void* arg);

// A driver call's failure as a Status naming `what`.
Status driverError(const char* what, int rc);

// After abort or at stop: every entry's streams are released without running
// its operation (executeJob fails fast on an aborted communicator) and later
// callbacks release their word themselves.
void drain(CommState* st);

// The engine part of teardown (core/device/device_engine.cc): collective close
// (bounded; after an abort the device-side waits give up first), then the
// pinned stages of host-buffer calls are freed. No-op without an engine.
void closeEngine(CommState* st);

}  // namespace tide::devstream
