#include "transports/ib/ib_engine.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "core/log.h"

namespace tide {
namespace {

const char* kindName(IbWrKind k) {
  switch (k) {
    case IbWrKind::Data:
      return "RDMA write of data";
    case IbWrKind::Cts:
      return "RDMA write of a receive grant";
    case IbWrKind::RecvData:
      return "receive of data";
    case IbWrKind::RecvCts:
      return "receive of a grant";
  }
  return "work request";
}

// Decodes wc's wr_id; a failed completion becomes its error.
Status decode(const IbCompletion& wc, const std::string& peer, IbWrId* id) {
  bool known = ibWrIdDecode(wc.wrId, id);
  if (wc.status != kIbWcSuccess) {
    return ibCompletionError(wc.status, wc.statusStr, wc.vendorErr, peer,
                             known ? kindName(id->kind) : "work request");
  }
  if (!known) {
    return internalError("ib net: completion with unknown wr_id 0x%lx",
                         static_cast<unsigned long>(wc.wrId));
  }
  return Status::Ok();
}

void eraseMsg(std::deque<IbMsg*>* q, IbMsg* m) {
  auto it = std::find(q->begin(), q->end(), m);
  if (it != q->end()) q->erase(it);
}

}  // namespace

// ---- Sender ---------------------------------------------------------------------------

IbSender::IbSender(int nqps, int wrsPerMsg, volatile CtsEntry* fifo, IbPoster* poster,
                   std::string peer)
    : nqps_(nqps),
      wrsPerMsg_(std::max(1, wrsPerMsg)),
      poster_(poster),
      peer_(std::move(peer)),
      consumer_(fifo) {}

Status IbSender::start() {
  for (int i = 0; i < kIbSlots; ++i)
    TIDE_TRY(poster_->recv(0, ibWrIdEncode(IbWrKind::RecvCts, 0, recvsPosted_++)));
  return Status::Ok();
}

void IbSender::queue(IbMsg* m) {
  m->seq = nextSeq_++;
  m->posted = m->done = false;
  queue_.push_back(m);
}

Status IbSender::onCompletion(const IbCompletion& wc) {
  IbWrId id{};
  TIDE_TRY(decode(wc, peer_, &id));
  switch (id.kind) {
    case IbWrKind::Data:
      return tracker_.onCompletion(id.seq);
    case IbWrKind::RecvCts:
      // The grant is read from the FIFO in order, and only after this
      // completion: its receive WR is back before the next grant can come.
      ++grantsArrived_;
      return poster_->recv(0, ibWrIdEncode(IbWrKind::RecvCts, 0, recvsPosted_++));
    default:
      return internalError("ib net: a sender got a %s completion", kindName(id.kind));
  }
}

Status IbSender::progress() {
  for (IbMsg* m : queue_) {
    if (m->posted) continue;
    // Bounds the send queues: WRs of at most kIbSlots messages per QP.
    if (m->seq - tracker_.doneBelow() >= static_cast<uint64_t>(kIbSlots)) break;
    CtsEntry cts{};
    if (m->seq >= grantsArrived_ || !consumer_.peek(&cts)) break;
    if (consumer_.next() != m->seq) return internalError("ib net: send order lost");
    std::string why = ibCtsMismatch(cts, m->seq, m->size, m->tag);
    if (!why.empty()) {
      // Not written: every QP carries a "rejected" immediate so the receiver
      // fails exactly this receive.
      TIDE_INFO("ib net: to %s: %s; the receive will fail", peer_.c_str(), why.c_str());
      for (int q = 0; q < nqps_; ++q) {
        TIDE_TRY(poster_->write(q, ibWrIdEncode(IbWrKind::Data, q, m->seq), nullptr, 0, 0, cts.addr,
                                cts.rkey, true, ibImmEncode(m->size, true), true));
      }
    } else {
      size_t wrBytes = ibWrBytes(m->size, nqps_, kIbDefaultMaxWr, wrsPerMsg_);
      std::vector<IbWr> wrs;
      TIDE_TRY(planStripes(m->size, nqps_, wrBytes, &wrs));
      for (const IbWr& w : wrs) {
        TIDE_TRY(poster_->write(w.qp, ibWrIdEncode(IbWrKind::Data, w.qp, m->seq), m->buf + w.offset,
                                m->lkey, w.len, cts.addr + w.offset, cts.rkey, w.withImm, w.imm,
                                w.withImm));
      }
    }
    tracker_.add(m->seq, nqps_);
    consumer_.pop();
    m->posted = true;
  }
  while (!queue_.empty() && queue_.front()->posted && tracker_.done(queue_.front()->seq)) {
    queue_.front()->done = true;
    queue_.pop_front();
  }
  return Status::Ok();
}

void IbSender::forget(IbMsg* m) { eraseMsg(&queue_, m); }

// ---- Receiver -------------------------------------------------------------------------

IbReceiver::IbReceiver(int nqps, CtsEntry* staging, uint32_t stagingLkey, uint64_t peerFifo,
                       uint32_t peerRkey, int maxGrantsInFlight, IbPoster* poster, std::string peer)
    : nqps_(nqps),
      staging_(staging),
      stagingLkey_(stagingLkey),
      peerFifo_(peerFifo),
      peerRkey_(peerRkey),
      maxGrants_(std::max(1, maxGrantsInFlight)),
      poster_(poster),
      peer_(std::move(peer)),
      imms_(nqps) {}

Status IbReceiver::start() {
  for (int q = 0; q < nqps_; ++q)
    for (int i = 0; i < kIbSlots; ++i)
      TIDE_TRY(poster_->recv(q, ibWrIdEncode(IbWrKind::RecvData, q, recvsPosted_++)));
  return Status::Ok();
}

bool IbReceiver::canPost() const { return producer_.canPost() && grantsInFlight_ < maxGrants_; }

Status IbReceiver::post(IbMsg* m) {
  if (!canPost()) return internalError("ib net: receive posted without a credit");
  int slot = 0;
  CtsEntry entry{};
  m->seq = producer_.post(m->size ? reinterpret_cast<uintptr_t>(m->buf) : 0, m->rkey,
                          static_cast<uint32_t>(m->size), m->tag, &slot, &entry);
  m->done = false;
  // Staging copy: slot `slot` is rewritten only kIbSlots grants later,
  // after the sender consumed this one (so it was written).
  staging_[slot] = entry;
  TIDE_TRY(poster_->write(0, ibWrIdEncode(IbWrKind::Cts, 0, m->seq), &staging_[slot], stagingLkey_,
                          sizeof(CtsEntry), peerFifo_ + slot * sizeof(CtsEntry), peerRkey_, true,
                          static_cast<uint32_t>(m->seq), true));
  ++grantsInFlight_;
  posted_.push_back(m);
  return Status::Ok();
}

Status IbReceiver::onCompletion(const IbCompletion& wc) {
  IbWrId id{};
  TIDE_TRY(decode(wc, peer_, &id));
  switch (id.kind) {
    case IbWrKind::Cts:
      --grantsInFlight_;
      return Status::Ok();
    case IbWrKind::RecvData:
      if (!wc.hasImm) {
        return internalError("ib net: data from %s arrived without an immediate", peer_.c_str());
      }
      TIDE_TRY(imms_.onImm(id.qp, wc.imm));
      return poster_->recv(id.qp, ibWrIdEncode(IbWrKind::RecvData, id.qp, recvsPosted_++));
    default:
      return internalError("ib net: a receiver got a %s completion", kindName(id.kind));
  }
}

Status IbReceiver::progress() {
  uint64_t bytes = 0;
  bool rejected = false;
  while (!posted_.empty() && imms_.popComplete(&bytes, &rejected)) {
    IbMsg* m = posted_.front();
    if (rejected || bytes > m->size) {
      if (bytes > m->size) {
        return invalidUsage(
            "ib net: a %lu-byte message from %s arrived for a %zu-byte receive "
            "(message %lu)",
            static_cast<unsigned long>(bytes), peer_.c_str(), m->size,
            static_cast<unsigned long>(m->seq));
      }
      return invalidUsage(
          "ib net: message %lu from %s has another tag than the receive "
          "expects (%d)",
          static_cast<unsigned long>(m->seq), peer_.c_str(), m->tag);
    }
    posted_.pop_front();
    producer_.complete();
    m->bytes = bytes;
    m->done = true;
  }
  if (posted_.empty() && imms_.pending() > 0 && imms_.popComplete(&bytes, &rejected)) {
    return internalError("ib net: a message from %s arrived with no receive posted", peer_.c_str());
  }
  return Status::Ok();
}

void IbReceiver::forget(IbMsg* m) { eraseMsg(&posted_, m); }

}  // namespace tide
