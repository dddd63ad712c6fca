// Single-producer/single-consumer ring of fixed-size slots in shared memory,
// and the message-level pumps that the shm connection runs over it.
//
// Memory layout of one FIFO (all offsets multiples of 64):
//   [head counter, own line][rendezvous ack counter, own line][slots * slotSize]
// Each slot is [SlotHeader, 16 bytes][data, slotSize - 16 bytes]. The header's
// `stamp` is the slot's absolute sequence number + 1 (low 32 bits) and is
// stored last, with release semantics, after the data and the rest of the
// header (message number, byte count, operation tag): the consumer
// polls the stamp of the slot it expects next (acquire), so for a message of
// up to 48 bytes the flag and the data travel in one cache line and no
// separate tail counter, fence or size table is touched (the low-latency
// path). head counts slots consumed (written only by the consumer) and is
// read by the producer only when its cached copy says the ring is full.
// A slot holds at most one message piece: every message starts at a slot
// boundary, so a receiver always sees pieces that start at message offsets
// that are multiples of capacity(). Every piece carries the number of the
// message it belongs to (per FIFO, counting every posted message including
// empty ones), so a receiver detects a sender that posted a different
// sequence of messages instead of mixing them up, and the sender's operation
// tag (SetupContext::opTag), so a receiver detects a piece of another call.
//
// Single copy (rendezvous): a large message may travel as one slot holding a
// RendezvousDesc (flag kRendezvousBit in `bytes`) instead of its bytes; the
// receiver copies the bytes out of the sender's address space
// (process_vm_readv, see cma.h) straight into its buffer, then stores the
// message's number in the FIFO's ack counter (release). The sender's buffer
// stays in use until that counter reaches its message number.
//
// Thread-safety: exactly one producer view and one consumer view per FIFO,
// possibly in different processes; each view is used by one thread at a time.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/status.h"
#include "core/transport.h"

namespace tide::shm {

constexpr size_t kCacheLine = 64;

inline size_t alignUp(size_t v, size_t a) { return (v + a - 1) / a * a; }

struct alignas(kCacheLine) FifoCounter {
  std::atomic<uint64_t> value{0};
};
static_assert(sizeof(FifoCounter) == kCacheLine);
static_assert(std::atomic<uint64_t>::is_always_lock_free);

// A 32-bit stamp cannot be mistaken for a stale one: the stale value in the
// slot the consumer polls is exactly `slots` lower (mod 2^32), and slots <= 4096.
struct SlotHeader {
  std::atomic<uint32_t> stamp;  // absolute slot number + 1 (low 32 bits) once filled
  uint32_t msgSeq;              // message this piece belongs to (low 32 bits)
  uint32_t bytes;               // payload bytes in this slot, | kRendezvousBit
  uint32_t tag;                 // sender's operation tag (0: unchecked)
};
static_assert(sizeof(SlotHeader) == 16);
static_assert(std::atomic<uint32_t>::is_always_lock_free);
constexpr size_t kSlotHeaderBytes = sizeof(SlotHeader);
constexpr uint32_t kRendezvousBit = 1u << 31;

// Payload of a rendezvous slot: where the receiver finds the message.
struct RendezvousDesc {
  uint64_t addr;    // address of the bytes in the sender's process
  uint64_t bytes;   // message length
  uint64_t msgNum;  // sender's full message number, echoed in the ack counter
  int32_t pid;      // sender's pid (in the receiver's pid namespace)
  uint32_t pad;
};
static_assert(sizeof(RendezvousDesc) <= 48);

// What readSlot() reports about a filled slot.
struct SlotInfo {
  size_t bytes = 0;  // payload bytes (the descriptor's size for a rendezvous slot)
  uint32_t msgSeq = 0;
  uint32_t tag = 0;
  bool rendezvous = false;
};

// A process-local view of one FIFO. Cheap to copy; does not own the memory.
class FifoView {
 public:
  // Bytes a FIFO of this geometry occupies (a multiple of 64).
  // slotSize must be a non-zero multiple of 64 (header included).
  static size_t footprint(uint32_t slots, size_t slotSize);
  // Constructs empty counters in `mem` (64-byte aligned, footprint() bytes).
  // Call once, before any view is used.
  static void initialize(void* mem, uint32_t slots, size_t slotSize);

  FifoView() = default;
  FifoView(void* mem, uint32_t slots, size_t slotSize);

  uint32_t slots() const { return slots_; }
  size_t slotSize() const { return slotSize_; }
  // Payload bytes per slot (slotSize() minus the header).
  size_t capacity() const { return slotSize_ - kSlotHeaderBytes; }

  // ---- Producer side ----
  // The payload area (capacity() bytes) of the next free slot, or nullptr
  // when the ring is full.
  void* writeSlot();
  // Publishes the slot returned by writeSlot() holding `bytes`
  // (<= capacity()) of message number `msgSeq` with operation tag `tag`;
  // `rendezvous`: the payload is a RendezvousDesc.
  void commitWrite(size_t bytes, uint32_t msgSeq = 0, uint32_t tag = 0, bool rendezvous = false);
  // Highest message number whose rendezvous the consumer completed (acquire).
  uint64_t rendezvousAcked() const { return ack_->value.load(std::memory_order_acquire); }

  // ---- Consumer side ----
  // The payload of the oldest filled slot, its byte count and message
  // number, or nullptr when empty.
  const void* readSlot(size_t* bytes, uint32_t* msgSeq = nullptr);
  const void* readSlot(SlotInfo* info);
  // Hands the slot returned by readSlot() back to the producer.
  void releaseRead();
  // Reports rendezvous message `msgNum` complete (release store).
  void ackRendezvous(uint64_t msgNum) { ack_->value.store(msgNum, std::memory_order_release); }

 private:
  SlotHeader* header(uint64_t n) const {
    return reinterpret_cast<SlotHeader*>(data_ + (n % slots_) * slotSize_);
  }

  FifoCounter* head_ = nullptr;
  FifoCounter* ack_ = nullptr;
  char* data_ = nullptr;
  uint32_t slots_ = 0;
  size_t slotSize_ = 0;
  // Each side's own counter; the producer's cached (possibly stale) copy of
  // head.
  uint64_t produced_ = 0;
  uint64_t seenHead_ = 0;
  uint64_t consumed_ = 0;
};

// One queued send: `bytes` from `buf`, `off` of them already in the FIFO.
// With `rendezvous`, one descriptor slot stands for all of them (then `pid`
// and `msgNum` fill the descriptor).
struct SendOp {
  const char* buf = nullptr;
  size_t bytes = 0;
  size_t off = 0;
  uint32_t seq = 0;  // message number (see the layout comment)
  uint32_t tag = 0;  // operation tag carried by every piece
  bool rendezvous = false;
  int32_t pid = 0;
  uint64_t msgNum = 0;
  bool done() const { return off == bytes; }
};

// One queued receive into `buf`, copying or combining (reduce) the pieces.
struct RecvOp {
  char* buf = nullptr;
  size_t bytes = 0;
  size_t off = 0;    // bytes taken out of the FIFO so far
  uint32_t seq = 0;  // message number the pieces must carry
  uint32_t tag = 0;  // operation tag the pieces must carry (0: unchecked)
  int peer = -1;     // sender's rank, for messages
  bool reduce = false;
  RecvReduce rr;
  // Rendezvous in progress (desc.bytes == bytes, `off` bytes pulled).
  bool pulling = false;
  RendezvousDesc desc{};
  // Cache-sized buffer for reducing rendezvous receives (owned by the caller,
  // bounceBytes a multiple of rr.elemSize); null: pulls are not allowed.
  unsigned char* bounce = nullptr;
  size_t bounceBytes = 0;
  // Start of an element that straddles two slots (only when slotSize is
  // not a multiple of rr.elemSize).
  std::vector<unsigned char> carry;
  size_t carryLen = 0;
  bool done() const { return off == bytes; }
};

// Copies as many pieces of `op` as there are free slots. Returns the number
// of slots filled. Never blocks.
size_t pushMessage(FifoView& fifo, SendOp& op);

// Takes as many pieces of `op` as are available. Sets *slots to the number of
// slots consumed. Fails without consuming or writing anything more when a
// piece carries a different non-zero operation tag (invalid usage: the ranks
// called different collectives), belongs to another message number or does
// not have the size this receive expects (internal error). A rendezvous
// descriptor is consumed at once and its bytes are pulled with cmaRead, at
// most maxPull bytes per call; when the last byte is in, the FIFO's ack
// counter is set (callers ring the sender when *slots > 0 or *acked).
// Never writes outside op.buf[0, op.bytes). Does not wait for the peer.
Status pullMessage(FifoView& fifo, RecvOp& op, size_t* slots, bool* acked = nullptr,
                   size_t maxPull = 4u << 20);

}  // namespace tide::shm
