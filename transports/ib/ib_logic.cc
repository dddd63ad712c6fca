#include "transports/ib/ib_logic.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace tide {

// ---- Striping ---------------------------------------------------------------------------

Status planStripes(size_t bytes, int nqps, size_t maxWr, std::vector<IbWr>* out) {
  out->clear();
  if (nqps < 1 || nqps > kIbMaxQps) return invalidArgument("ib: %d QPs per connection", nqps);
  if (maxWr == 0) return invalidArgument("ib: zero maximum WR size");
  // Share per QP, rounded up to the alignment so every share but the last is
  // aligned and full.
  size_t share = (bytes + nqps - 1) / nqps;
  share = (share + kIbStripeAlign - 1) / kIbStripeAlign * kIbStripeAlign;
  if (share > kIbImmBytesMask) return invalidArgument("ib: message of %zu bytes too large", bytes);
  for (int q = 0; q < nqps; ++q) {
    size_t lo = std::min(bytes, share * q);
    size_t hi = std::min(bytes, lo + share);
    size_t mine = hi - lo;
    size_t off = lo;
    do {
      IbWr wr;
      wr.qp = q;
      wr.offset = off;
      wr.len = std::min(maxWr, hi - off);
      off += wr.len;
      if (off == hi) {
        wr.withImm = true;
        wr.imm = static_cast<uint32_t>(mine);
      }
      out->push_back(wr);
    } while (off < hi);
  }
  return Status::Ok();
}

// ---- Credits ----------------------------------------------------------------------------

uint64_t CtsProducer::post(uint64_t addr, uint32_t rkey, uint32_t size, int32_t tag, int* slot,
                           CtsEntry* entry) {
  uint64_t seq = posted_++;
  *slot = static_cast<int>(seq % kIbSlots);
  entry->addr = addr;
  entry->rkey = rkey;
  entry->size = size;
  entry->tag = tag;
  entry->reserved = 0;
  entry->seq = seq + 1;  // 0 means "never written"
  return seq;
}

bool CtsConsumer::peek(CtsEntry* entry) const {
  volatile CtsEntry& e = fifo_[next_ % kIbSlots];
  if (e.seq != next_ + 1) return false;
  // seq is written last by the peer; read the rest after it.
  __atomic_thread_fence(__ATOMIC_ACQUIRE);
  entry->addr = e.addr;
  entry->rkey = e.rkey;
  entry->size = e.size;
  entry->tag = e.tag;
  entry->reserved = 0;
  entry->seq = e.seq;
  return true;
}

// ---- ImmTracker -------------------------------------------------------------------------

ImmTracker::ImmTracker(int nqps) : nqps_(nqps), perQp_(nqps, 0) {}

Status ImmTracker::onImm(int qp, uint32_t imm) {
  uint64_t bytes = 0;
  bool rejected = false;
  ibImmDecode(imm, &bytes, &rejected);
  if (qp < 0 || qp >= nqps_) return internalError("ib: immediate on unknown QP %d", qp);
  uint64_t msg = perQp_[qp]++;
  if (msg < base_)
    return internalError("ib: immediate for completed message %lu",
                         static_cast<unsigned long>(msg));
  size_t idx = msg - base_;
  if (idx >= kIbSlots) {
    return internalError("ib: immediate for message %lu beyond the %d credits",
                         static_cast<unsigned long>(msg), kIbSlots);
  }
  while (msgs_.size() <= idx) msgs_.push_back(Msg{});
  msgs_[idx].got += 1;
  if (rejected) {
    // Every QP carries the sender's whole size: keep it once.
    msgs_[idx].bytes = bytes;
    msgs_[idx].rejected = true;
  } else if (!msgs_[idx].rejected) {
    msgs_[idx].bytes += bytes;
  }
  return Status::Ok();
}

bool ImmTracker::popComplete(uint64_t* bytes, bool* rejected) {
  if (msgs_.empty() || msgs_.front().got < nqps_) return false;
  *bytes = msgs_.front().bytes;
  if (rejected) *rejected = msgs_.front().rejected;
  msgs_.pop_front();
  ++base_;
  return true;
}

// ---- SendTracker ------------------------------------------------------------------------

void SendTracker::add(uint64_t seq, int signaled) {
  // Messages are added in order; seq == added_.
  (void)seq;
  left_.push_back(signaled);
  ++added_;
  while (!left_.empty() && left_.front() == 0) {
    left_.pop_front();
    ++doneBelow_;
  }
}

Status SendTracker::onCompletion(uint64_t seq) {
  if (seq < doneBelow_ || seq >= added_) {
    return internalError("ib: completion for unknown send %lu", static_cast<unsigned long>(seq));
  }
  int& left = left_[seq - doneBelow_];
  if (left <= 0)
    return internalError("ib: extra completion for send %lu", static_cast<unsigned long>(seq));
  --left;
  while (!left_.empty() && left_.front() == 0) {
    left_.pop_front();
    ++doneBelow_;
  }
  return Status::Ok();
}

bool SendTracker::done(uint64_t seq) const {
  if (seq < doneBelow_) return true;
  if (seq >= added_) return false;
  return left_[seq - doneBelow_] == 0;
}

// ---- Immediates, wr ids, sizes ------------------------------------------------------

uint32_t ibImmEncode(uint64_t bytes, bool rejected) {
  uint32_t b = static_cast<uint32_t>(std::min<uint64_t>(bytes, kIbImmBytesMask));
  return rejected ? (kIbImmRejected | b) : b;
}

void ibImmDecode(uint32_t imm, uint64_t* bytes, bool* rejected) {
  *rejected = (imm & kIbImmRejected) != 0;
  *bytes = imm & kIbImmBytesMask;
}

// wr_id layout: kind (8 bits) | qp (8 bits) | seq (48 bits).
constexpr uint64_t kSeqMask = (uint64_t{1} << 48) - 1;

uint64_t ibWrIdEncode(IbWrKind kind, int qp, uint64_t seq) {
  return (uint64_t{static_cast<uint8_t>(kind)} << 56) | (uint64_t{static_cast<uint8_t>(qp)} << 48) |
         (seq & kSeqMask);
}

bool ibWrIdDecode(uint64_t wrId, IbWrId* out) {
  uint8_t kind = static_cast<uint8_t>(wrId >> 56);
  int qp = static_cast<int>((wrId >> 48) & 0xff);
  if (kind < static_cast<uint8_t>(IbWrKind::Data) || kind > static_cast<uint8_t>(IbWrKind::RecvCts))
    return false;
  if (qp >= kIbMaxQps) return false;
  out->kind = static_cast<IbWrKind>(kind);
  out->qp = qp;
  out->seq = wrId & kSeqMask;
  return true;
}

size_t ibWrBytes(size_t bytes, int nqps, size_t chunk, int maxWrsPerMsg) {
  constexpr size_t kPage = 4096;
  size_t share = nqps > 0 ? (bytes + nqps - 1) / nqps : bytes;
  size_t wrs = static_cast<size_t>(std::max(maxWrsPerMsg, 1));
  size_t need = (share + wrs - 1) / wrs;
  size_t w = std::max(std::max(chunk, need), kPage);
  return (w + kPage - 1) / kPage * kPage;
}

std::string ibCtsMismatch(const CtsEntry& cts, uint64_t msgSeq, size_t size, int tag) {
  char buf[200];
  if (size > cts.size) {
    snprintf(buf, sizeof(buf), "a %zu-byte message was sent to a %u-byte receive (message %lu)",
             size, cts.size, static_cast<unsigned long>(msgSeq));
    return buf;
  }
  if (tag != cts.tag) {
    snprintf(buf, sizeof(buf), "message %lu has tag %d, the receive expects %d",
             static_cast<unsigned long>(msgSeq), tag, cts.tag);
    return buf;
  }
  return "";
}

// ---- GID selection ----------------------------------------------------------------------

int ibSelectGid(const std::vector<IbGidEntry>& table, int64_t want, bool roce) {
  if (want >= 0) {
    for (size_t i = 0; i < table.size(); ++i)
      if (table[i].index == want) return static_cast<int>(i);
    return -1;
  }
  if (table.empty()) return -1;
  if (!roce) {
    for (size_t i = 0; i < table.size(); ++i)
      if (table[i].index == 0) return static_cast<int>(i);
    return 0;
  }
  auto v4mapped = [](const IbGidEntry& g) {
    const uint8_t* r = g.raw;
    return r[10] == 0xff && r[11] == 0xff &&
           std::all_of(r, r + 10, [](uint8_t b) { return b == 0; });
  };
  auto linkLocal = [](const IbGidEntry& g) {
    return g.raw[0] == 0xfe && (g.raw[1] & 0xc0) == 0x80;
  };
  for (size_t i = 0; i < table.size(); ++i)
    if (table[i].type == IbGidType::RoceV2 && v4mapped(table[i])) return static_cast<int>(i);
  for (size_t i = 0; i < table.size(); ++i)
    if (table[i].type == IbGidType::RoceV2 && !linkLocal(table[i])) return static_cast<int>(i);
  for (size_t i = 0; i < table.size(); ++i)
    if (v4mapped(table[i])) return static_cast<int>(i);
  return 0;
}

// ---- Completion errors ------------------------------------------------------------------

Status ibCompletionError(int status, const char* statusStr, uint32_t vendorErr,
                         const std::string& peer, const char* what) {
  const char* s = statusStr ? statusStr : "unknown status";
  bool local = status == kIbWcLocLenErr || status == kIbWcLocQpOpErr || status == kIbWcLocProtErr;
  const char* hint = "";
  if (status == kIbWcRetryExcErr)
    hint = " (the peer or the path stopped answering: dead process, link down or wrong GID/LID)";
  if (status == kIbWcRnrRetryExcErr) hint = " (the peer had no receive posted)";
  if (status == kIbWcWrFlushErr) hint = " (the connection had already failed)";
  if (local) {
    return systemError("ib net: %s with %s failed locally: %s (status %d, vendor error 0x%x)", what,
                       peer.c_str(), s, status, vendorErr);
  }
  return remoteError("ib net: %s with %s failed: %s (status %d, vendor error 0x%x)%s", what,
                     peer.c_str(), s, status, vendorErr, hint);
}

// ---- Connection FSM ---------------------------------------------------------------------

const char* ibConnStateName(IbConnState s) {
  switch (s) {
    case IbConnState::Idle:
      return "idle";
    case IbConnState::Created:
      return "created";
    case IbConnState::Init:
      return "init";
    case IbConnState::HandleSent:
      return "handle-sent";
    case IbConnState::HandleKnown:
      return "handle-known";
    case IbConnState::Rtr:
      return "rtr";
    case IbConnState::Rts:
      return "rts";
    case IbConnState::Closing:
      return "closing";
    case IbConnState::Closed:
      return "closed";
    case IbConnState::Error:
      return "error";
  }
  return "?";
}

Status IbConnFsm::apply(IbConnEvent ev) {
  using S = IbConnState;
  S next = S::Error;
  S s = state_;
  switch (ev) {
    case IbConnEvent::Create:
      if (s == S::Idle) next = S::Created;
      break;
    case IbConnEvent::ToInit:
      if (s == S::Created) next = S::Init;
      break;
    case IbConnEvent::SendHandle:
      if (s == S::Init) next = got_ ? S::HandleKnown : S::HandleSent;
      break;
    case IbConnEvent::GotHandle:
      if (!got_ && (s == S::Created || s == S::Init)) {
        got_ = true;
        next = s;
      } else if (!got_ && s == S::HandleSent) {
        got_ = true;
        next = S::HandleKnown;
      }
      break;
    case IbConnEvent::ToRtr:
      if (s == S::HandleKnown) next = S::Rtr;
      break;
    case IbConnEvent::ToRts:
      if (s == S::Rtr) next = S::Rts;
      break;
    case IbConnEvent::Close:
      if (s != S::Closed && s != S::Closing) next = S::Closing;
      break;
    case IbConnEvent::Closed:
      if (s == S::Closing) next = S::Closed;
      break;
    case IbConnEvent::Fail:
      state_ = S::Error;
      return Status::Ok();
  }
  if (next == S::Error) {
    const char* from = ibConnStateName(s);
    state_ = S::Error;
    return internalError("ib: connection event %d not allowed in state %s", static_cast<int>(ev),
                         from);
  }
  state_ = next;
  return Status::Ok();
}

}  // namespace tide
