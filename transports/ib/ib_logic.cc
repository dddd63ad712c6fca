#include "transports/ib/ib_logic.h"

#include <algorithm>
#include <cstdlib>

namespace tide {

// ---- HcaFilter ------------------------------------------------------------------------

HcaFilter HcaFilter::parse(const std::string& spec) {
  HcaFilter f;
  size_t i = 0;
  if (i < spec.size() && spec[i] == '^') {
    f.exclude_ = true;
    ++i;
  }
  if (i < spec.size() && spec[i] == '=') {
    f.exact_ = true;
    ++i;
  }
  while (i <= spec.size()) {
    size_t comma = spec.find(',', i);
    if (comma == std::string::npos) comma = spec.size();
    std::string tok = spec.substr(i, comma - i);
    i = comma + 1;
    while (!tok.empty() && tok.front() == ' ') tok.erase(tok.begin());
    while (!tok.empty() && tok.back() == ' ') tok.pop_back();
    if (tok.empty()) continue;
    Item item;
    size_t colon = tok.find(':');
    item.name = tok.substr(0, colon);
    if (colon != std::string::npos) {
      char* end = nullptr;
      long port = strtol(tok.c_str() + colon + 1, &end, 10);
      item.port = (end && *end == '\0' && port > 0) ? static_cast<int>(port) : -1;
    }
    if (!item.name.empty()) f.items_.push_back(item);
  }
  return f;
}

bool HcaFilter::matches(const std::string& device, int port) const {
  if (items_.empty()) return true;
  bool hit = false;
  for (const Item& it : items_) {
    bool name = exact_ ? device == it.name : device.compare(0, it.name.size(), it.name) == 0;
    if (name && (it.port < 0 || it.port == port)) {
      hit = true;
      break;
    }
  }
  return exclude_ ? !hit : hit;
}

// ---- Striping ---------------------------------------------------------------------------

Status planStripes(size_t bytes, int nqps, size_t maxWr, std::vector<IbWr>* out) {
  out->clear();
  if (nqps < 1 || nqps > kIbMaxQps) return invalidArgument("ib: %d QPs per connection", nqps);
  if (maxWr == 0) return invalidArgument("ib: zero maximum WR size");
  // Share per QP, rounded up to the alignment so every share but the last is
  // aligned and full.
  size_t share = (bytes + nqps - 1) / nqps;
  share = (share + kIbStripeAlign - 1) / kIbStripeAlign * kIbStripeAlign;
  if (share > UINT32_MAX) return invalidArgument("ib: message of %zu bytes too large", bytes);
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

uint64_t CtsProducer::post(uint64_t addr, uint32_t rkey, uint32_t size, int* slot,
                           CtsEntry* entry) {
  uint64_t seq = posted_++;
  *slot = static_cast<int>(seq % kIbSlots);
  entry->addr = addr;
  entry->rkey = rkey;
  entry->size = size;
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
  entry->seq = e.seq;
  return true;
}

// ---- ImmTracker -------------------------------------------------------------------------

ImmTracker::ImmTracker(int nqps) : nqps_(nqps), perQp_(nqps, 0) {}

Status ImmTracker::onImm(int qp, uint32_t imm) {
  if (qp < 0 || qp >= nqps_) return internalError("ib: immediate on unknown QP %d", qp);
  uint64_t msg = perQp_[qp]++;
  if (msg < base_) return internalError("ib: immediate for completed message %lu", (unsigned long)msg);
  size_t idx = msg - base_;
  if (idx >= kIbSlots) {
    return internalError("ib: immediate for message %lu beyond the %d credits",
                         (unsigned long)msg, kIbSlots);
  }
  while (msgs_.size() <= idx) msgs_.push_back(Msg{});
  msgs_[idx].got += 1;
  msgs_[idx].bytes += imm;
  return Status::Ok();
}

bool ImmTracker::popComplete(uint64_t* bytes) {
  if (msgs_.empty() || msgs_.front().got < nqps_) return false;
  *bytes = msgs_.front().bytes;
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
    return internalError("ib: completion for unknown send %lu", (unsigned long)seq);
  }
  int& left = left_[seq - doneBelow_];
  if (left <= 0) return internalError("ib: extra completion for send %lu", (unsigned long)seq);
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

// ---- Connection FSM ---------------------------------------------------------------------

const char* ibConnStateName(IbConnState s) {
  switch (s) {
    case IbConnState::Idle: return "idle";
    case IbConnState::Created: return "created";
    case IbConnState::Init: return "init";
    case IbConnState::HandleSent: return "handle-sent";
    case IbConnState::HandleKnown: return "handle-known";
    case IbConnState::Rtr: return "rtr";
    case IbConnState::Rts: return "rts";
    case IbConnState::Closing: return "closing";
    case IbConnState::Closed: return "closed";
    case IbConnState::Error: return "error";
  }
  return "?";
}

Status IbConnFsm::apply(IbConnEvent ev) {
  using S = IbConnState;
  S next = S::Error;
  S s = state_;
  switch (ev) {
    case IbConnEvent::Create: if (s == S::Idle) next = S::Created; break;
    case IbConnEvent::ToInit: if (s == S::Created) next = S::Init; break;
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
    case IbConnEvent::ToRtr: if (s == S::HandleKnown) next = S::Rtr; break;
    case IbConnEvent::ToRts: if (s == S::Rtr) next = S::Rts; break;
    case IbConnEvent::Close: if (s != S::Closed && s != S::Closing) next = S::Closing; break;
    case IbConnEvent::Closed: if (s == S::Closing) next = S::Closed; break;
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
