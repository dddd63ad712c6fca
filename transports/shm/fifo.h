// Single-producer/single-consumer ring of fixed-size slots in shared memory,
// and the message-level pumps that the shm connection runs over it.
//
// Memory layout of one FIFO (all offsets multiples of 64):
//   [head counter, own cache line][tail counter, own cache line]
//   [per-slot byte counts (uint32), rounded up to 64][slots * slotSize data]
// head counts slots consumed (written only by the consumer), tail counts slots
// produced (written only by the producer). A slot holds at most one message
// piece: every message starts at a slot boundary, so a receiver always sees
// pieces that start at message offsets that are multiples of slotSize.
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

// A process-local view of one FIFO. Cheap to copy; does not own the memory.
class FifoView {
 public:
  // Bytes a FIFO of this geometry occupies (a multiple of 64).
  // slotSize must be a non-zero multiple of 64.
  static size_t footprint(uint32_t slots, size_t slotSize);
  // Constructs empty counters in `mem` (64-byte aligned, footprint() bytes).
  // Call once, before any view is used.
  static void initialize(void* mem, uint32_t slots, size_t slotSize);

  FifoView() = default;
  FifoView(void* mem, uint32_t slots, size_t slotSize);

  uint32_t slots() const { return slots_; }
  size_t slotSize() const { return slotSize_; }

  // ---- Producer side ----
  // The next free slot (slotSize() bytes), or nullptr when the ring is full.
  void* writeSlot();
  // Publishes the slot returned by writeSlot() holding `bytes` (<= slotSize()).
  void commitWrite(size_t bytes);

  // ---- Consumer side ----
  // The oldest filled slot and its byte count, or nullptr when empty.
  const void* readSlot(size_t* bytes);
  // Hands the slot returned by readSlot() back to the producer.
  void releaseRead();

 private:
  FifoCounter* head_ = nullptr;
  FifoCounter* tail_ = nullptr;
  uint32_t* sizes_ = nullptr;
  char* data_ = nullptr;
  uint32_t slots_ = 0;
  size_t slotSize_ = 0;
  // Each side's own counter, and a cached (possibly stale) copy of the other.
  uint64_t produced_ = 0;
  uint64_t seenHead_ = 0;
  uint64_t consumed_ = 0;
  uint64_t seenTail_ = 0;
};

// One queued send: `bytes` from `buf`, `off` of them already in the FIFO.
struct SendOp {
  const char* buf = nullptr;
  size_t bytes = 0;
  size_t off = 0;
  bool done() const { return off == bytes; }
};

// One queued receive into `buf`, copying or combining (reduce) the pieces.
struct RecvOp {
  char* buf = nullptr;
  size_t bytes = 0;
  size_t off = 0;  // bytes taken out of the FIFO so far
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
// slots consumed. Fails (internal error) when a piece does not have the size
// this receive expects, i.e. the two sides posted different sizes. Never blocks.
Status pullMessage(FifoView& fifo, RecvOp& op, size_t* slots);

}  // namespace tide::shm
