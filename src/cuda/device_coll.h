// Device collective engine for the ranks of one node: one-shot and two-shot
// All-Reduce, AllGather, ReduceScatter and Broadcast kernels over
// peer-mapped scratch with device-side flags, no host round trip (protocol:
// device_coll_logic.h; kernels: device_coll.cu), and the ring All-Reduce
// through device FIFOs in peer-mapped ring regions (device_ring_logic.h;
// kernels: device_ring.cu, loaded on first use per context). All-Reduce
// picks its kernel per call with pickDeviceAllReduce (device_algo_choice.h)
// from facts fixed at creation, or runs the one TIDE_DEVICE_ALGO forces.
//
// Scratch mode copies each input into scratch first, so user buffers need no
// registration; direct mode (all ranks threads of one process) lets peers
// read the user buffers (see device_coll_logic.h).
//
// Peer mapping: every rank allocates one scratch region (flag area + two
// input areas of `areaBytes`) and, with two or more ranks, one ring region
// (ringRegionBytes(K, S): control words + one FIFO per part). Ranks that are threads of one process
// share the pointer directly (they must then use the same device: one context); ranks in other
// processes map it with cuIpcOpenMemHandle. The handles and pointers travel through the caller's
// allGather (e.g. the communicator's bootstrap).
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
//
// Host side: device_coll.cc (creation, teardown), device_coll_launch.cc (the
// calls' launches), device_coll_errors.cc (error state), device_ring_engine.cc
// (the ring).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/topology.h"
#include "core/types.h"
#include "cuda/cuda_loader.h"
#include "cuda/device_algo_choice.h"

namespace tide::cuda {

// allGather over the ranks: `all` holds nranks blocks of `bytes`, block
// `rank` is this rank's input; blocking.
using AllGatherFn = std::function<Status(void* all, size_t bytes)>;

struct DeviceCollOptions {
  size_t areaBytes = 0;  // input area per parity; 0: TIDE_P2P_SCRATCH
  // One-shot/two-shot boundary when the model does not pick the ring
  // (smallest of all ranks'); ~0: TIDE_P2P_ONESHOT_MAX if set, else the model.
  size_t oneShotMax = ~size_t{0};
  // All-Reduce kernel forced for every call; kAuto: TIDE_DEVICE_ALGO (which
  // may be auto: the model). Must be equal on every rank (checked).
  DeviceAlgo algo = DeviceAlgo::kAuto;
  // Model facts (deviceTopoFacts over the node's ranks); equal on every rank.
  // The engine refines them from the devices the ranks report: all ranks on
  // one GPU make the slowest path SameGpu, and ranksPerGpu is at least the
  // most ranks it sees on one device.
  PathType slowest = PathType::SameGpu;
  int ranksPerGpu = 1;
  // Ring positions -> ranks (the communicator's rings[0] restricted to the
  // node); empty or not a permutation of 0..n-1: 0..n-1. Equal on every rank
  // (checked).
  std::vector<int> ringOrder;
  uint32_t ringSlots = 4;             // K >= 2 FIFO slots per part
  uint32_t ringSlotBytes = 64 << 10;  // S, a multiple of 16 (rounded up)
  double timeoutSec = 0;              // bound of each device-side wait; <= 0: TIDE_TIMEOUT (or 300)
  int blockThreads = 512;
  // Blocks per call at most; 0: SMs / (2 * ranks sharing a GPU), so that the
  // ranks' kernels and copies fit on the GPU together. Equal on every rank.
  int maxBlocks = 0;
  // Direct mode when every rank is a thread of this process: peers read the
  // user buffers (no copy-in). Off on any rank: scratch mode for all.
  bool allowDirect = true;
};

// Whether this build carries the ring kernels (device_ring_nofatbin.h: no).
bool deviceRingKernelsBuilt();

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

  // recv[i] = send_0[i] op ... op send_{n-1}[i] (one-shot/two-shot: rank
  // order; ring: ring order starting at the chunk's position, see
  // device_ring_logic.h; bit-identical on every rank either way). `algo`:
  // kAuto picks (pick()); the others force a kernel. send/recv: device memory of this rank's
  // device; recv may equal send. `avg` (op must be Sum): the sum divided by nranks on the device
  // (integers truncate; floats multiply by 1/n). Returns after enqueueing on `stream`.
  Status allReduce(const void* send, void* recv, size_t count, tideDataType_t dtype, RedOp op,
                   DeviceAlgo algo, CuStream stream, bool avg = false);

  // AllGather: block r of recv (count elements at recv + r * count) =
  // rank r's send (count elements). Broadcast: recv = the root's send (count
  // elements; send is read on the root only, may be null elsewhere).
  // ReduceScatter: recv (count elements) = fold over ranks 0..n-1 of block
  // `rank` of each rank's send (n * count elements), bit-identical to
  // allReduce's fold; `avg` as in allReduce. All three run in scratch mode
  // (the kernel copies the input into scratch; peers never read user
  // buffers), in place too (AG: send == recv + rank * count; RS: recv ==
  // send + rank * count; Broadcast: send == recv); chunked by the scratch
  // area. Same contract as allReduce otherwise: collective, same order and
  // arguments on every rank, device memory of this rank's device,
  // stream-ordered, capturable, returns after enqueueing.
  Status allGather(const void* send, void* recv, size_t count, tideDataType_t dtype,
                   CuStream stream);
  Status reduceScatter(const void* send, void* recv, size_t count, tideDataType_t dtype, RedOp op,
                       CuStream stream, bool avg = false);
  Status broadcast(const void* send, void* recv, size_t count, tideDataType_t dtype, int root,
                   CuStream stream);

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
  // The All-Reduce kernel for `bytes` per rank: `algo` unless kAuto, then
  // the forced one (creation), then the model. Equal on every rank.
  DeviceAlgo pick(size_t bytes, DeviceAlgo algo) const;
  const DeviceChoiceFacts& facts() const { return facts_; }

 private:
  DeviceAllReduce() = default;
  Status errorStatus(uint32_t code) const;
  // Common checks of every call: open, no sticky error.
  Status begin(CuStream stream);
  // The Args fields every call shares (rank, peers, words, timeout).
  void fillCommon(void* args) const;
  // Enqueues AG / RS / Broadcast (kind) in area-sized chunks with `fn`.
  // `es`: the kernel's element size (1 for byte kernels); count, stride in
  // those elements.
  Status launchColl(void* fn, int kind, const char* in, char* out, size_t count, int es, int root,
                    CuStream stream);
  // Allocates and zeroes this rank's ring region (device_ring_engine.cc).
  Status allocRing(double timeoutSec);
  // Peer r's ring region at `addr` in its process: the pointer itself for
  // the same process, else opened from `handle` (null: r could not export).
  Status mapRing(int r, uint64_t addr, bool sameProcess, const CuIpcMemHandle* handle);
  // The ring All-Reduce: one launch of the ring kernel.
  Status ringAllReduce(const char* in, char* out, size_t count, tideDataType_t dtype, int fnIndex,
                       CuStream stream);
  // One kernel launch; a failure makes the engine unusable (sticky).
  Status launch(void* fn, void* args, int nblocks, CuStream stream);
  // Records `stream`'s event after a launch (not under capture).
  void noteLaunch(CuStream stream);
  void release();

  int rank_ = 0;
  int nranks_ = 1;
  int device_ = 0;
  int maxBlocks_ = 1;
  unsigned blockThreads_ = 512;
  size_t areaBytes_ = 0;
  DeviceChoiceFacts facts_;
  DeviceAlgo forced_ = DeviceAlgo::kAuto;
  unsigned loggedAlgos_ = 0;  // algorithms already logged (bit per DeviceAlgo)
  uint64_t timeoutNs_ = 0;
  void* module_ = nullptr;      // per-context module (shared, never unloaded)
  void* ringModule_ = nullptr;  // per-context ring module, loaded with the ring region
  uint32_t ringSlots_ = 4;
  uint32_t ringSlotBytes_ = 64 << 10;
  std::vector<int> ringOrder_;     // position -> rank
  CuDevPtr ring_ = 0;              // own ring region (nranks > 1)
  CuDevPtr scratch_ = 0;           // own region
  uint32_t* hostWords_ = nullptr;  // [0] abort, [1] error; host-mapped
  CuDevPtr devWords_ = 0;
  std::vector<CuDevPtr> peerBase_;  // every rank's region in this process
  std::vector<char> ipcMapped_;     // 1: peerBase_[r] came from cuIpcOpenMemHandle
  std::vector<CuDevPtr> peerRing_;  // every rank's ring region in this process
  std::vector<char> ringMapped_;    // 1: peerRing_[r] came from cuIpcOpenMemHandle
  bool closed_ = false;
  bool direct_ = false;
  // Per stream used outside a capture: an event recorded after the engine's
  // last launch there, which close() waits for (the event outlives the
  // stream, which the application may destroy first).
  std::vector<std::pair<CuStream, CuEvent>> streamEvents_;
  Status sticky_;  // first error; every later call returns it
};

}  // namespace tide::cuda
