// Device-independent logic of the verbs transport, kept apart from the
// verbs calls so it is unit-tested on machines without RDMA hardware
// (tests/unit/test_ib_logic.cc, test_ib_net.cc). The engines (ib_engine.h)
// run it per connection; the verbs layer (ib_verbs.h)
// and the net (ib_net_internal.h) are thin shells that execute what this
// logic decides.
//
// Data protocol of one connection (one sender, one receiver, nqps RC QPs):
//  - Credits: the receiver owns kIbSlots "clear to send" (CTS) slots. For
//    every posted receive it writes a CtsEntry {addr, rkey, size, tag, seq}
//    into slot seq % kIbSlots of the sender's CTS FIFO with an RDMA write
//    with immediate on QP 0 (immediate = the low 32 bits of seq). The
//    sender learns of the grant from that completion (so a sleeping sender
//    wakes up, and the entry is visible when the completion is seen) and
//    double-checks seq. At most kIbSlots receives are outstanding; a slot's
//    credit returns when that message completes. The sender sends message k
//    only once slot k % kIbSlots holds seq k + 1; until then it is queued.
//  - Checks: the sender compares its message with the grant. A message
//    larger than the receive, or with another tag, is not written: the
//    sender sends the "rejected" immediates instead (ibImmEncode) and the
//    receiver fails that receive with tideInvalidUsage.
//  - Striping: message k is cut into nqps contiguous shares (aligned to
//    kIbStripeAlign), each sent as RDMA writes of at most `maxWr` bytes on its
//    QP; every QP carries exactly one write-with-immediate per message (0 B
//    when its share is empty) whose immediate is the QP's byte count. RC keeps
//    each QP in order, so the j-th immediate on any QP belongs to message j;
//    the receiver completes message j when all nqps immediates arrived, with
//    size = their sum.
//  - Receive WRs: each QP keeps kIbSlots receive WRs posted; one is consumed
//    per message, so credits bound them too (no RNR waits).
//  - Send queues: only the write-with-immediate of each QP is signaled; its
//    completion retires that QP's earlier unsignaled WRs of the message.
//    ibWrBytes bounds WRs per QP per message so kIbSlots messages fit.
// Thread-safety: none; one connection is driven by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "core/status.h"

namespace tide {

constexpr int kIbSlots = 32;  // CTS slots = outstanding receives per connection
constexpr int kIbMaxQps = 16;
constexpr size_t kIbStripeAlign = 128;  // shares start on this boundary
constexpr size_t kIbDefaultMaxWr = 1 << 20;

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
  uint32_t size;  // receive buffer size (bytes, < 4 GiB)
  int32_t tag;    // the tag the receive expects
  uint32_t reserved;
  uint64_t seq;  // written last; valid when == the expected message number + 1
};
static_assert(sizeof(CtsEntry) == 32);

// Receiver side: hands out CTS slots while credits remain.
class CtsProducer {
 public:
  // True when another receive can be posted now (a credit is free).
  bool canPost() const { return posted_ - completed_ < kIbSlots; }
  // Fills *slot and *entry for the next receive; requires canPost().
  uint64_t post(uint64_t addr, uint32_t rkey, uint32_t size, int32_t tag, int* slot,
                CtsEntry* entry);
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
  // Completes the oldest message if all QPs delivered; *bytes = its size
  // and *rejected (when not NULL) whether the sender refused it (see
  // ibImmEncode), in which case *bytes is the sender's message size.
  bool popComplete(uint64_t* bytes, bool* rejected = nullptr);
  // Messages fully or partly received, not yet popped.
  size_t pending() const { return msgs_.size(); }

 private:
  struct Msg {
    int got = 0;
    uint64_t bytes = 0;
    bool rejected = false;
  };
  int nqps_;
  uint64_t base_ = 0;            // message number of msgs_.front()
  std::vector<uint64_t> perQp_;  // immediates seen per QP
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

// ---- Immediates, work-request ids, sizes --------------------------------------

// Immediate of a data write: bit 31 set = the sender rejected the message
// (too large for the receive, or another tag), bits 0..30 = this QP's byte
// count (rejected: the sender's message size, saturated).
constexpr uint32_t kIbImmRejected = 0x80000000u;
constexpr uint32_t kIbImmBytesMask = 0x7fffffffu;
uint32_t ibImmEncode(uint64_t bytes, bool rejected);
void ibImmDecode(uint32_t imm, uint64_t* bytes, bool* rejected);

// What a work completion belongs to; packed into the 64-bit wr_id.
enum class IbWrKind : uint8_t {
  Data = 1,      // sender: the signaled write-with-immediate of message `seq` on `qp`
  Cts = 2,       // receiver: the CTS write of receive `seq`
  RecvData = 3,  // receiver: a receive WR on `qp` (consumed by a data immediate)
  RecvCts = 4,   // sender: a receive WR on QP 0 (consumed by a CTS immediate)
};
struct IbWrId {
  IbWrKind kind;
  int qp;
  uint64_t seq;  // 48 bits
};
uint64_t ibWrIdEncode(IbWrKind kind, int qp, uint64_t seq);
// False for a wr_id this net never posts.
bool ibWrIdDecode(uint64_t wrId, IbWrId* out);

// Largest WR of a message on one QP: at least `chunk` bytes, large enough
// that one QP's share of a `bytes` message needs at most `maxWrsPerMsg`
// WRs, a multiple of 4 KiB.
size_t ibWrBytes(size_t bytes, int nqps, size_t chunk, int maxWrsPerMsg);

// Why the sender refuses a message against the grant `cts` ("" when it
// fits: size <= cts.size and tag == cts.tag).
std::string ibCtsMismatch(const CtsEntry& cts, uint64_t msgSeq, size_t size, int tag);

// ---- GID selection ----------------------------------------------------------------

enum class IbGidType { Ib, RoceV1, RoceV2 };
struct IbGidEntry {
  int index = 0;
  IbGidType type = IbGidType::Ib;
  uint8_t raw[16] = {};
};
// RoCE: `want` >= 0 picks that index (it must be in the table); -1 picks the
// first RoCE v2 entry with an IPv4-mapped address (::ffff:a.b.c.d), else the
// first RoCE v2 entry that is not link-local (fe80::/10), else the first
// IPv4-mapped entry, else the first entry. InfiniBand ports (roce == false):
// `want` if given, else index 0. Returns the table position, or -1.
int ibSelectGid(const std::vector<IbGidEntry>& table, int64_t want, bool roce);

// ---- Completion errors ------------------------------------------------------------

// Values of enum ibv_wc_status that ibCompletionError tells apart (checked
// against <infiniband/verbs.h> by static_asserts in ib_verbs.cc).
constexpr int kIbWcSuccess = 0;
constexpr int kIbWcLocLenErr = 1;
constexpr int kIbWcLocQpOpErr = 2;
constexpr int kIbWcLocProtErr = 4;
constexpr int kIbWcWrFlushErr = 5;
constexpr int kIbWcRetryExcErr = 12;
constexpr int kIbWcRnrRetryExcErr = 13;
// Status for a failed completion: tideRemoteError ("ib net: <what> to/from
// <peer> failed: <statusStr> (status n, vendor error 0x..)") for transport,
// remote and flush errors; tideSystemError for local length/protection/QP
// operation errors (a bug or a registration problem on this side).
Status ibCompletionError(int status, const char* statusStr, uint32_t vendorErr,
                         const std::string& peer, const char* what);

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
