// SPSC slot ring and message pumps (see fifo.h for the layout and contracts).
#include "transports/shm/fifo.h"

#include <algorithm>
#include <cstring>
#include <new>

#include "transports/shm/cma.h"

namespace tide::shm {

size_t FifoView::footprint(uint32_t slots, size_t slotSize) {
  return 2 * sizeof(FifoCounter) + static_cast<size_t>(slots) * slotSize;
}

void FifoView::initialize(void* mem, uint32_t slots, size_t slotSize) {
  auto* counter = static_cast<FifoCounter*>(mem);
  new (counter) FifoCounter();
  new (counter + 1) FifoCounter();
  char* data = static_cast<char*>(mem) + 2 * sizeof(FifoCounter);
  for (uint32_t i = 0; i < slots; ++i) {
    auto* h = new (data + static_cast<size_t>(i) * slotSize) SlotHeader;
    h->stamp.store(0, std::memory_order_relaxed);
    h->msgSeq = 0;
    h->bytes = 0;
    h->tag = 0;
  }
  std::atomic_thread_fence(std::memory_order_release);
}

FifoView::FifoView(void* mem, uint32_t slots, size_t slotSize)
    : slots_(slots), slotSize_(slotSize) {
  char* base = static_cast<char*>(mem);
  head_ = reinterpret_cast<FifoCounter*>(base);
  ack_ = head_ + 1;
  data_ = base + 2 * sizeof(FifoCounter);
  // A view may be created after traffic started (e.g. in tests): start from
  // the shared state, not from zero. Filled slots not yet consumed have
  // stamps above head; the producer resumes after the last of them.
  consumed_ = head_->value.load(std::memory_order_acquire);
  seenHead_ = consumed_;
  produced_ = consumed_;
  while (produced_ - consumed_ < slots_ &&
         header(produced_)->stamp.load(std::memory_order_acquire) ==
             static_cast<uint32_t>(produced_ + 1)) {
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

void FifoView::commitWrite(size_t bytes, uint32_t msgSeq, uint32_t tag, bool rendezvous) {
  SlotHeader* h = header(produced_);
  h->msgSeq = msgSeq;
  h->bytes = static_cast<uint32_t>(bytes) | (rendezvous ? kRendezvousBit : 0);
  h->tag = tag;
  ++produced_;
  h->stamp.store(static_cast<uint32_t>(produced_), std::memory_order_release);
}

const void* FifoView::readSlot(SlotInfo* info) {
  const SlotHeader* h = header(consumed_);
  if (h->stamp.load(std::memory_order_acquire) != static_cast<uint32_t>(consumed_ + 1)) {
    return nullptr;
  }
  info->bytes = h->bytes & ~kRendezvousBit;
  info->rendezvous = (h->bytes & kRendezvousBit) != 0;
  info->msgSeq = h->msgSeq;
  info->tag = h->tag;
  return reinterpret_cast<const char*>(h) + kSlotHeaderBytes;
}

const void* FifoView::readSlot(size_t* bytes, uint32_t* msgSeq) {
  SlotInfo info;
  const void* p = readSlot(&info);
  if (p == nullptr) return nullptr;
  *bytes = info.bytes;
  if (msgSeq != nullptr) *msgSeq = info.msgSeq;
  return p;
}

void FifoView::releaseRead() {
  ++consumed_;
  head_->value.store(consumed_, std::memory_order_release);
}

size_t pushMessage(FifoView& fifo, SendOp& op) {
  size_t filled = 0;
  if (op.rendezvous && !op.done()) {
    void* slot = fifo.writeSlot();
    if (slot == nullptr) return 0;
    RendezvousDesc d{reinterpret_cast<uint64_t>(op.buf), op.bytes, op.msgNum, op.pid, 0};
    std::memcpy(slot, &d, sizeof(d));
    fifo.commitWrite(sizeof(d), op.seq, op.tag, true);
    op.off = op.bytes;
    return 1;
  }
  while (!op.done()) {
    void* slot = fifo.writeSlot();
    if (slot == nullptr) break;
    size_t n = std::min(fifo.capacity(), op.bytes - op.off);
    std::memcpy(slot, op.buf + op.off, n);
    fifo.commitWrite(n, op.seq, op.tag);
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

namespace {

// Pulls up to maxPull bytes of a rendezvous message; acks when complete.
Status pullRendezvous(FifoView& fifo, RecvOp& op, bool* acked, size_t maxPull) {
  const size_t end = std::min(op.bytes, op.off + std::max<size_t>(maxPull, 1));
  while (op.off < end) {
    if (!op.reduce) {
      const size_t n = end - op.off;
      TIDE_TRY(cmaRead(op.desc.pid, op.desc.addr + op.off, op.buf + op.off, n, op.peer));
      op.off += n;
      continue;
    }
    // Reduce through the cache-sized bounce buffer (whole elements only:
    // bytes and bounceBytes are multiples of the element size).
    const size_t n = std::min(op.bounceBytes, end - op.off);
    TIDE_TRY(cmaRead(op.desc.pid, op.desc.addr + op.off, op.bounce, n, op.peer));
    const char* src = static_cast<const char*>(op.rr.src);
    op.rr.fn(op.buf + op.off, src + op.off, op.bounce, n / op.rr.elemSize);
    op.off += n;
  }
  if (op.done()) {
    fifo.ackRendezvous(op.desc.msgNum);
    op.pulling = false;
    if (acked != nullptr) *acked = true;
  }
  return Status::Ok();
}

}  // namespace

Status pullMessage(FifoView& fifo, RecvOp& op, size_t* slots, bool* acked, size_t maxPull) {
  *slots = 0;
  if (op.pulling) return pullRendezvous(fifo, op, acked, maxPull);
  while (!op.done()) {
    SlotInfo info;
    const void* slot = fifo.readSlot(&info);
    if (slot == nullptr) break;
    const size_t n = info.bytes;
    const uint32_t seq = info.msgSeq;
    if (info.tag != 0 && op.tag != 0 && info.tag != op.tag) {
      return invalidUsage(
          "mismatched operation: message %u from rank %d belongs to another call (collective, "
          "count, datatype, operator or root differ; TIDE_CHECK=1 names the field)",
          seq, op.peer);
    }
    if (seq != op.seq) {
      return internalError(
          "shm: message order mismatch (expected a piece of message #%u, %zu bytes, at offset "
          "%zu; got one of message #%u, %zu bytes): the two ranks issued different operations",
          op.seq, op.bytes, op.off, seq, n);
    }
    if (info.rendezvous) {
      RendezvousDesc d;
      if (n != sizeof(d) || op.off != 0) {
        return internalError("shm: malformed single-copy descriptor from rank %d", op.peer);
      }
      std::memcpy(&d, slot, sizeof(d));
      if (d.bytes != op.bytes) {
        return internalError(
            "shm: message size mismatch (receive of %zu bytes, rank %d sent %llu): the two "
            "sides posted different sizes",
            op.bytes, op.peer, static_cast<unsigned long long>(d.bytes));
      }
      if (op.reduce && (op.bounce == nullptr || op.bounceBytes < op.rr.elemSize)) {
        return internalError("shm: single-copy reducing receive without a bounce buffer");
      }
      fifo.releaseRead();
      ++*slots;
      op.desc = d;
      op.pulling = true;
      return pullRendezvous(fifo, op, acked, maxPull);
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
