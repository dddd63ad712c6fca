#include "transports/tcp/tcp_connection.h"

#include <errno.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cstring>

#include "core/log.h"

namespace tide {
namespace {

constexpr size_t kHdrBytes = sizeof(TcpFrameHeader);
constexpr int kMaxIov = 64;

}  // namespace

TcpConnection::TcpConnection(Socket sock, int peerRank, int channel, size_t bounceBytes)
    : sock_(std::move(sock)),
      peer_(peerRank),
      channel_(channel),
      bounceBytes_(std::max<size_t>(bounceBytes, 64)) {
  Status s = sock_.setNonBlocking(true);
  if (!s.ok()) error_ = s;
}

Status TcpConnection::fail(Status s) {
  if (error_.ok()) {
    error_ = std::move(s);
    TIDE_INFO("%s", error_.message().c_str());
  }
  return error_;
}

Status TcpConnection::postSend(const void* buf, size_t bytes, uint64_t* ticket) {
  if (!error_.ok()) return error_;
  if (bytes > 0 && buf == nullptr)
    return invalidArgument("tcp: send of %zu bytes from null", bytes);
  *ticket = ++sendsPosted_;
  if (bytes == 0 && sends_.empty()) {
    ++sendsDone_;
    return Status::Ok();
  }
  SendOp op{static_cast<const uint8_t*>(buf), bytes, 0, {}};
  if (bytes > 0) op.hdr = TcpFrameHeader{kTcpFrameMagic, sendSeq_++, bytes};
  sends_.push_back(op);
  return Status::Ok();
}

Status TcpConnection::postRecv(void* buf, size_t bytes, const RecvReduce* rr, uint64_t* ticket) {
  if (!error_.ok()) return error_;
  if (bytes > 0 && buf == nullptr)
    return invalidArgument("tcp: receive of %zu bytes into null", bytes);
  bool reduce = rr != nullptr && bytes > 0;
  if (reduce) {
    if (rr->fn == nullptr || rr->src == nullptr || rr->elemSize == 0 ||
        rr->elemSize > bounceBytes_ / 2 || bytes % rr->elemSize != 0) {
      return invalidArgument("tcp: bad reducing receive (%zu bytes, element size %zu)", bytes,
                             rr->elemSize);
    }
    if (!bounce_) bounce_.reset(new uint8_t[bounceBytes_]);
  }
  *ticket = ++recvsPosted_;
  if (bytes == 0 && recvs_.empty()) {
    ++recvsDone_;
    return Status::Ok();
  }
  RecvOp op{static_cast<uint8_t*>(buf), bytes, reduce, {}, 0};
  if (reduce) op.rr = *rr;
  recvs_.push_back(op);
  return Status::Ok();
}

Status TcpConnection::progress(bool* moved) {
  if (!error_.ok()) return error_;
  Status s = progressSends(moved);
  if (!s.ok()) return fail(std::move(s));
  s = progressRecvs(moved);
  if (!s.ok()) return fail(std::move(s));
  return Status::Ok();
}

void TcpConnection::completeSends(size_t n) {
  while (!sends_.empty()) {
    SendOp& op = sends_.front();
    if (op.bytes > 0) {
      size_t take = std::min(n, kHdrBytes + op.bytes - op.sent);
      op.sent += take;
      n -= take;
      if (op.sent < kHdrBytes + op.bytes) break;
    }
    sends_.pop_front();
    ++sendsDone_;
  }
}

Status TcpConnection::progressSends(bool* moved) {
  size_t budget = kTcpProgressBudget;
  completeSends(0);  // leading 0-byte sends
  while (!sends_.empty() && budget > 0) {
    // Gather the queued frames into one sendmsg.
    iovec iov[kMaxIov];
    int n = 0;
    size_t want = 0;
    for (const SendOp& op : sends_) {
      if (op.bytes == 0) continue;
      if (n + 2 > kMaxIov || want >= budget) break;
      if (op.sent < kHdrBytes) {
        iov[n++] = {const_cast<uint8_t*>(reinterpret_cast<const uint8_t*>(&op.hdr)) + op.sent,
                    kHdrBytes - op.sent};
        want += kHdrBytes - op.sent;
        iov[n++] = {const_cast<uint8_t*>(op.buf), op.bytes};
        want += op.bytes;
      } else {
        size_t off = op.sent - kHdrBytes;
        iov[n++] = {const_cast<uint8_t*>(op.buf) + off, op.bytes - off};
        want += op.bytes - off;
      }
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = n;
    ssize_t r = ::sendmsg(sock_.fd(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      if (errno == EPIPE || errno == ECONNRESET) {
        return remoteError("tcp: rank %d closed the connection (channel %d, while sending)", peer_,
                           channel_);
      }
      return errnoError(errno, "tcp: send to rank %d (channel %d)", peer_, channel_);
    }
    *moved = true;
    completeSends(static_cast<size_t>(r));
    budget -= std::min(budget, static_cast<size_t>(r));
    if (static_cast<size_t>(r) < want) break;  // socket buffer full
  }
  return Status::Ok();
}

Status TcpConnection::checkHeader(const RecvOp& op) {
  if (rxHdr_.magic != kTcpFrameMagic) {
    return remoteError("tcp: corrupt frame from rank %d (channel %d): bad magic 0x%08x", peer_,
                       channel_, rxHdr_.magic);
  }
  if (rxHdr_.seq != recvSeq_) {
    return remoteError(
        "tcp: frame out of order from rank %d (channel %d): sequence %u, expected %u", peer_,
        channel_, rxHdr_.seq, recvSeq_);
  }
  if (rxHdr_.bytes != op.bytes) {
    return invalidUsage(
        "tcp: rank %d sent a %llu-byte message where a %zu-byte receive was posted (channel %d, "
        "message %u)",
        peer_, static_cast<unsigned long long>(rxHdr_.bytes), op.bytes, channel_, recvSeq_);
  }
  ++recvSeq_;
  return Status::Ok();
}

Status TcpConnection::absorb(size_t n) {
  RecvOp& op = recvs_.front();
  if (rxHdrGot_ < kHdrBytes) {
    size_t h = std::min(n, kHdrBytes - rxHdrGot_);
    rxHdrGot_ += h;
    n -= h;
    if (rxHdrGot_ == kHdrBytes) TIDE_TRY(checkHeader(op));
  }
  if (!op.reduce) {
    op.done += n;
  } else {
    carry_ += n;
    size_t es = op.rr.elemSize;
    size_t whole = carry_ - carry_ % es;
    if (whole > 0) {
      op.rr.fn(op.buf + op.done, static_cast<const uint8_t*>(op.rr.src) + op.done, bounce_.get(),
               whole / es);
      op.done += whole;
      carry_ -= whole;
      if (carry_ > 0) std::memmove(bounce_.get(), bounce_.get() + whole, carry_);
    }
  }
  if (rxHdrGot_ == kHdrBytes && op.done == op.bytes) {
    recvs_.pop_front();
    ++recvsDone_;
    rxHdrGot_ = 0;
    carry_ = 0;
    // Following 0-byte receives complete with this one.
    while (!recvs_.empty() && recvs_.front().bytes == 0) {
      recvs_.pop_front();
      ++recvsDone_;
    }
  }
  return Status::Ok();
}

Status TcpConnection::progressRecvs(bool* moved) {
  size_t budget = kTcpProgressBudget;
  while (!recvs_.empty() && recvs_.front().bytes == 0) {
    recvs_.pop_front();
    ++recvsDone_;
  }
  while (!recvs_.empty() && budget > 0) {
    RecvOp& op = recvs_.front();
    // Header remainder, then payload straight into place (or into the bounce
    // buffer to be reduced). Never more than the posted size.
    iovec iov[2];
    int n = 0;
    size_t want = 0;
    if (rxHdrGot_ < kHdrBytes) {
      iov[n++] = {reinterpret_cast<uint8_t*>(&rxHdr_) + rxHdrGot_, kHdrBytes - rxHdrGot_};
      want += kHdrBytes - rxHdrGot_;
    }
    size_t left = op.bytes - op.done - carry_;
    if (!op.reduce) {
      iov[n++] = {op.buf + op.done, left};
      want += left;
    } else if (left > 0) {
      size_t room = std::min(left, bounceBytes_ - carry_);
      iov[n++] = {bounce_.get() + carry_, room};
      want += room;
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = n;
    ssize_t r = ::recvmsg(sock_.fd(), &msg, MSG_DONTWAIT);
    if (r == 0) {
      return remoteError("tcp: rank %d closed the connection (channel %d, while receiving)", peer_,
                         channel_);
    }
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      if (errno == ECONNRESET) {
        return remoteError("tcp: rank %d reset the connection (channel %d)", peer_, channel_);
      }
      return errnoError(errno, "tcp: receive from rank %d (channel %d)", peer_, channel_);
    }
    *moved = true;
    TIDE_TRY(absorb(static_cast<size_t>(r)));
    budget -= std::min(budget, static_cast<size_t>(r));
    if (static_cast<size_t>(r) < want) break;  // drained the socket for now
  }
  return Status::Ok();
}

}  // namespace tide
