// A core Connection (core/transport.h) over one pair of net comms
// (include/tide/net.h): sendComm to the peer, recvComm from it.
//
// Each posted transfer of n > 0 bytes is cut into chunks of `chunk` bytes
// (both sides cut identically: the setup agrees `chunk`, see agreedChunk(),
// and sizes agree), each
// chunk one net message whose tag is (message seq << 16 | chunk index) mixed
// with the operation tag the core had set when the transfer was posted
// (SetupContext::opTag; 0 on the point-to-point channel), so a mismatched
// call (other collective, count, datatype, operator, root or sequence) shows
// as a tag or size error, reported as tideInvalidUsage "mismatched operation",
// before any of its bytes are written (a FIFO net checks the tag first; a
// tag-matching net leaves it unmatched, then the no-progress timeout ends the
// call). Up to
// `inflight` chunks per direction are outstanding at once. A reducing
// receive lands in a bounce buffer and is combined into place when its
// chunk completes (chunk is a multiple of 4096, hence of any element size).
//
// Device memory (GPUDirect RDMA): with setDevicePtrSupport() bits from the
// net's properties, postSendMem/postRecvMem accept MemType::Device. Each such
// transfer registers its whole buffer with regMr on its comm when its first
// chunk is posted (type TIDE_NET_PTR_DMABUF when the net offers it, else
// TIDE_NET_PTR_DEVICE; a failed dma-buf registration falls back to DEVICE
// when offered), passes that mhandle with every chunk, and deregisters it
// when the transfer completes (no registration cache: the net may keep its
// own). Host transfers pass no mhandle. A reducing receive into device memory
// is refused (tideInternalError).
//
// Errors: the first error is sticky; fail() then deregisters and closes both
// comms at once (cancelling every outstanding request, net.h), so no
// receive can write a user buffer after its operation returned the error.
//
// Threading: one thread at a time (transport.h). Owns the two comms and
// closes them on destruction or failure (closing is bounded; see net.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "core/transport.h"
#include "tide/net.h"

namespace tide {

class NetConnection final : public Connection {
 public:
  // opTag: the word the core rewrites before each operation on `channel`
  // (read at every post; may be null: untagged). Must outlive the connection.
  NetConnection(const tideNet_v1_t* net, void* sendComm, void* recvComm, int peer, int channel,
                size_t chunk, int inflight, const uint32_t* opTag = nullptr);
  ~NetConnection() override;

  Status postSend(const void* buf, size_t bytes, uint64_t* ticket) override;
  Status postRecv(void* buf, size_t bytes, const RecvReduce* rr, uint64_t* ticket) override;
  Status progress(bool* moved) override;
  uint64_t sendsDone() const override { return sendsDone_; }
  uint64_t recvsDone() const override { return recvsDone_; }
  int pollFd() const override;
  bool busy() const override { return !sends_.empty() || !recvs_.empty(); }
  int devicePtrSupport() const override { return devicePtr_; }
  // Bounce buffers allocated / back in the pool (for tests: every one is
  // back once no reducing receive is outstanding, also after a failure).
  size_t bouncesAllocated() const { return bounce_.size(); }
  size_t bouncesFree() const { return freeBounce_.size(); }
  Status postSendMem(const void* buf, size_t bytes, MemType mem, uint64_t* ticket) override;
  Status postRecvMem(void* buf, size_t bytes, const RecvReduce* rr, MemType mem,
                     uint64_t* ticket) override;
  // The TIDE_NET_PTR_DEVICE / TIDE_NET_PTR_DMABUF bits of the net's
  // ptrSupport (others are ignored). Call before the first post.
  void setDevicePtrSupport(int bits) {
    devicePtr_ = bits & (TIDE_NET_PTR_DEVICE | TIDE_NET_PTR_DMABUF);
  }

  // Chunks are multiples of kMinChunk and at least kMinChunk bytes.
  static constexpr size_t kMinChunk = 4096;
  // The chunk both ends of a connection use, from each end's TIDE_NET_CHUNKSIZE
  // and net maxSize (0: no limit): the smallest of them, rounded down to a
  // multiple of kMinChunk, at least kMinChunk (a maxSize below that must be
  // refused by the caller). Symmetric in its two ends.
  static size_t agreedChunk(size_t chunkA, size_t maxA, size_t chunkB, size_t maxB) {
    size_t c = chunkA < chunkB ? chunkA : chunkB;
    if (maxA != 0 && maxA < c) c = maxA;
    if (maxB != 0 && maxB < c) c = maxB;
    c = c / kMinChunk * kMinChunk;
    return c < kMinChunk ? kMinChunk : c;
  }
  // Tag of chunk `idx` of message `seq` (exposed for tests).
  static int chunkTag(uint32_t seq, size_t idx) {
    return static_cast<int>(((seq & 0x7fffu) << 16) | (idx & 0xffffu));
  }
  // Net tag of chunk `idx` of message `seq` posted under operation tag `op`:
  // chunkTag() when op == 0, else mixed with a 31-bit spread of op. Both
  // sides compute the same value exactly when their op tags agree.
  static int netTag(uint32_t op, uint32_t seq, size_t idx) {
    uint32_t spread = op == 0 ? 0u : (op * 0x9e3779b1u) ^ (op >> 15);
    return static_cast<int>((static_cast<uint32_t>(chunkTag(seq, idx)) ^ spread) & 0x7fffffffu);
  }

 private:
  struct Op {
    uint8_t* buf;
    size_t bytes;
    uint32_t seq;
    uint32_t tag = 0;     // operation tag when posted
    size_t posted = 0;    // bytes handed to the net
    int outstanding = 0;  // chunks handed over and not complete
    bool reduce = false;
    RecvReduce rr{};
    bool device = false;      // MemType::Device: registered before its first chunk
    void* mhandle = nullptr;  // registration on this direction's comm, or null
  };
  struct InFlight {
    void* req;
    Op* op;  // stable: ops live in deques and are popped only when complete
    size_t offset;
    size_t len;
    int bounce;  // index into bounce_ (reducing receive) or -1
  };

  Status progressSends(bool* moved);
  Status progressRecvs(bool* moved);
  Status fail(const Status& s);
  Status enqueueSend(const void* buf, size_t bytes, bool device, uint64_t* ticket);
  Status enqueueRecv(void* buf, size_t bytes, const RecvReduce* rr, bool device, uint64_t* ticket);
  // Registers op's buffer on `comm` (see the file comment).
  Status registerOp(void* comm, Op& op);
  void deregisterOp(void* comm, Op& op);
  // Deregisters every op's mhandle and closes both comms (idempotent).
  void shutdownNet();

  const tideNet_v1_t* net_;
  void* sendComm_;
  void* recvComm_;
  int peer_;
  int channel_;
  size_t chunk_;
  size_t inflight_;
  const uint32_t* opTag_;
  int devicePtr_ = 0;
  bool gdrLogged_ = false;  // the first device registration was logged
  int sendFd_ = -1, recvFd_ = -1;
  // Both directions' fds, for waiting on sends and receives at once (made on
  // first need when the net gives two different fds; -2: could not be made).
  mutable int bothFd_ = -1;
  Status error_;

  std::deque<Op> sends_, recvs_;
  std::deque<InFlight> sendReqs_, recvReqs_;
  size_t sendCursor_ = 0, recvCursor_ = 0;  // first op in the deque with bytes left to post
  uint64_t sendsPosted_ = 0, sendsDone_ = 0, recvsPosted_ = 0, recvsDone_ = 0;
  uint32_t sendSeq_ = 0, recvSeq_ = 0;
  std::vector<std::unique_ptr<uint8_t[]>> bounce_;
  std::vector<int> freeBounce_;
};

}  // namespace tide
