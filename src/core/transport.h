// Transport interface owned by the core.
//
// A transport moves bytes between two ranks of a communicator. The core picks
// one transport per peer pair (self, then the highest-priority transport
// whose canConnect() is true on both sides) and asks it to build
// Connections during communicator creation. Transports register themselves
// with the registry (core/registry.h) and are never named by the core.
//
// Data model: a Connection is one ordered, reliable, bidirectional byte pipe
// between this rank and one peer, for one logical channel. Sends and receives
// are posted in order and complete in order; message boundaries are implied
// by the sizes the two sides post (they always agree: collectives and
// send/recv pairs post matching sizes). A 0-byte post completes immediately
// and moves nothing.
//
// Threading: a Connection is used by one thread at a time (the thread that
// executes the communicator's work); it needs no internal locking.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace tide {

// ---- Memory and reduction hooks -----------------------------------------------

enum class MemType : uint8_t { Host = 0, Device = 1 };

// dst[i] = a[i] OP b[i] for i < count elements. dst may alias a or b.
using ReduceFn = void (*)(void* dst, const void* a, const void* b, size_t count);

// A receive that combines instead of copying: for the incoming bytes at offset
// k of the message, buf[k] = fn(src[k], incoming[k]) element-wise. `src` may
// equal the receive buffer. Transports must call fn only on whole elements:
// they keep a partial element back until the rest has arrived.
struct RecvReduce {
  ReduceFn fn = nullptr;
  const void* src = nullptr;
  size_t elemSize = 1;
};

// ---- Wake-ups ----------------------------------------------------------------

// A futex word owned by one rank. The rank sleeps on it when it has nothing to
// do; anybody who makes progress possible for that rank (writes data it is
// waiting for, frees space it is waiting for) calls ring(). Lives in memory
// that every waker can map (process-shared futex).
//
// Protocol (no lost wake-ups): the owner calls prepareWait(), checks once more
// for work, then either cancelWait() or commitWait(seen, timeout). A waker
// first publishes its data (release store), then calls ring().
struct Doorbell {
  std::atomic<uint32_t> seq{0};
  std::atomic<uint32_t> sleepers{0};
  // Wakes the owner if it sleeps. Cheap (one load) when it does not.
  void ring();
  uint32_t prepareWait();
  void cancelWait();
  // Sleeps while seq == seen, at most timeoutUs microseconds.
  void commitWait(uint32_t seen, int64_t timeoutUs);
};

// ---- Connections -----------------------------------------------------------------

class Connection {
 public:
  virtual ~Connection() = default;

  // Queues a send of `bytes` from `buf`; `buf` must stay valid and unchanged
  // until sendsDone() >= *ticket. Never blocks.
  virtual Status postSend(const void* buf, size_t bytes, uint64_t* ticket) = 0;
  // Queues a receive of exactly `bytes` into `buf` (combining with rr when
  // rr != nullptr; *rr is copied). Never blocks.
  virtual Status postRecv(void* buf, size_t bytes, const RecvReduce* rr, uint64_t* ticket) = 0;
  // Moves as much queued data as possible without blocking; sets *moved to
  // true when any byte moved (never sets it false). Returns an error
  // (remote/system) when the peer failed; the error is sticky.
  virtual Status progress(bool* moved) = 0;
  // Number of posted sends / receives that are complete. Tickets start at 1.
  virtual uint64_t sendsDone() const = 0;
  virtual uint64_t recvsDone() const = 0;
  // A file descriptor to poll() for readability/writability when the
  // connection is idle-waiting, or -1 (then the owner's Doorbell is rung).
  virtual int pollFd() const { return -1; }
  // With pollFd() >= 0: also wait for writability (sends are queued).
  virtual bool pollForWrite() const { return false; }
  // True while posted work is not complete (used to decide how to wait).
  virtual bool busy() const = 0;

  // ---- Device memory (GPUDirect RDMA) ----
  // TIDE_NET_PTR_DEVICE / TIDE_NET_PTR_DMABUF bits (include/tide/net.h) when
  // this connection accepts device pointers in postSendMem/postRecvMem; 0
  // (the default): host memory only. Constant for the connection's life;
  // thread-safe (read by the thread that plans CUDA-stream operations).
  virtual int devicePtrSupport() const { return 0; }
  // As postSend / postRecv for memory of kind `mem`. MemType::Host forwards to
  // them; MemType::Device is refused (tideInternalError) unless
  // devicePtrSupport() != 0, and a reducing receive into device memory is
  // always refused (the planner never makes one).
  virtual Status postSendMem(const void* buf, size_t bytes, MemType mem, uint64_t* ticket) {
    if (mem == MemType::Host) return postSend(buf, bytes, ticket);
    return internalError("this transport cannot send from device memory");
  }
  virtual Status postRecvMem(void* buf, size_t bytes, const RecvReduce* rr, MemType mem,
                             uint64_t* ticket) {
    if (mem == MemType::Host) return postRecv(buf, bytes, rr, ticket);
    return internalError("this transport cannot receive into device memory");
  }
};

// ---- Setup --------------------------------------------------------------------------

// What every rank tells the others at communicator creation.
struct PeerInfo {
  int rank = -1;
  int pid = 0;
  uint64_t hostHash = 0;  // hash of the node identity (host name + netns, or TIDE_HOSTID)
  char host[64] = {};     // printable node identity, for logs
  // TIDE_P2P_ONESHOT_MAX of this rank, or ~0 when unset: the planner's
  // device rows use the smallest (CommTopo::deviceOneShotMax).
  uint64_t deviceOneShotMax = ~uint64_t{0};
  uint8_t reserved[48] = {};
};

// Collective services available while connections are being built. Every
// call is collective over the ranks of the communicator unless noted.
class SetupContext {
 public:
  virtual ~SetupContext() = default;
  virtual int rank() const = 0;
  virtual int nranks() const = 0;
  virtual const std::vector<PeerInfo>& peers() const = 0;
  // all must hold nranks * bytes; rank r's block lands at all + r * bytes.
  virtual Status allGather(const void* mine, size_t bytes, void* all) = 0;
  virtual Status barrier() = 0;
  // 16-byte job secret (zeros when the job is unauthenticated), to
  // authenticate data connections (see core/auth.h).
  virtual const uint8_t* secret() const = 0;
  // Unique per communicator and short ("tide-1a2b3c4d-5"): prefix for names
  // of shared resources (shm segments). tiderun removes "/dev/shm/<jobTag()>*"
  // leftovers of its job.
  virtual std::string resourcePrefix() const = 0;
  // Identical on every rank of the communicator and different for every
  // communicator (a hash of its unique id): what data-connection proofs bind
  // to. (resourcePrefix() may differ between nodes.)
  virtual uint64_t commHash() const = 0;
  // Address to bind data listeners to (the one this rank used to reach the
  // bootstrap root), as text ("10.0.0.1" or "::1").
  virtual std::string localAddress() const = 0;
  // Makes the communicator's executor sleep on *bell (which the transport
  // placed in shared memory) instead of its private one. Not collective.
  virtual void installDoorbell(Doorbell* bell) = 0;
  virtual Doorbell* doorbell() const = 0;
  // Raised by tideCommAbort; every blocking loop in setup must poll it.
  virtual const std::atomic<bool>& abortFlag() const = 0;
  // Seconds a setup step may wait for a peer (0: forever, still abortable).
  virtual int timeoutSeconds() const = 0;
  // Operation tags, for detecting calls that do not match across ranks.
  // Returns a word the core rewrites before each operation it executes on
  // `channel` (a 32-bit digest of the collective's sequence number, type,
  // count, datatype, operator and root; 0 = unchecked, always so on
  // kP2pChannel), or nullptr when the communicator has none. A transport that
  // can carry it reads the word when a send or receive is posted (the same
  // thread that executes operations writes it, so no synchronisation is
  // needed), puts the sender's value in the message's framing, and fails a
  // receive whose incoming message carries a different non-zero tag with
  // tideInvalidUsage ("mismatched operation ..."), never writing its bytes.
  // Valid for the life of the connections built with this context.
  virtual const uint32_t* opTag(int channel) const {
    (void)channel;
    return nullptr;
  }
};

// Channels: independent ordered pipes per peer. Collectives use kCollChannel,
// send/recv kP2pChannel, so grouped point-to-point and collectives never
// interleave on one pipe.
constexpr int kCollChannel = 0;
constexpr int kP2pChannel = 1;
constexpr int kNumChannels = 2;

class Transport {
 public:
  virtual ~Transport() = default;
  virtual const char* name() const = 0;
  // Higher wins when several transports can connect a pair.
  virtual int priority() const = 0;
  // Pure function of the two infos (and the environment, which every rank of
  // a job shares), so both sides of a pair pick the same transport.
  virtual bool canConnect(const PeerInfo& me, const PeerInfo& peer) const = 0;
  // Collective over ALL ranks of the communicator, called once per transport
  // in registry order even when `peers` is empty. Builds kNumChannels
  // connections to each rank in `peers` (sorted ascending; it holds this
  // rank itself only for a transport chosen for self, i.e. whose
  // canConnect(me, me) is true and which outranks the others);
  // (*out)[i * kNumChannels + c] is the connection to peers[i] on channel c.
  virtual Status connect(SetupContext& ctx, const std::vector<int>& peers,
                         std::vector<std::unique_ptr<Connection>>* out) = 0;
};

}  // namespace tide
