#include "transports/net/net_connection.h"

#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>

#include "core/log.h"
#include "transports/net/net_registry.h"

namespace tide {

NetConnection::NetConnection(const tideNet_v1_t* net, void* sendComm, void* recvComm, int peer,
                             int channel, size_t chunk, int inflight, const uint32_t* opTag)
    : net_(net),
      sendComm_(sendComm),
      recvComm_(recvComm),
      peer_(peer),
      channel_(channel),
      chunk_(std::max(chunk / kMinChunk * kMinChunk, kMinChunk)),
      inflight_(static_cast<size_t>(std::max(inflight, 1))),
      opTag_(opTag) {
  if (net_->getPollFd != nullptr) {
    if (net_->getPollFd(sendComm_, &sendFd_) != tideSuccess) sendFd_ = -1;
    if (net_->getPollFd(recvComm_, &recvFd_) != tideSuccess) recvFd_ = -1;
  }
}

NetConnection::~NetConnection() {
  if (bothFd_ >= 0) close(bothFd_);
  shutdownNet();
}

void NetConnection::shutdownNet() {
  // net.h: deregister before closing; closing cancels and frees whatever is
  // still outstanding, so the request lists are dropped untested.
  for (Op& op : sends_) deregisterOp(sendComm_, op);
  for (Op& op : recvs_) deregisterOp(recvComm_, op);
  sendReqs_.clear();
  for (const InFlight& f : recvReqs_) {
    if (f.bounce >= 0) freeBounce_.push_back(f.bounce);
  }
  recvReqs_.clear();
  if (sendComm_ != nullptr) (void)net_->closeSend(sendComm_);
  if (recvComm_ != nullptr) (void)net_->closeRecv(recvComm_);
  sendComm_ = recvComm_ = nullptr;
}

Status NetConnection::fail(const Status& s) {
  if (error_.ok()) {
    error_ = Status(s.code(), "net connection to rank " + std::to_string(peer_) + " (channel " +
                                  std::to_string(channel_) + "): " + s.message());
    TIDE_INFO("%s", error_.message().c_str());
    // Stop the net now: a receive still outstanding must not write its user
    // buffer after the operation returned this error.
    shutdownNet();
    if (bothFd_ >= 0) close(bothFd_);
    bothFd_ = -2;
    sendFd_ = recvFd_ = -1;
  }
  return error_;
}

Status NetConnection::registerOp(void* comm, Op& op) {
  if (!op.device || op.mhandle != nullptr || op.bytes == 0) return Status::Ok();
  tideResult_t r = tideInternalError;
  if ((devicePtr_ & TIDE_NET_PTR_DMABUF) != 0) {
    r = net_->regMr(comm, op.buf, op.bytes, TIDE_NET_PTR_DMABUF, &op.mhandle);
    if (r != tideSuccess) op.mhandle = nullptr;
  }
  const bool usedDmaBuf = op.mhandle != nullptr;
  if (op.mhandle == nullptr && (devicePtr_ & TIDE_NET_PTR_DEVICE) != 0) {
    r = net_->regMr(comm, op.buf, op.bytes, TIDE_NET_PTR_DEVICE, &op.mhandle);
    if (r != tideSuccess) op.mhandle = nullptr;
  }
  if (op.mhandle == nullptr) {
    if (r == tideSuccess) r = tideInternalError;  // a net that returned a null handle
    return netStatus(r, net_->name, "regMr of a device buffer (GPUDirect RDMA)");
  }
  if (!gdrLogged_) {
    gdrLogged_ = true;
    TIDE_INFO("send/recv with peer %d: GPUDirect RDMA (net %s, %s)", peer_, net_->name,
              usedDmaBuf ? "dma-buf" : "peer memory");
  }
  return Status::Ok();
}

void NetConnection::deregisterOp(void* comm, Op& op) {
  if (op.mhandle == nullptr) return;
  if (comm != nullptr) (void)net_->deregMr(comm, op.mhandle);
  op.mhandle = nullptr;
}

int NetConnection::pollFd() const {
  // Nets that move bytes only inside test() (UCX over tcp) need a wake-up for
  // either direction while a ring step both sends and receives: one epoll fd
  // (level-triggered, readable while either member is) stands for both.
  if (!recvs_.empty() && !sends_.empty() && sendFd_ >= 0 && recvFd_ >= 0 && sendFd_ != recvFd_ &&
      bothFd_ != -2) {
    if (bothFd_ < 0) {
      bothFd_ = epoll_create1(EPOLL_CLOEXEC);
      epoll_event ev{};
      ev.events = EPOLLIN;
      bool ok = bothFd_ >= 0;
      ev.data.fd = sendFd_;
      ok = ok && epoll_ctl(bothFd_, EPOLL_CTL_ADD, sendFd_, &ev) == 0;
      ev.data.fd = recvFd_;
      ok = ok && epoll_ctl(bothFd_, EPOLL_CTL_ADD, recvFd_, &ev) == 0;
      if (!ok) {
        if (bothFd_ >= 0) close(bothFd_);
        bothFd_ = -2;
        return recvFd_;
      }
    }
    return bothFd_;
  }
  if (!recvs_.empty() && recvFd_ >= 0) return recvFd_;
  return sendFd_ >= 0 ? sendFd_ : recvFd_;
}

Status NetConnection::postSend(const void* buf, size_t bytes, uint64_t* ticket) {
  return enqueueSend(buf, bytes, false, ticket);
}

Status NetConnection::postSendMem(const void* buf, size_t bytes, MemType mem, uint64_t* ticket) {
  if (mem != MemType::Host && devicePtr_ == 0) {
    return internalError("net %s cannot send from device memory", net_->name);
  }
  return enqueueSend(buf, bytes, mem != MemType::Host, ticket);
}

Status NetConnection::enqueueSend(const void* buf, size_t bytes, bool device, uint64_t* ticket) {
  if (!error_.ok()) return error_;
  if (bytes > 0 && buf == nullptr)
    return invalidArgument("net: send of %zu bytes from null", bytes);
  *ticket = ++sendsPosted_;
  if (bytes == 0 && sends_.empty()) {
    ++sendsDone_;
    return Status::Ok();
  }
  Op op;
  op.buf = static_cast<uint8_t*>(const_cast<void*>(buf));
  op.bytes = bytes;
  op.seq = bytes > 0 ? sendSeq_++ : 0;
  op.tag = opTag_ != nullptr ? *opTag_ : 0;
  op.device = device;
  sends_.push_back(op);
  return Status::Ok();
}

Status NetConnection::postRecv(void* buf, size_t bytes, const RecvReduce* rr, uint64_t* ticket) {
  return enqueueRecv(buf, bytes, rr, false, ticket);
}

Status NetConnection::postRecvMem(void* buf, size_t bytes, const RecvReduce* rr, MemType mem,
                                  uint64_t* ticket) {
  if (mem != MemType::Host) {
    if (devicePtr_ == 0) {
      return internalError("net %s cannot receive into device memory", net_->name);
    }
    if (rr != nullptr && bytes > 0) {
      return internalError("net: reducing receive into device memory (never planned)");
    }
  }
  return enqueueRecv(buf, bytes, rr, mem != MemType::Host, ticket);
}

Status NetConnection::enqueueRecv(void* buf, size_t bytes, const RecvReduce* rr, bool device,
                                  uint64_t* ticket) {
  if (!error_.ok()) return error_;
  if (bytes > 0 && buf == nullptr)
    return invalidArgument("net: receive of %zu bytes into null", bytes);
  bool reduce = rr != nullptr && bytes > 0;
  if (reduce && (rr->fn == nullptr || rr->src == nullptr || rr->elemSize == 0 ||
                 4096 % rr->elemSize != 0 || bytes % rr->elemSize != 0)) {
    return invalidArgument("net: bad reducing receive (%zu bytes, element size %zu)", bytes,
                           rr->elemSize);
  }
  *ticket = ++recvsPosted_;
  if (bytes == 0 && recvs_.empty()) {
    ++recvsDone_;
    return Status::Ok();
  }
  Op op;
  op.buf = static_cast<uint8_t*>(buf);
  op.bytes = bytes;
  op.seq = bytes > 0 ? recvSeq_++ : 0;
  op.tag = opTag_ != nullptr ? *opTag_ : 0;
  op.reduce = reduce;
  if (reduce) op.rr = *rr;
  op.device = device;
  recvs_.push_back(op);
  return Status::Ok();
}

Status NetConnection::progress(bool* moved) {
  if (!error_.ok()) return error_;
  Status s = progressSends(moved);
  if (s.ok()) s = progressRecvs(moved);
  if (!s.ok()) return fail(s);
  return Status::Ok();
}

Status NetConnection::progressSends(bool* moved) {
  while (sendReqs_.size() < inflight_ && sendCursor_ < sends_.size()) {
    Op& op = sends_[sendCursor_];
    if (op.posted == op.bytes) {
      ++sendCursor_;
      continue;
    }
    size_t len = std::min(chunk_, op.bytes - op.posted);
    TIDE_TRY(registerOp(sendComm_, op));
    void* req = nullptr;
    TIDE_TRY(netStatus(net_->isend(sendComm_, op.buf + op.posted, len,
                                   netTag(op.tag, op.seq, op.posted / chunk_), op.mhandle, &req),
                       net_->name, "isend"));
    if (req == nullptr) break;  // the net is full: test, then post again
    sendReqs_.push_back(InFlight{req, &op, op.posted, len, -1});
    op.posted += len;
    ++op.outstanding;
    *moved = true;
  }
  while (!sendReqs_.empty()) {
    InFlight f = sendReqs_.front();
    int done = 0;
    tideResult_t r = net_->test(f.req, &done, nullptr);
    if (r != tideSuccess) {
      sendReqs_.pop_front();  // a failed request is finished
      return netStatus(r, net_->name, "send");
    }
    if (!done) break;
    sendReqs_.pop_front();
    --f.op->outstanding;
    *moved = true;
  }
  while (!sends_.empty() && sends_.front().posted == sends_.front().bytes &&
         sends_.front().outstanding == 0) {
    deregisterOp(sendComm_, sends_.front());
    sends_.pop_front();
    ++sendsDone_;
    if (sendCursor_ > 0) --sendCursor_;
  }
  return Status::Ok();
}

Status NetConnection::progressRecvs(bool* moved) {
  while (recvReqs_.size() < inflight_ && recvCursor_ < recvs_.size()) {
    Op& op = recvs_[recvCursor_];
    if (op.posted == op.bytes) {
      ++recvCursor_;
      continue;
    }
    size_t len = std::min(chunk_, op.bytes - op.posted);
    int b = -1;
    void* dst = op.buf + op.posted;
    if (op.reduce) {
      if (freeBounce_.empty()) {
        if (bounce_.size() >= inflight_) break;
        bounce_.emplace_back(new uint8_t[chunk_]);
        freeBounce_.push_back(static_cast<int>(bounce_.size() - 1));
      }
      b = freeBounce_.back();
      dst = bounce_[b].get();
    }
    int tag = netTag(op.tag, op.seq, op.posted / chunk_);
    TIDE_TRY(registerOp(recvComm_, op));
    void* mh = op.mhandle;
    void* req = nullptr;
    TIDE_TRY(
        netStatus(net_->irecv(recvComm_, 1, &dst, &len, &tag, mh != nullptr ? &mh : nullptr, &req),
                  net_->name, "irecv"));
    if (req == nullptr) break;
    if (b >= 0) freeBounce_.pop_back();
    recvReqs_.push_back(InFlight{req, &op, op.posted, len, b});
    op.posted += len;
    ++op.outstanding;
    *moved = true;
  }
  while (!recvReqs_.empty()) {
    InFlight f = recvReqs_.front();
    int done = 0;
    size_t got = 0;
    tideResult_t r = net_->test(f.req, &done, &got);
    if (r != tideSuccess) {
      recvReqs_.pop_front();
      if (f.bounce >= 0) freeBounce_.push_back(f.bounce);
      Status s = netStatus(r, net_->name, "receive");
      if (r != tideInvalidUsage) return s;
      // A FIFO net saw another tag or a larger message: the peer is in
      // another call (or another chunk of it) than this rank.
      return invalidUsage(
          "mismatched operation: rank %d's message %u (offset %zu) does not match this rank's "
          "receive (operation tag %08x: collective, count, datatype, operator, root or sequence "
          "differ across ranks; TIDE_CHECK=1 names the field): %s",
          peer_, f.op->seq, f.offset, static_cast<unsigned>(f.op->tag), s.message().c_str());
    }
    if (!done) break;
    recvReqs_.pop_front();
    if (f.bounce >= 0 && got != f.len) freeBounce_.push_back(f.bounce);  // back to the pool
    if (got != f.len) {
      return invalidUsage(
          "mismatched operation: rank %d sent %zu bytes where %zu were expected (message %u, "
          "offset %zu; TIDE_CHECK=1 names the differing field)",
          peer_, got, f.len, f.op->seq, f.offset);
    }
    if (f.bounce >= 0) {
      const RecvReduce& rr = f.op->rr;
      rr.fn(f.op->buf + f.offset, static_cast<const uint8_t*>(rr.src) + f.offset,
            bounce_[f.bounce].get(), f.len / rr.elemSize);
      freeBounce_.push_back(f.bounce);
    }
    --f.op->outstanding;
    *moved = true;
  }
  while (!recvs_.empty() && recvs_.front().posted == recvs_.front().bytes &&
         recvs_.front().outstanding == 0) {
    deregisterOp(recvComm_, recvs_.front());
    recvs_.pop_front();
    ++recvsDone_;
    if (recvCursor_ > 0) --recvCursor_;
  }
  return Status::Ok();
}

}  // namespace tide
