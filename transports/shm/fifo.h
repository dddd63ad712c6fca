// Single-producer/single-consumer ring of fixed-size slots in shared memory,
// and the message-level pumps that the shm connection runs over it.
//
// Memory layout of one FIFO (all offsets multiples of 64):
//   [head counter, own cache line][slots * slotSize]
// Each slot is [SlotHeader, 16 bytes][data, slotSize - 16 bytes]. The header's
// `stamp` is the slot's absolute sequence number + 1 and is stored last, with
// release semantics, after the data and the rest of the header: the consumer
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
// sequence of messages instead of mixing them up.
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

struct SlotHeader {
  std::atomic<uint64_t> stamp;  // absolute slot number + 1 once filled
  uint32_t msgSeq;              // message this piece belongs to (low 32 bits)
  uint32_t bytes;               // payload bytes in this slot
};
static_assert(sizeof(SlotHeader) == 16);
constexpr size_t kSlotHeaderBytes = sizeof(SlotHeader);

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
  // (<= capacity()) of message number `msgSeq`.
  void commitWrite(size_t bytes, uint32_t msgSeq = 0);

  // ---- Consumer side ----
  // The payload of the oldest filled slot, its byte count and message
  // number, or nullptr when empty.
  const void* readSlot(size_t* bytes, uint32_t* msgSeq = nullptr);
  // Hands the slot returned by readSlot() back to the producer.
  void releaseRead();

 private:
  SlotHeader* header(uint64_t n) const {
    return reinterpret_cast<SlotHeader*>(data_ + (n % slots_) * slotSize_);
  }

  FifoCounter* head_ = nullptr;
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
struct SendOp {
  const char* buf = nullptr;
  size_t bytes = 0;
  size_t off = 0;
  uint32_t seq = 0;  // message number (see the layout comment)
  bool done() const { return off == bytes; }
};

// One queued receive into `buf`, copying or combining (reduce) the pieces.
struct RecvOp {
  char* buf = nullptr;
  size_t bytes = 0;
  size_t off = 0;    // bytes taken out of the FIFO so far
  uint32_t seq = 0;  // message number the pieces must carry
  bool reduce = false;
  RecvReduce rr;
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
// slots consumed. Fails (internal error) without consuming or writing
// anything more when a piece belongs to another message number or does not
// have the size this receive expects, i.e. the two sides posted different
// messages. Never writes outside op.buf[0, op.bytes). Never blocks.
Status pullMessage(FifoView& fifo, RecvOp& op, size_t* slots);

}  // namespace tide::shm
