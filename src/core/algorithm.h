// What an algorithm sees: the operation's arguments (CollArgs), an execution
// context (ExecCtx) to post transfers, wait for them and run kernels, and the
// table entry (AlgorithmInfo) by which it registers.
//
// Algorithms are coroutines (core/task.h) built from pure rank arithmetic
// (algorithms/patterns) plus these calls. They never touch communicators,
// bootstraps or streams.
#pragma once

#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <vector>

#include "core/kernels.h"
#include "core/status.h"
#include "core/task.h"
#include "core/topology.h"
#include "core/transport.h"
#include "core/types.h"

namespace tide {

enum class CollType : uint8_t {
  AllReduce = 0,
  Broadcast,
  Reduce,
  AllGather,
  ReduceScatter,
  AlltoAll,
  Send,
  Recv,
  kCount
};
const char* collName(CollType t);  // "allreduce", ...
constexpr uint32_t collBit(CollType t) { return 1u << static_cast<unsigned>(t); }

// One operation, after validation and lowering (Avg is already turned into
// Sum by the core; `reduce` is the kernel for dtype x op, or null when the
// collective does not reduce).
struct CodecParams;  // core/codec.h

// The payload transform of an operation: what a rank puts on the wire for
// its elements (include/tide/compress.h; core/codec.h). Every byte count a
// rank sends or publishes is computed through it (wireBytes), never assumed
// to be count x element size.
struct Codec {
  int id = 0;  // tideCodec_t; 0: none (the plain collective: elements travel as they are)
  // tideAvg on a compressed call: the row scales its fp32 sum by 1/n (the
  // planner's lowering records it here instead of pre-scaling the inputs).
  bool avg = false;
  const CodecParams* params = nullptr;  // the compressor's (id != 0)
  void* state = nullptr;                // the compressor's state (CodecProvider::newState)
  // Bytes on the wire for one encoded piece of `count` elements of `elemSize`
  // bytes (compressed: of `count` fp32 values, whatever the input type).
  uint64_t wireBytes(uint64_t count, uint64_t elemSize) const;
};
// Wire bytes of a compressed piece (core/registry.cc, via the CodecProvider).
uint64_t codecWireBytes(const Codec& c, uint64_t count);
inline uint64_t Codec::wireBytes(uint64_t count, uint64_t elemSize) const {
  return id == 0 ? count * elemSize : codecWireBytes(*this, count);
}

struct CollArgs {
  CollType type = CollType::AllReduce;
  const void* sendbuff = nullptr;
  void* recvbuff = nullptr;
  size_t count = 0;  // NCCL's meaning: AllGather sendcount, ReduceScatter recvcount,
                     // AlltoAll per-peer count, else the buffer's count
  tideDataType_t dtype = tideFloat32;
  size_t elemSize = 4;
  RedOp op = RedOp::Sum;
  ReduceFn reduce = nullptr;
  int root = 0;  // root, or peer for Send/Recv
  MemType mem = MemType::Host;
  Codec codec;  // none unless a compressed collective was called
  // Wire bytes of `n` elements of this operation.
  uint64_t wireBytes(uint64_t n) const { return codec.wireBytes(n, elemSize); }
};

// A posted transfer. done() is cheap and never progresses anything.
struct Pending {
  Connection* conn = nullptr;  // null: nothing to wait for (0 bytes)
  uint64_t ticket = 0;
  bool isSend = false;
  int peer = -1;
  bool done() const {
    if (conn == nullptr) return true;
    return (isSend ? conn->sendsDone() : conn->recvsDone()) >= ticket;
  }
};

// Payload bytes posted to / from one peer (the communicator's traffic
// counters; updated by ExecCtx when a transfer is posted).
struct PeerTraffic {
  std::atomic<uint64_t> sent{0};
  std::atomic<uint64_t> recv{0};
};

class ExecCtx {
 public:
  // conns: flat table [peer * kNumChannels + channel] of this communicator.
  // topo: the communicator's topology (null: a single-node default);
  // traffic: nranks counters to add posted bytes to (may be null).
  ExecCtx(const CollArgs& args, int rank, int nranks, Connection* const* conns, int channel,
          const KernelTable* kernels, size_t chunkBytes, const CommTopo* topo = nullptr,
          PeerTraffic* traffic = nullptr);
  ExecCtx(const ExecCtx&) = delete;
  ExecCtx& operator=(const ExecCtx&) = delete;

  const CollArgs& args() const { return args_; }
  // Switches to the next operation of a chain (same communicator and channel).
  void setArgs(const CollArgs& a) { args_ = a; }
  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  // Preferred pipeline chunk, in bytes (a multiple of 64).
  size_t chunkBytes() const { return chunkBytes_; }
  // Chunk in whole elements of the operation's dtype (>= 1).
  size_t chunkElems() const;
  // Never null: the communicator's topology (or a one-node default).
  const CommTopo& topo() const { return *topo_; }

  // ---- Transfers (never block; complete in posting order per peer) ----
  Pending send(int peer, const void* buf, size_t bytes);
  Pending recv(int peer, void* buf, size_t bytes);
  // dst = src OP incoming, with the operation's reduce kernel.
  Pending recvReduce(int peer, void* dst, const void* src, size_t bytes);

  // co_await ctx.wait(a, b, ...): suspends until all are done. Posted but
  // unawaited transfers keep progressing while the task waits.
  struct WaitAwaiter {
    ExecCtx* ctx;
    bool await_ready() const { return ctx->error_.ok() && ctx->waitsDone(); }
    void await_suspend(std::coroutine_handle<> h) { ctx->resume_ = h; }
    void await_resume() const {}
  };
  // (Fixed-arity overloads: g++ 12 miscompiles initializer_list temporaries
  // inside co_await expressions.)
  WaitAwaiter wait(const Pending& a);
  WaitAwaiter wait(const Pending& a, const Pending& b);
  WaitAwaiter waitAll(const std::vector<Pending>& ps);

  // co_await ctx.until(ready, arg, bell): suspends until ready(arg) returns
  // true, for progress that is not a posted transfer (the small-collective
  // lane's slots). The executor polls `ready` on every sweep and, when idle,
  // sleeps on `bell` (rung by whoever makes it true); `ready` may report a
  // failure through setError() on this context (then the operation ends).
  using ReadyFn = bool (*)(void* arg);
  WaitAwaiter until(ReadyFn ready, void* arg, Doorbell* bell);
  // The doorbell of a pending until(), or null.
  Doorbell* untilBell() const { return ready_ != nullptr ? readyBell_ : nullptr; }

  // ---- Local work ----
  void reduce(void* dst, const void* a, const void* b, size_t count) const {
    args_.reduce(dst, a, b, count);
  }
  void copy(void* dst, const void* src, size_t bytes) const;
  // Scratch memory of the given size, 64-byte aligned, owned by the context
  // and valid until the operation ends.
  void* scratch(size_t bytes);

  // ---- Executor side ----
  const Status& error() const { return error_; }
  void setError(Status s) {
    if (error_.ok()) error_ = std::move(s);
  }
  bool waitsDone() const;
  std::coroutine_handle<> takeResume() { return std::exchange(resume_, {}); }
  void clearUntil() { ready_ = nullptr; }
  bool hasResume() const { return static_cast<bool>(resume_); }
  // Connections with posted, possibly incomplete transfers.
  std::vector<Connection*>& active() { return active_; }
  const std::vector<Pending>& waits() const { return waits_; }

 private:
  Pending post(int peer, bool isSend, const void* sbuf, void* rbuf, size_t bytes,
               const RecvReduce* rr);
  Connection* conn(int peer) const;

  CollArgs args_;
  int rank_;
  int nranks_;
  Connection* const* conns_;
  int channel_;
  const KernelTable* kernels_;
  size_t chunkBytes_;
  const CommTopo* topo_;
  PeerTraffic* traffic_;
  std::unique_ptr<CommTopo> ownTopo_;  // a one-node default, made only when none was given
  Status error_;
  std::coroutine_handle<> resume_;
  std::vector<Pending> waits_;
  ReadyFn ready_ = nullptr;  // a pending until(), polled by waitsDone()
  void* readyArg_ = nullptr;
  Doorbell* readyBell_ = nullptr;
  std::vector<Connection*> active_;
  std::vector<void*> scratch_;

 public:
  ~ExecCtx();
};

// Registry entry of an algorithm (see core/registry.h). Readable tables:
// name (what TIDE_ALGO matches, case-insensitively), one-line description,
// the collectives it implements.
struct AlgorithmInfo {
  const char* name;
  const char* description;
  uint32_t collMask;  // collBit(...) of the collectives it implements
  // May be null (= always). Whether it can run `args` on nranks ranks.
  bool (*supports)(const CollArgs& args, int nranks);
  // Builds the coroutine that performs the operation.
  Task (*run)(ExecCtx& ctx);
  // May be null (= not modelled). Predicted time in microseconds of `args`
  // on `topo` with chunk size chunkBytes (alpha-beta model: latency and
  // bandwidth of topo's link classes, reduction throughput). The core runs
  // the supporting algorithm with the smallest prediction unless TIDE_ALGO
  // forces one; unmodelled algorithms are used only when no modelled one
  // supports the call.
  double (*predictUs)(const CollArgs& args, const CommTopo& topo, size_t chunkBytes);
  // The memory the row runs on. Host rows are coroutines (`run`) on the
  // progress engine; device rows (MemType::Device, algorithms/device/) are
  // kernels of the device engine on the caller's CUDA stream: `run` is null
  // and `deviceKernel` names the kernel (the engine's DeviceAlgo number; 0:
  // the engine picks by size). The planner chooses among the rows of the
  // operation's memory kind; TIDE_ALGO names either kind.
  MemType mem = MemType::Host;
  int deviceKernel = 0;
  // The codecs (bit Codec::id) whose wire format the row implements; the
  // planner offers a call only to rows with its codec's bit. Plain rows: none.
  uint32_t codecs = 1u;
  bool servesCodec(const Codec& c) const { return ((codecs >> c.id) & 1u) != 0; }
};

}  // namespace tide
