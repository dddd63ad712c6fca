// SPSC slot ring and message pumps (see fifo.h for the layout and contracts).
#include "transports/shm/fifo.h"

#include <algorithm>
#include <cstring>
#include <new>

namespace tide::shm {

namespace {

size_t sizesBytes(uint32_t slots) { return alignUp(slots * sizeof(uint32_t), kCacheLine); }

}  // namespace

size_t FifoView::footprint(uint32_t slots, size_t slotSize) {
  return 2 * sizeof(FifoCounter) + sizesBytes(slots) + static_cast<size_t>(slots) * slotSize;
}

void FifoView::initialize(void* mem, uint32_t slots, size_t /*slotSize*/) {
  auto* counters = static_cast<FifoCounter*>(mem);
  new (&counters[0]) FifoCounter();
  new (&counters[1]) FifoCounter();
  std::memset(reinterpret_cast<char*>(mem) + 2 * sizeof(FifoCounter), 0, sizesBytes(slots));
}

FifoView::FifoView(void* mem, uint32_t slots, size_t slotSize)
    : slots_(slots), slotSize_(slotSize) {
  char* base = static_cast<char*>(mem);
  head_ = reinterpret_cast<FifoCounter*>(base);
  tail_ = reinterpret_cast<FifoCounter*>(base + sizeof(FifoCounter));
  sizes_ = reinterpret_cast<uint32_t*>(base + 2 * sizeof(FifoCounter));
  data_ = base + 2 * sizeof(FifoCounter) + sizesBytes(slots);
  // A view may be created after traffic started (e.g. in tests): start from
  // the shared counters, not from zero.
  produced_ = tail_->value.load(std::memory_order_acquire);
  seenTail_ = produced_;
  consumed_ = head_->value.load(std::memory_order_acquire);
  seenHead_ = consumed_;
}

void* FifoView::writeSlot() {
  if (produced_ - seenHead_ >= slots_) {
    seenHead_ = head_->value.load(std::memory_order_acquire);
    if (produced_ - seenHead_ >= slots_) return nullptr;
  }
  return data_ + (produced_ % slots_) * slotSize_;
}

void FifoView::commitWrite(size_t bytes) {
  sizes_[produced_ % slots_] = static_cast<uint32_t>(bytes);
  ++produced_;
  tail_->value.store(produced_, std::memory_order_release);
}

const void* FifoView::readSlot(size_t* bytes) {
  if (consumed_ == seenTail_) {
    seenTail_ = tail_->value.load(std::memory_order_acquire);
    if (consumed_ == seenTail_) return nullptr;
  }
  size_t idx = consumed_ % slots_;
  *bytes = sizes_[idx];
  return data_ + idx * slotSize_;
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
    size_t n = std::min(fifo.slotSize(), op.bytes - op.off);
    std::memcpy(slot, op.buf + op.off, n);
    fifo.commitWrite(n);
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
    const void* slot = fifo.readSlot(&n);
    if (slot == nullptr) break;
    size_t expect = std::min(fifo.slotSize(), op.bytes - op.off);
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
