// Device-independent logic of the verbs transport, kept apart from the
// verbs calls so it is unit-tested on machines without RDMA hardware
// (tests/unit/test_ib_logic.cc). The verbs layer (ib_verbs.h, ib_net.cc) is
// a thin shell that executes what this logic decides.
//
// Data protocol of one connection (one sender, one receiver, nqps RC QPs):
//  - Credits: the receiver owns kIbSlots "clear to send" (CTS) slots. For
//    every posted receive it writes a CtsEntry {addr, rkey, size, seq} into
//    the sender's CTS FIFO (RDMA write, seq written last). It can have at
//    most kIbSlots receives outstanding; a slot's credit returns when that
//    message completes. The sender may only send message k once slot
//    k % kIbSlots holds seq k: a send that finds no credit reports "not yet".
//  - Striping: message k is cut into nqps contiguous shares (aligned to
//    kIbStripeAlign), each sent as RDMA writes of at most `maxWr` bytes on its
//    QP; every QP carries exactly one write-with-immediate per message (0 B
//    when its share is empty) whose immediate is the QP's byte count. RC keeps
//    each QP in order, so the j-th immediate on any QP belongs to message j;
//    the receiver completes message j when all nqps immediates arrived, with
//    size = their sum.
//  - Receive WRs: each QP keeps kIbSlots receive WRs posted; one is consumed
//    per message, so credits bound them too.
// Thread-safety: none; one connection is driven by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "core/status.h"

namespace tide {

constexpr int kIbSlots = 32;             // CTS slots = outstanding receives per connection
constexpr int kIbMaxQps = 16;
constexpr size_t kIbStripeAlign = 128;   // shares start on this boundary
constexpr size_t kIbDefaultMaxWr = 1 << 20;

// ---- Device selection (TIDE_IB_HCA, NCCL syntax) --------------------------------

// "mlx5_0:1,mlx5_1" (prefixes, optional :port), "^mlx5_2" (exclude), "=mlx5_0"
// (exact names). Empty: everything matches.
class HcaFilter {
 public:
  static HcaFilter parse(const std::string& spec);
  bool matches(const std::string& device, int port) const;
  bool empty() const { return items_.empty(); }

 private:
  struct Item {
    std::string name;
    int port = -1;  // -1: any
  };
  std::vector<Item> items_;
  bool exclude_ = false;
  bool exact_ = false;
};

// ---- Striping ---------------------------------------------------------------------

struct IbWr {
  int qp = 0;
  size_t offset = 0;  // into the message
  size_t len = 0;
  bool withImm = false;  // last WR of this QP for the message
  uint32_t imm = 0;      // the QP's byte count (when withImm)
};

// Splits `bytes` over nqps QPs (see above). bytes must fit in 32 bits per
// share; returns WRs ordered QP by QP, each QP's last one with immediate.
Status planStripes(size_t bytes, int nqps, size_t maxWr, std::vector<IbWr>* out);

// ---- Credits (CTS FIFO) ---------------------------------------------------------

struct CtsEntry {
  uint64_t addr;
  uint32_t rkey;
  uint32_t size;   // receive buffer size (bytes, < 4 GiB)
  uint64_t seq;    // written last; valid when == the expected message number + 1
};
static_assert(sizeof(CtsEntry) == 24);

// Receiver side: hands out CTS slots while credits remain.
class CtsProducer {
 public:
  // True when another receive can be posted now (a credit is free).
  bool canPost() const { return posted_ - completed_ < kIbSlots; }
  // Fills *slot and *entry for the next receive; requires canPost().
  uint64_t post(uint64_t addr, uint32_t rkey, uint32_t size, int* slot, CtsEntry* entry);
  // The oldest outstanding receive completed: its credit returns.
  void complete() { ++completed_; }
  uint64_t outstanding() const { return posted_ - completed_; }

 private:
  uint64_t posted_ = 0;
  uint64_t completed_ = 0;
};

// Sender side: reads its local FIFO (which the receiver writes remotely).
class CtsConsumer {
 public:
  explicit CtsConsumer(volatile CtsEntry* fifo) : fifo_(fifo) {}
  // True (and *entry filled) when the receiver granted message next().
  bool peek(CtsEntry* entry) const;
  // Consumes the current slot; call after peek() returned true.
  void pop() { ++next_; }
  uint64_t next() const { return next_; }

 private:
  volatile CtsEntry* fifo_;
  uint64_t next_ = 0;
};

// ---- Completion tracking --------------------------------------------------------

// Receiver: collects immediates per QP and completes messages in order.
class ImmTracker {
 public:
  explicit ImmTracker(int nqps);
  // An immediate arrived on `qp` (RC: in order per QP).
  Status onImm(int qp, uint32_t imm);
  // Completes the oldest message if all QPs delivered; *bytes = its size.
  bool popComplete(uint64_t* bytes);
  // Messages fully or partly received, not yet popped.
  size_t pending() const { return msgs_.size(); }

 private:
  struct Msg {
    int got = 0;
    uint64_t bytes = 0;
  };
  int nqps_;
  uint64_t base_ = 0;              // message number of msgs_.front()
  std::vector<uint64_t> perQp_;    // immediates seen per QP
  std::deque<Msg> msgs_;
};

// Sender: a message is done when each of its signaled WRs completed.
class SendTracker {
 public:
  // Registers message `seq` with `signaled` completions to wait for.
  void add(uint64_t seq, int signaled);
  // A signaled WR of message `seq` completed.
  Status onCompletion(uint64_t seq);
  bool done(uint64_t seq) const;
  // Messages below this are all done.
  uint64_t doneBelow() const { return doneBelow_; }

 private:
  std::deque<int> left_;  // remaining completions of messages doneBelow_..
  uint64_t doneBelow_ = 0;
  uint64_t added_ = 0;
};

// ---- Connection state machine --------------------------------------------------

// Order: Create -> ToInit -> SendHandle and GotHandle (either order) ->
// ToRtr -> ToRts. Fail from anywhere -> Error; Close -> Closing -> Closed.
enum class IbConnState {
  Idle,         // nothing created
  Created,      // QPs created (RESET)
  Init,         // QPs in INIT; local handle ready to send
  HandleSent,   // ours sent, the peer's not yet here
  HandleKnown,  // both handles exchanged
  Rtr,          // QPs in RTR (receive WRs posted)
  Rts,          // QPs in RTS: data may flow
  Closing,
  Closed,
  Error,
};
const char* ibConnStateName(IbConnState s);

enum class IbConnEvent { Create, SendHandle, GotHandle, ToInit, ToRtr, ToRts, Close, Closed, Fail };

class IbConnFsm {
 public:
  IbConnState state() const { return state_; }
  // Applies `ev`; an event not allowed in the current state moves the FSM
  // to Error and returns internalError naming both.
  Status apply(IbConnEvent ev);
  bool ready() const { return state_ == IbConnState::Rts; }
  bool peerHandleKnown() const { return got_; }

 private:
  IbConnState state_ = IbConnState::Idle;
  bool got_ = false;
};

}  // namespace tide
