// Device All-Reduce engine for the ranks of one node: one-shot and two-shot
// kernels over peer-mapped scratch with device-side flags, no host round
// trip (protocol: device_coll_logic.h; kernels: device_coll.cu).
//
// Scratch mode copies each input into scratch first, so user buffers need no
// registration; direct mode (all ranks threads of one process) lets peers
// read the user buffers (see device_coll_logic.h).
//
// Peer mapping: every rank allocates one scratch region (flag area + two
// input areas of `areaBytes`). Ranks that are threads of one process share
// the pointer directly (they must then use the same device: one context);
// ranks in other processes map it with cuIpcOpenMemHandle. The handles and
// pointers travel through the caller's allGather (e.g. the communicator's
// bootstrap).
//
// Calls are collective and stream-ordered: every rank calls allReduce in the
// same order with the same count/dtype/op/algo, each on its own stream (ranks
// sharing one stream would deadlock: their kernels must run concurrently).
// allReduce enqueues one kernel per chunk of areaBytes (the kernel copies the
// input into scratch itself) and returns at once; completion is on the
// stream. Capturable: the call sequence number lives in device memory (see
// device_coll_logic.h), so each replay of a captured graph is a new call. A
// device-side wait that exceeds the timeout or sees abort() leaves a code in
// host-mapped memory: check() turns it into a Status (tideTimeout /
// tideRemoteError), and every later call fails with it.
//
// Thread-safety: one thread at a time per engine, except abort() (any
// thread, any time).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/types.h"
#include "cuda/cuda_loader.h"

namespace tide::cuda {

// allGather over the ranks: `all` holds nranks blocks of `bytes`, block
// `rank` is this rank's input; blocking.
using AllGatherFn = std::function<Status(void* all, size_t bytes)>;

enum class DeviceAlgo { kAuto = 0, kOneShot = 1, kTwoShot = 2 };
const char* deviceAlgoName(DeviceAlgo a);

struct DeviceCollOptions {
  size_t areaBytes = 0;            // input area per parity; 0: TIDE_P2P_SCRATCH
  size_t oneShotMax = ~size_t{0};  // kAuto threshold (smallest of all ranks'); ~0: knob
  double timeoutSec = 0;           // bound of each device-side wait; <= 0: TIDE_TIMEOUT (or 300)
  int blockThreads = 512;
  // Blocks per call at most; 0: SMs / (2 * ranks sharing a GPU), so that the
  // ranks' kernels and copies fit on the GPU together. Equal on every rank.
  int maxBlocks = 0;
  // Direct mode when every rank is a thread of this process: peers read the
  // user buffers (no copy-in). Off on any rank: scratch mode for all.
  bool allowDirect = true;
};

class DeviceAllReduce {
 public:
  // Collective over `nranks` ranks of one node (1..8). The calling thread's
  // current CUDA context (or device 0's primary context) is used. Fails with
  // tideInvalidUsage when TIDE_P2P_DISABLE is set, the build has no device
  // kernels, or peers cannot be mapped; tideSystemError without a GPU.
  static Status create(int rank, int nranks, const DeviceCollOptions& opts,
                       const AllGatherFn& allGather, std::unique_ptr<DeviceAllReduce>* out);
  // Frees scratch and mappings at once (not collective): peers must no longer
  // use this rank's scratch; prefer close().
  ~DeviceAllReduce();
  DeviceAllReduce(const DeviceAllReduce&) = delete;
  DeviceAllReduce& operator=(const DeviceAllReduce&) = delete;

  // Collective close: waits for this context's work (bounded by the
  // timeout), then a barrier through `allGather`, so no peer still reads or
  // signals this rank's scratch when it is freed.
  Status close(const AllGatherFn& allGather);

  // recv[i] = send_0[i] op ... op send_{n-1}[i] (rank order, bit-identical on
  // every rank). send/recv: device memory of this rank's device; recv may
  // equal send. `avg` (op must be Sum): the sum divided by nranks on the
  // device (integers truncate; floats multiply by 1/n). Returns after
  // enqueueing on `stream`.
  Status allReduce(const void* send, void* recv, size_t count, tideDataType_t dtype, RedOp op,
                   DeviceAlgo algo, CuStream stream, bool avg = false);

  // Non-blocking: the first device-side error of this rank, as a Status.
  Status check();
  // Like check() without recording anything: callable from any thread while
  // the engine is open (the caller keeps close() from running meanwhile).
  Status peek() const;
  // Makes every device-side wait of this rank give up (sticky).
  void abort();

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  // Whether peer `r` is reached through a CUDA IPC mapping (vs. same process).
  bool peerIsIpc(int r) const { return r >= 0 && r < nranks_ && ipcMapped_[r] != 0; }
  // Direct mode (see DeviceCollOptions::allowDirect).
  bool direct() const { return direct_; }
  // Parts (CUDA blocks) a call of `bytes` runs with; equal on every rank.
  int blocksFor(size_t bytes) const;
  DeviceAlgo pick(size_t bytes, DeviceAlgo algo) const;

 private:
  DeviceAllReduce() = default;
  Status errorStatus(uint32_t code) const;
  void release();

  int rank_ = 0;
  int nranks_ = 1;
  int device_ = 0;
  int maxBlocks_ = 1;
  unsigned blockThreads_ = 512;
  size_t areaBytes_ = 0;
  size_t oneShotMax_ = 0;
  uint64_t timeoutNs_ = 0;
  void* module_ = nullptr;         // per-context module (shared, never unloaded)
  CuDevPtr scratch_ = 0;           // own region
  uint32_t* hostWords_ = nullptr;  // [0] abort, [1] error; host-mapped
  CuDevPtr devWords_ = 0;
  std::vector<CuDevPtr> peerBase_;  // every rank's region in this process
  std::vector<char> ipcMapped_;     // 1: peerBase_[r] came from cuIpcOpenMemHandle
  bool closed_ = false;
  bool direct_ = false;
  std::vector<CuStream> streams_;  // streams used, waited for by close()
  Status sticky_;                  // first error; every later call returns it
};

}  // namespace tide::cuda
