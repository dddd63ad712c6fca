// The socket net's data sockets, one at a time: a sending socket writes its
// queued stripes (header, then payload), a receiving one reads headers,
// matches each stripe with its posted receive (sequence, size, tag) and
// reads the payload into the receive's buffer.
#include <errno.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "transports/socket/socket_internal.h"

namespace tide {
namespace socknet {

// ThreadSanitizer cannot see ordering that passes through other processes: a
// receive into a region this process sent from earlier (in-place ring steps)
// is ordered after that send only because the peer needed the sent bytes to
// produce the received ones. Under TSan, every send releases and every
// receive that got bytes acquires one process-wide sync address to state
// that ordering; nothing in other builds. The release must precede the
// bytes leaving and the acquire must follow their arrival, while TSan's own
// sendmsg/recv interceptors record the buffer access only after the system
// call, too late (a preempted sender released after a fast peer's reply was
// already received: false races on in-place buffers). So TSan builds issue
// the two calls as raw system calls and record the accesses themselves.
#if defined(__SANITIZE_THREAD__)
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
extern "C" void __tsan_read_range(void* addr, unsigned long size);
extern "C" void __tsan_write_range(void* addr, unsigned long size);
char gNetOrder;
ssize_t sendData(int fd, const msghdr* m, int flags) {
  for (size_t i = 0; i < m->msg_iovlen; ++i) {
    __tsan_read_range(m->msg_iov[i].iov_base, m->msg_iov[i].iov_len);
  }
  __tsan_release(&gNetOrder);
  return syscall(SYS_sendmsg, fd, m, flags);
}
ssize_t recvData(int fd, void* buf, size_t n, int flags) {
  ssize_t r = syscall(SYS_recvfrom, fd, buf, n, flags, nullptr, nullptr);
  if (r > 0) {
    __tsan_acquire(&gNetOrder);
    __tsan_write_range(buf, static_cast<unsigned long>(r));
  }
  return r;
}
#else
inline ssize_t sendData(int fd, const msghdr* m, int flags) { return ::sendmsg(fd, m, flags); }
inline ssize_t recvData(int fd, void* buf, size_t n, int flags) {
  return ::recv(fd, buf, n, flags);
}
#endif

namespace {

// Moves data on one sending socket until it would block. Returns false on error.
bool stepSend(Comm& c, DataSock& s, bool* moved) {
  for (;;) {
    if (!s.active) {
      std::lock_guard<std::mutex> g(c.mu);
      if (s.queue.empty()) return true;
      s.cur = s.queue.front();
      s.queue.pop_front();
      s.active = true;
      s.done = 0;
      const Request& r = *s.cur.req;
      s.hdr = SocketStripeHeader{kStripeMagic, r.seq, r.size, s.cur.offset, s.cur.len, r.tag};
      encodeStripeHeader(s.hdr, s.wire);
    }
    iovec iov[2];
    int n = 0;
    if (s.done < kHdr) iov[n++] = {s.wire + s.done, kHdr - s.done};
    size_t pay = s.done > kHdr ? s.done - kHdr : 0;
    if (s.cur.len > pay) iov[n++] = {s.cur.req->buf + s.cur.offset + pay, s.cur.len - pay};
    msghdr m{};
    m.msg_iov = iov;
    m.msg_iovlen = n;
    ssize_t r = sendData(s.fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
      c.setError(errno == EPIPE || errno == ECONNRESET || errno == ETIMEDOUT ? tideRemoteError
                                                                             : tideSystemError,
                 std::string("send failed: ") + strerror(errno));
      return false;
    }
    *moved = true;
    s.done += static_cast<size_t>(r);
    if (s.done == kHdr + s.cur.len) {
      s.active = false;
      s.cur.req->stripesDone.fetch_add(1, std::memory_order_release);  // req may be freed now
      notify(c.doneFd);
    }
  }
}

// Reads a header or payload piece. End of stream between stripes retires
// the socket (the peer closed: its other sockets may still hold data); the
// comm fails when every socket has ended, or at once when one ends inside a
// stripe.
bool readSome(Comm& c, DataSock& s, void* buf, size_t n, size_t* got) {
  for (;;) {
    ssize_t r = recvData(s.fd, buf, n, MSG_DONTWAIT);
    if (r > 0) {
      *got = static_cast<size_t>(r);
      return true;
    }
    if (r == 0) {
      *got = 0;
      if (s.hdrGot == 0 && !s.eof) {
        s.eof = true;
        if (c.eofs.fetch_add(1) + 1 < c.socks.size()) return true;
      }
      c.setError(tideRemoteError, "the peer closed the connection");
      return false;
    }
    if (errno == EINTR) continue;
    *got = 0;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
    c.setError(errno == ECONNRESET || errno == ETIMEDOUT ? tideRemoteError : tideSystemError,
               std::string("receive failed: ") + strerror(errno));
    return false;
  }
}

// Matches the stripe whose header s.hdr holds with its posted receive.
bool matchStripe(Comm& c, DataSock& s) {
  const SocketStripeHeader& h = s.hdr;
  std::lock_guard<std::mutex> g(c.mu);
  auto it = c.posted.find(h.seq);
  if (it == c.posted.end()) {
    s.stalled = true;
    return true;
  }
  Request* r = it->second;
  std::string why;
  if (h.total > r->size) {
    why = "a " + std::to_string(h.total) + "-byte message arrived for a " +
          std::to_string(r->size) + "-byte receive (message " + std::to_string(h.seq) + ")";
  } else if (h.tag != r->tag) {
    why = "message " + std::to_string(h.seq) + " has tag " + std::to_string(h.tag) +
          ", the receive expects " + std::to_string(r->tag);
  } else if (h.offset > h.total || h.len > h.total - h.offset) {  // no wrap-around
    why = "corrupt stripe header (offset beyond the message)";
  } else {
    uint64_t t = r->total.load(std::memory_order_relaxed);
    if (t != UINT64_MAX && t != h.total) why = "stripes disagree on the message size";
  }
  if (!why.empty()) {
    if (c.err.load() == 0) {
      c.errMsg = why;
      c.err.store(tideInvalidUsage, std::memory_order_release);
    }
    notify(c.doneFd);
    return false;
  }
  // A 0-byte message would look complete (received == total == 0) the moment
  // its total is known: stepRecv publishes that total as its last access.
  if (h.total > 0) r->total.store(h.total, std::memory_order_release);
  s.stalled = false;
  s.rreq = r;
  s.done = 0;
  return true;
}

bool stepRecv(Comm& c, DataSock& s, bool* moved) {
  for (;;) {
    if (s.hdrGot < kHdr) {
      size_t got = 0;
      if (s.eof) return true;
      if (!readSome(c, s, s.wire + s.hdrGot, kHdr - s.hdrGot, &got)) return false;
      if (got == 0) return true;
      *moved = true;
      s.hdrGot += got;
      if (s.hdrGot < kHdr) continue;
      s.hdr = decodeStripeHeader(s.wire);
      if (s.hdr.magic != kStripeMagic) {
        c.setError(tideRemoteError, "corrupt data from the peer (bad stripe magic)");
        return false;
      }
    }
    if (s.rreq == nullptr) {
      if (!matchStripe(c, s)) return false;
      if (s.stalled) return true;
    }
    Request* r = s.rreq;
    if (s.done < s.hdr.len) {
      size_t got = 0;
      if (!readSome(c, s, r->buf + s.hdr.offset + s.done, s.hdr.len - s.done, &got)) return false;
      if (got == 0) return true;
      *moved = true;
      s.done += got;
      if (s.done < s.hdr.len) continue;
    }
    s.rreq = nullptr;
    s.hdrGot = 0;
    // The last access to r: test() may free it once it looks complete.
    if (s.hdr.total == 0) {
      r->total.store(0, std::memory_order_release);
    } else {
      r->received.fetch_add(s.hdr.len, std::memory_order_release);
    }
    notify(c.doneFd);
  }
}

}  // namespace

bool stepSock(Comm& c, DataSock& s, bool* moved) {
  return c.send ? stepSend(c, s, moved) : stepRecv(c, s, moved);
}

}  // namespace socknet
}  // namespace tide
