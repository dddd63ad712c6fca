// The per-connection protocol engines of the verbs net (protocol in
// ib_logic.h), free of verbs so the code the net runs is unit-tested without
// a device (tests/unit/test_ib_net.cc drives a sender and a receiver over an
// in-memory wire). The net (ib_data.cc) feeds them work completions from its
// CQ and lets them post through an IbPoster over ibv_post_send/recv.
//
// Contracts: every call returns promptly. A non-OK Status from any call means
// the connection is broken (the caller fails the comm with it); the engines
// keep no state worth using afterwards. Messages (IbMsg) are owned by the
// caller and must stay valid until done or forget(). Thread-safety: none;
// one connection is driven by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <utility>

#include "core/status.h"
#include "transports/ib/ib_logic.h"

namespace tide {

// Executes work requests (verbs in the net, memory in tests).
class IbPoster {
 public:
  virtual ~IbPoster() = default;
  // RDMA write of [local, local+len) to (remote, rkey); with immediate when
  // withImm; a completion is reported when signaled (or on failure).
  virtual Status write(int qp, uint64_t wrId, const void* local, uint32_t lkey, size_t len,
                       uint64_t remote, uint32_t rkey, bool withImm, uint32_t imm,
                       bool signaled) = 0;
  // A zero-length receive WR (consumed by a write with immediate).
  virtual Status recv(int qp, uint64_t wrId) = 0;
};

// One work completion, as the CQ reported it.
struct IbCompletion {
  uint64_t wrId = 0;
  int status = kIbWcSuccess;
  const char* statusStr = nullptr;  // ibv_wc_status_str
  uint32_t vendorErr = 0;
  bool hasImm = false;
  uint32_t imm = 0;  // host byte order
};

// One isend or irecv.
struct IbMsg {
  uint8_t* buf = nullptr;
  size_t size = 0;  // send: bytes; receive: capacity
  int tag = 0;
  uint32_t lkey = 0, rkey = 0;
  uint64_t seq = 0;     // assigned by the engine
  bool posted = false;  // send: WRs posted
  bool done = false;
  uint64_t bytes = 0;  // receive: the message's size once done
};

// Sending side. `fifo` is the CTS FIFO (kIbSlots entries) the receiver
// writes; `wrsPerMsg` bounds WRs per QP per message (send queue depth /
// kIbSlots).
class IbSender {
 public:
  IbSender(int nqps, int wrsPerMsg, volatile CtsEntry* fifo, IbPoster* poster, std::string peer);
  // Posts the kIbSlots grant receives on QP 0 (before the peer can write).
  Status start();
  void queue(IbMsg* m);
  Status onCompletion(const IbCompletion& wc);
  // Posts messages whose grant arrived; marks acknowledged ones done.
  Status progress();
  // Drops a message from the queue (its request failed or was cancelled).
  void forget(IbMsg* m);
  size_t queued() const { return queue_.size(); }
  void setPeerName(std::string peer) { peer_ = std::move(peer); }

 private:
  int nqps_, wrsPerMsg_;
  IbPoster* poster_;
  std::string peer_;
  CtsConsumer consumer_;
  SendTracker tracker_;
  std::deque<IbMsg*> queue_;  // in order: unposted ones after posted ones
  uint64_t nextSeq_ = 0;
  uint64_t grantsArrived_ = 0;
  uint64_t recvsPosted_ = 0;
};

// Receiving side. `staging` (kIbSlots entries, registered with
// stagingLkey) holds the grants while they are written to the sender's
// FIFO at (peerFifo, peerRkey); at most maxGrantsInFlight grant writes are
// unacknowledged (its send queue depth).
class IbReceiver {
 public:
  IbReceiver(int nqps, CtsEntry* staging, uint32_t stagingLkey, uint64_t peerFifo,
             uint32_t peerRkey, int maxGrantsInFlight, IbPoster* poster, std::string peer);
  // Posts kIbSlots data receives on every QP.
  Status start();
  // A credit and a send-queue slot are free.
  bool canPost() const;
  // Grants `m` to the sender; requires canPost().
  Status post(IbMsg* m);
  Status onCompletion(const IbCompletion& wc);
  // Completes arrived messages in order. A message the sender rejected (too
  // large, other tag) stays not done and the call returns tideInvalidUsage.
  Status progress();
  void forget(IbMsg* m);
  // Set once the peer's connection info is known (before any post()).
  void setPeerFifo(uint64_t addr, uint32_t rkey) {
    peerFifo_ = addr;
    peerRkey_ = rkey;
  }
  void setPeerName(std::string peer) { peer_ = std::move(peer); }

 private:
  int nqps_;
  CtsEntry* staging_;
  uint32_t stagingLkey_;
  uint64_t peerFifo_;
  uint32_t peerRkey_;
  int maxGrants_;
  IbPoster* poster_;
  std::string peer_;
  CtsProducer producer_;
  ImmTracker imms_;
  std::deque<IbMsg*> posted_;
  int grantsInFlight_ = 0;
  uint64_t recvsPosted_ = 0;
};

}  // namespace tide
