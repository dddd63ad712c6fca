// SPSC slot ring and message pumps (see fifo.h for the layout and contracts).
#include "transports/shm/fifo.h"

#include <algorithm>
#include <cstring>
#include <new>

namespace tide::shm {

size_t FifoView::footprint(uint32_t slots, size_t slotSize) {
  return sizeof(FifoCounter) + static_cast<size_t>(slots) * slotSize;
}

void FifoView::initialize(void* mem, uint32_t slots, size_t slotSize) {
  auto* counter = static_cast<FifoCounter*>(mem);
  new (counter) FifoCounter();
  char* data = static_cast<char*>(mem) + sizeof(FifoCounter);
  for (uint32_t i = 0; i < slots; ++i) {
    auto* h = new (data + static_cast<size_t>(i) * slotSize) SlotHeader;
    h->stamp.store(0, std::memory_order_relaxed);
    h->msgSeq = 0;
    h->bytes = 0;
  }
  std::atomic_thread_fence(std::memory_order_release);
}

FifoView::FifoView(void* mem, uint32_t slots, size_t slotSize)
    : slots_(slots), slotSize_(slotSize) {
  char* base = static_cast<char*>(mem);
  head_ = reinterpret_cast<FifoCounter*>(base);
  data_ = base + sizeof(FifoCounter);
  // A view may be created after traffic started (e.g. in tests): start from
  // the shared state, not from zero. Filled slots not yet consumed have
  // stamps above head; the producer resumes after the last of them.
  consumed_ = head_->value.load(std::memory_order_acquire);
  seenHead_ = consumed_;
  produced_ = consumed_;
  while (produced_ - consumed_ < slots_ &&
         header(produced_)->stamp.load(std::memory_order_acquire) == produced_ + 1) {
    ++produced_;
  }
}

void* FifoView::writeSlot() {
  if (produced_ - seenHead_ >= slots_) {
    seenHead_ = head_->value.load(std::memory_order_acquire);
    if (produced_ - seenHead_ >= slots_) return nullptr;
  }
  return reinterpret_cast<char*>(header(produced_)) + kSlotHeaderBytes;
}

void FifoView::commitWrite(size_t bytes, uint32_t msgSeq) {
  SlotHeader* h = header(produced_);
  h->msgSeq = msgSeq;
  h->bytes = static_cast<uint32_t>(bytes);
  ++produced_;
  h->stamp.store(produced_, std::memory_order_release);
}

const void* FifoView::readSlot(size_t* bytes, uint32_t* msgSeq) {
  const SlotHeader* h = header(consumed_);
  if (h->stamp.load(std::memory_order_acquire) != consumed_ + 1) return nullptr;
  *bytes = h->bytes;
  if (msgSeq != nullptr) *msgSeq = h->msgSeq;
  return reinterpret_cast<const char*>(h) + kSlotHeaderBytes;
}

void FifoView::releaseRead() {
  ++consumed_;
  head_->value.store(consumed_, std::memory_order_release);
}

size_t pushMessage(FifoView& fifo, SendOp& op) {
  size_t filled = 0;
  while (!op.done()) {
    void* slot = fifo.writeSlot();
    if (slot == nullptr) break;
    size_t n = std::min(fifo.capacity(), op.bytes - op.off);
    std::memcpy(slot, op.buf + op.off, n);
    fifo.commitWrite(n, op.seq);
    op.off += n;
    ++filled;
  }
  return filled;
}

namespace {

// Combines one piece of `n` bytes that belongs at message offset `base`.
void reducePiece(RecvOp& op, const unsigned char* in, size_t n, size_t base) {
  const size_t e = op.rr.elemSize;
  const char* src = static_cast<const char*>(op.rr.src);
  size_t pos = 0;
  if (op.carryLen > 0) {
    size_t take = std::min(e - op.carryLen, n);
    std::memcpy(op.carry.data() + op.carryLen, in, take);
    op.carryLen += take;
    pos = take;
    if (op.carryLen == e) {
      size_t start = base + take - e;
      op.rr.fn(op.buf + start, src + start, op.carry.data(), 1);
      op.carryLen = 0;
    }
  }
  size_t whole = (n - pos) / e;
  if (whole > 0) {
    op.rr.fn(op.buf + base + pos, src + base + pos, in + pos, whole);
    pos += whole * e;
  }
  if (pos < n) {
    op.carry.resize(e);
    std::memcpy(op.carry.data(), in + pos, n - pos);
    op.carryLen = n - pos;
  }
}

}  // namespace

Status pullMessage(FifoView& fifo, RecvOp& op, size_t* slots) {
  *slots = 0;
  while (!op.done()) {
    size_t n = 0;
    uint32_t seq = 0;
    const void* slot = fifo.readSlot(&n, &seq);
    if (slot == nullptr) break;
    if (seq != op.seq) {
      return internalError(
          "shm: message order mismatch (expected a piece of message #%u, %zu bytes, at offset "
          "%zu; got one of message #%u, %zu bytes): the two ranks issued different operations",
          op.seq, op.bytes, op.off, seq, n);
    }
    size_t expect = std::min(fifo.capacity(), op.bytes - op.off);
    if (n != expect) {
      return internalError(
          "shm: message size mismatch (receive of %zu bytes got a %zu-byte piece at offset %zu, "
          "expected %zu): the two sides posted different sizes",
          op.bytes, n, op.off, expect);
    }
    if (op.reduce) {
      reducePiece(op, static_cast<const unsigned char*>(slot), n, op.off);
    } else {
      std::memcpy(op.buf + op.off, slot, n);
    }
    fifo.releaseRead();
    op.off += n;
    ++*slots;
  }
  return Status::Ok();
}

}  // namespace tide::shm
