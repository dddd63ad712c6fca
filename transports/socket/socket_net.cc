// The socket net: include/tide/net.h over TCP (design in socket_net.h).
#include "transports/socket/socket_net.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdarg>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "core/auth.h"
#include "core/config.h"
#include "core/log.h"
#include "core/registry.h"
#include "transports/net/net_registry.h"
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

constexpr uint32_t kStripeMagic = 0x534f4344;
constexpr size_t kMaxRequests = 1024;  // per comm; more: "retry later"
constexpr size_t kHdr = kStripeHeaderBytes;

tideResult_t fail(tideResult_t code, const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  TIDE_INFO("socket net: %s", buf);
  setNetErrorDetail(buf);
  return code;
}

void closeFd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// Options of every data socket: no Nagle, buffer sizes, liveness.
void configureSocket(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  int64_t t = knobInt(Knob::Timeout);
  if (t > 0) {
    int idle = static_cast<int>(std::clamp<int64_t>(t / 3, 1, 60));
    int intvl = static_cast<int>(std::clamp<int64_t>(t / 10, 1, 10));
    int cnt = static_cast<int>(std::clamp<int64_t>(t / intvl, 1, 127));
    unsigned int userMs = static_cast<unsigned int>(std::min<int64_t>(t * 1000, INT_MAX));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
    setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &userMs, sizeof(userMs));
  }
}

void setBuffers(int fd) {
  uint64_t b = knobSize(Knob::SocketBufSize);
  if (b == 0) return;
  int v = static_cast<int>(std::min<uint64_t>(b, INT_MAX));
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v));
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v));
}

void notify(int fd) {
  if (fd < 0) return;
  uint64_t one = 1;
  ssize_t r = ::write(fd, &one, sizeof(one));
  (void)r;
}

void drain(int fd) {
  uint64_t v;
  ssize_t r = ::read(fd, &v, sizeof(v));
  (void)r;
}

struct Comm;

struct Request {
  Comm* comm;
  bool send;
  uint32_t seq;
  int tag;
  uint8_t* buf;
  uint64_t size;     // send: bytes; recv: capacity
  int nstripes = 0;  // send
  std::atomic<int> stripesDone{0};
  std::atomic<uint64_t> total{UINT64_MAX};  // recv: set by the first stripe header
  std::atomic<uint64_t> received{0};
};

struct Stripe {
  Request* req;
  uint64_t offset;
  uint32_t len;
};

// One data socket. Queue under Comm::mu; the rest belongs to its owner (the
// helper thread that drives it, or the caller's thread without threads).
struct DataSock {
  int fd = -1;
  std::deque<Stripe> queue;  // send side
  bool active = false;       // send: cur is being written
  Stripe cur{};
  SocketStripeHeader hdr{};
  uint8_t wire[kHdr] = {};  // hdr as it travels (encodeStripeHeader)
  size_t done = 0;          // send: header + payload bytes written; recv: payload bytes read
  size_t hdrGot = 0;
  Request* rreq = nullptr;
  bool stalled = false;  // recv: header read, its receive not posted yet
  bool eof = false;      // recv: the peer closed this socket between stripes
};

struct Comm {
  bool send = false;
  std::vector<DataSock> socks;
  int nthreads = 0;
  std::vector<std::thread> threads;
  std::vector<int> wakeFds;  // one per thread
  int doneFd = -1;           // eventfd: a request advanced or the comm failed
  int roomFd = -1;  // no threads, one sending socket: epoll fd, readable when it is writable
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::set<Request*> live;              // every request not yet freed
  std::map<uint32_t, Request*> posted;  // recv: by sequence number
  uint32_t nextSeq = 0;
  size_t rotate = 0;
  std::atomic<int> err{0};
  std::string errMsg;
  std::atomic<size_t> eofs{0};  // sockets that reached end of stream

  void setError(tideResult_t code, const std::string& msg) {
    {
      std::lock_guard<std::mutex> g(mu);
      if (err.load() != 0) return;
      errMsg = msg;
      err.store(code, std::memory_order_release);
    }
    TIDE_INFO("socket net: %s", msg.c_str());
    notify(doneFd);
  }
};

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

bool stepSock(Comm& c, DataSock& s, bool* moved) {
  return c.send ? stepSend(c, s, moved) : stepRecv(c, s, moved);
}

void helperMain(Comm* c, int t) {
  std::vector<DataSock*> mine;
  for (size_t i = t; i < c->socks.size(); i += c->nthreads) mine.push_back(&c->socks[i]);
  std::vector<pollfd> fds;
  bool broken = false;
  while (!c->stop.load(std::memory_order_acquire)) {
    bool moved = false;
    for (DataSock* s : mine) {
      if (broken) break;
      if (!stepSock(*c, *s, &moved)) broken = true;
    }
    if (moved && !broken) continue;
    fds.clear();
    fds.push_back(pollfd{c->wakeFds[t], POLLIN, 0});
    if (!broken) {
      for (DataSock* s : mine) {
        short ev = 0;
        if (c->send) {
          std::lock_guard<std::mutex> g(c->mu);
          if (s->active || !s->queue.empty()) ev = POLLOUT;
        } else if (!s->stalled && !s->eof) {
          ev = POLLIN;
        }
        if (ev) fds.push_back(pollfd{s->fd, ev, 0});
      }
    }
    int rc = ::poll(fds.data(), fds.size(), 1000);
    if (rc > 0 && (fds[0].revents & POLLIN)) drain(c->wakeFds[t]);
  }
}

void wakeHelpers(Comm& c) {
  for (int fd : c.wakeFds) notify(fd);
}

// Stops and joins the helper threads (idempotent; not from a helper). After
// it no thread but the caller's touches a request or a user buffer.
void stopHelpers(Comm& c) {
  c.stop.store(true, std::memory_order_release);
  wakeHelpers(c);
  for (std::thread& t : c.threads) {
    if (t.joinable()) t.join();
  }
}

// Closes every fd of a comm and frees it with its requests.
void destroyComm(Comm* c) {
  stopHelpers(*c);
  for (DataSock& s : c->socks) closeFd(s.fd);
  for (int& fd : c->wakeFds) closeFd(fd);
  closeFd(c->doneFd);
  closeFd(c->roomFd);
  for (Request* r : c->live) delete r;
  delete c;
}

// Builds a comm from connected sockets and starts its helper threads.
tideResult_t makeComm(bool send, std::vector<int>& fds, Comm** out) {
  auto c = std::make_unique<Comm>();
  c->send = send;
  for (int fd : fds) {
    int fl = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, fl | O_NONBLOCK);
    configureSocket(fd);
    DataSock s;
    s.fd = fd;
    c->socks.push_back(std::move(s));
  }
  fds.clear();
  c->nthreads = std::min(socketThreads(), static_cast<int>(c->socks.size()));
  if (c->nthreads > 0) {
    // On failure the comm closes the sockets it took and the fds it made.
    c->doneFd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (c->doneFd < 0) {
      int e = errno;
      destroyComm(c.release());
      return fail(tideSystemError, "eventfd: %s", strerror(e));
    }
    for (int t = 0; t < c->nthreads; ++t) {
      int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
      if (fd < 0) {
        int e = errno;
        destroyComm(c.release());
        return fail(tideSystemError, "eventfd: %s", strerror(e));
      }
      c->wakeFds.push_back(fd);
    }
    try {
      for (int t = 0; t < c->nthreads; ++t) c->threads.emplace_back(helperMain, c.get(), t);
    } catch (const std::system_error& e) {
      destroyComm(c.release());
      return fail(tideSystemError, "cannot start a helper thread: %s", e.what());
    }
  } else if (send && c->socks.size() == 1) {
    // A sending socket never turns readable; the poll fd must when there is
    // room to send (net.h), so it is an epoll fd watching for writability.
    c->roomFd = epoll_create1(EPOLL_CLOEXEC);
    epoll_event ev{};
    ev.events = EPOLLOUT;
    ev.data.fd = c->socks[0].fd;
    if (c->roomFd < 0 || epoll_ctl(c->roomFd, EPOLL_CTL_ADD, c->socks[0].fd, &ev) != 0) {
      int e = errno;
      destroyComm(c.release());
      return fail(tideSystemError, "epoll: %s", strerror(e));
    }
  }
  *out = c.release();
  return tideSuccess;
}

// Caller-driven progress (no helper threads).
void progressInline(Comm& c) {
  if (c.nthreads > 0 || c.err.load(std::memory_order_acquire) != 0) return;
  bool moved = false;
  for (DataSock& s : c.socks) {
    if (!stepSock(c, s, &moved)) return;
  }
}

tideResult_t netRegMr(void*, void*, size_t, int type, void** mhandle) {
  static int dummy;
  if (type != TIDE_NET_PTR_HOST) return fail(tideInvalidArgument, "only host memory");
  *mhandle = &dummy;
  return tideSuccess;
}

tideResult_t netDeregMr(void*, void*) { return tideSuccess; }

tideResult_t commError(Comm& c) {
  std::lock_guard<std::mutex> g(c.mu);
  return fail(static_cast<tideResult_t>(c.err.load()), "%s", c.errMsg.c_str());
}

// Posts `r` (a new send or receive of `c`): under c.mu gives it the next
// sequence number, registers it and runs queue() to hand it to the sockets;
// then wakes the helper threads and progresses inline (a socket stalled on
// this message resumes right here). Sets *request. With kMaxRequests live
// requests already, frees r and leaves *request null: "retry later".
template <typename Queue>
tideResult_t postRequest(Comm& c, Request* r, void** request, Queue queue) {
  {
    std::lock_guard<std::mutex> g(c.mu);
    if (c.live.size() >= kMaxRequests) {
      delete r;
      return tideSuccess;
    }
    r->seq = c.nextSeq++;
    c.live.insert(r);
    queue();
  }
  if (c.nthreads > 0) wakeHelpers(c);
  progressInline(c);
  *request = r;
  return tideSuccess;
}

tideResult_t netIsend(void* sendComm, const void* data, size_t size, int tag, void*,
                      void** request) {
  auto* c = static_cast<Comm*>(sendComm);
  if (c == nullptr || !c->send || request == nullptr || (size > 0 && data == nullptr))
    return fail(tideInvalidArgument, "isend: bad arguments");
  *request = nullptr;
  if (c->err.load(std::memory_order_acquire) != 0) return commError(*c);
  auto* r = new Request;
  r->comm = c;
  r->send = true;
  r->tag = tag;
  r->buf = static_cast<uint8_t*>(const_cast<void*>(data));
  r->size = size;
  uint64_t per = 0;
  socketStripes(size, static_cast<int>(c->socks.size()), &r->nstripes, &per);
  return postRequest(*c, r, request, [&] {
    for (int i = 0; i < r->nstripes; ++i) {
      uint64_t off = per * i;
      uint32_t len = static_cast<uint32_t>(std::min<uint64_t>(per, size - off));
      c->socks[(c->rotate + i) % c->socks.size()].queue.push_back(Stripe{r, off, len});
    }
    c->rotate += r->nstripes;
  });
}

tideResult_t netIrecv(void* recvComm, int n, void** data, const size_t* sizes, const int* tags,
                      void**, void** request) {
  auto* c = static_cast<Comm*>(recvComm);
  if (c == nullptr || c->send || n != 1 || request == nullptr || data == nullptr ||
      sizes == nullptr || tags == nullptr || (sizes[0] > 0 && data[0] == nullptr))
    return fail(tideInvalidArgument, "irecv: bad arguments (n=%d; this net takes n=1)", n);
  *request = nullptr;
  if (c->err.load(std::memory_order_acquire) != 0) return commError(*c);
  auto* r = new Request;
  r->comm = c;
  r->send = false;
  r->tag = tags[0];
  r->buf = static_cast<uint8_t*>(data[0]);
  r->size = sizes[0];
  return postRequest(*c, r, request, [&] { c->posted[r->seq] = r; });
}

tideResult_t netTest(void* request, int* done, size_t* sizes) {
  auto* r = static_cast<Request*>(request);
  if (r == nullptr || done == nullptr) return fail(tideInvalidArgument, "test: null");
  Comm& c = *r->comm;
  progressInline(c);
  bool fin;
  uint64_t bytes;
  auto check = [&] {
    if (r->send) {
      fin = r->stripesDone.load(std::memory_order_acquire) == r->nstripes;
      bytes = r->size;
    } else {
      bytes = r->total.load(std::memory_order_acquire);
      fin = bytes != UINT64_MAX && r->received.load(std::memory_order_acquire) == bytes;
    }
  };
  check();
  if (!fin && c.nthreads > 0) {
    drain(c.doneFd);  // then look again: a completion after this re-arms the fd
    check();
  }
  *done = 0;
  if (!fin && c.err.load(std::memory_order_acquire) == 0) return tideSuccess;
  // The comm failed: helper threads of its other sockets may still be moving
  // a stripe of this request; stop them before it and its buffer go back.
  if (!fin) stopHelpers(c);
  {
    std::lock_guard<std::mutex> g(c.mu);
    c.live.erase(r);
    if (!r->send) c.posted.erase(r->seq);
  }
  delete r;
  if (!fin) return commError(c);
  *done = 1;
  if (sizes != nullptr) sizes[0] = bytes;
  return tideSuccess;
}

tideResult_t netGetPollFd(void* comm, int* fd) {
  auto* c = static_cast<Comm*>(comm);
  *fd = c->nthreads > 0                    ? c->doneFd
        : c->roomFd >= 0                   ? c->roomFd
        : !c->send && c->socks.size() == 1 ? c->socks[0].fd
                                           : -1;
  return tideSuccess;
}

tideResult_t netClose(void* comm) {
  if (comm != nullptr) destroyComm(static_cast<Comm*>(comm));
  return tideSuccess;
}

}  // namespace socknet

using namespace socknet;  // NOLINT: the table below names this file's functions

const tideNet_v1_t kSocketNet = {
    "socket",     netInit,  netDevices, netGetProperties, netListen, netConnect,
    netAccept,    netRegMr, netDeregMr, netIsend,         netIrecv,  netTest,
    netGetPollFd, netClose, netClose,   netCloseListen,
};

TIDE_ON_LOAD(::tide::registerNet(&kSocketNet));

}  // namespace tide
