// UCX net comms: workers, endpoints and the TCP side channel that carries
// worker addresses (see ucx_net.h for the design, ucx_internal.h for the files).
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "core/auth.h"
#include "core/log.h"
#include "transports/ucx/ucx_internal.h"
#include "transports/ucx/ucx_net.h"

namespace tide {
namespace ucx {

constexpr uint32_t kHelloMagic = 0x55435848;  // "HXCU"
constexpr size_t kMaxAddressBytes = 64 << 10;

void epError(void* arg, ucp_ep_h /*ep*/, ucs_status_t status) {
  auto* c = static_cast<UcxComm*>(arg);
  if (!c->isSend) {
    // A peer that closed (or died) after its last sends completed may have
    // left eager messages in this worker's queue that the caller has yet to
    // receive: like a closed side channel, this fails the comm only after
    // kPeerGoneGrace without progress (ucx_data.cc).
    if (!c->peerGone) {
      c->peerGone = true;
      c->peerGoneAt = std::chrono::steady_clock::now();
      TIDE_INFO("ucx net: recv comm %p: peer endpoint failed (%s)", static_cast<void*>(c),
                ucs_status_string(status));
    }
    return;
  }
  if (c->err == tideSuccess) {
    c->err = tideRemoteError;
    c->errMsg = std::string("peer failed: ") + ucs_status_string(status);
    TIDE_INFO("ucx net: send comm %p: %s", static_cast<void*>(c), c->errMsg.c_str());
  }
}

// Creates the comm's worker (and its poll fds).
tideResult_t newComm(bool isSend, UcxComm** out) {
  Global& g = global();
  if (!g.ctx) return fail(tideInvalidUsage, "net not initialized");
  auto c = std::make_unique<UcxComm>();
  c->isSend = isSend;
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  ucs_status_t st = ucp_worker_create(g.ctx, &wp, &c->worker);
  if (st != UCS_OK) return fail(tideSystemError, "ucp_worker_create: %s", ucs_status_string(st));
  if (g.wakeup) {
    int wfd = -1;
    if (ucp_worker_get_efd(c->worker, &wfd) == UCS_OK) {
      c->epfd = epoll_create1(EPOLL_CLOEXEC);
      c->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
      epoll_event ev{};
      ev.events = EPOLLIN;
      if (c->epfd < 0 || c->evfd < 0 || epoll_ctl(c->epfd, EPOLL_CTL_ADD, wfd, &ev) != 0 ||
          epoll_ctl(c->epfd, EPOLL_CTL_ADD, c->evfd, &ev) != 0) {
        if (c->epfd >= 0) close(c->epfd);
        if (c->evfd >= 0) close(c->evfd);
        c->epfd = c->evfd = -1;
      }
    }
  }
  *out = c.release();
  return tideSuccess;
}

// Creates one more endpoint to the peer's worker (appended to c->eps).
tideResult_t addEp(UcxComm* c, const uint8_t* peerAddr) {
  // Peer-failure handling where the transports support it; UCX 1.13's
  // shared-memory transports do not (ucp_ep_create is then "unreachable"),
  // so fall back to no error handling and rely on the side channel.
  // Remembered per process so the unsupported attempt (which UCX logs as an
  // error) happens once.
  static std::atomic<bool> peerUnsupported{false};
  for (int mode = peerUnsupported.load() ? 1 : 0; mode < 2; ++mode) {
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                    UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.address = reinterpret_cast<const ucp_address_t*>(peerAddr);
    ep.err_mode = mode == 0 ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
    ep.err_handler.cb = epError;
    ep.err_handler.arg = c;
    ucp_ep_h h = nullptr;
    ucs_status_t st = ucp_ep_create(c->worker, &ep, &h);
    if (st == UCS_OK) {
      c->eps.push_back(h);
      c->peerMode = mode == 0;
      if (mode == 1 && c->eps.size() == 1) {
        TIDE_INFO(
            "ucx net: transports without peer-failure support; peer death is detected "
            "through the side channel");
      }
      return tideSuccess;
    }
    if (st != UCS_ERR_UNREACHABLE || mode == 1) {
      return fail(tideRemoteError, "ucp_ep_create: %s", ucs_status_string(st));
    }
    peerUnsupported = true;
  }
  return tideInternalError;
}

// Creates the comm's endpoints to the peer's worker: `offer` of them, or
// (`decide`, the acceptor) the smaller of the connector's offer and its own
// TIDE_UCX_NSTREAMS. Every endpoint is its own UCX connection (own TCP
// socket under tcp); tag matching stays on the one worker.
tideResult_t connectEps(UcxComm* c, const std::vector<uint8_t>& peerAddr, int offer, bool decide) {
  tideResult_t r = addEp(c, peerAddr.data());
  if (r != tideSuccess) return r;
  int n = offer;
  if (decide) {
    bool tcp = epUsesTcp(c->eps[0]);
    n = std::min(offer, configuredStreams());
    TIDE_INFO("ucx net: recv comm %p: %d stream(s) (tcp %d, offered %d)", static_cast<void*>(c), n,
              tcp ? 1 : 0, offer);
  }
  while (static_cast<int>(c->eps.size()) < n) {
    if ((r = addEp(c, peerAddr.data())) != tideSuccess) return r;
  }
  c->nstreams = n;
  return tideSuccess;
}

// Adds the side-channel socket to the comm's poll set.
void adoptSide(UcxComm* c, Socket sock) {
  c->side = std::move(sock);
  if (c->epfd >= 0) {
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    epoll_ctl(c->epfd, EPOLL_CTL_ADD, c->side.fd(), &ev);
  }
}

// Checks the side channel; a closed one means the peer closed its comm or
// died. Nothing is ever sent on it after set-up.
// (The endpoint error callback may have marked the peer gone first.) A
// closed side channel is closed here too, so it stops waking pollers.
void checkSide(UcxComm* c) {
  if (!c->side.valid()) return;
  char b;
  ssize_t n = recv(c->side.fd(), &b, 1, MSG_DONTWAIT | MSG_PEEK);
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
    if (!c->peerGone) {
      c->peerGone = true;
      c->peerGoneAt = std::chrono::steady_clock::now();
    }
    if (c->epfd >= 0) epoll_ctl(c->epfd, EPOLL_CTL_DEL, c->side.fd(), nullptr);
    c->side.close();
  }
}

// Starts the set-up handshake on a comm whose endpoint exists: posts the
// receive of the peer's hello and sends ours (payload: the side channel's
// nonce) as a synchronous send. Why: UCX 1.13 learns the peer's endpoint id
// (needed for rendezvous replies and acknowledgements) lazily, by a wire-up
// request sent on the first such send. Were that the first large send of a
// comm closed right away, the request would race with the close: over tcp
// the peer then makes an endpoint to answer a worker being destroyed, its
// connect is refused, and UCX fails an assertion (ucp_request.c "got REP
// message", tcp_ep.c CTX_TYPE_TX) and aborts the process. A synchronous
// send needs the peer's id too, so the exchange completes here, before the
// comm is handed out.
tideResult_t startHello(UcxComm* c, uint64_t nonce) {
  c->helloOut = nonce;
  for (int i = 0; i < c->nstreams; ++i) {
    ucp_request_param_t rp{};
    rp.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    ucs_status_ptr_t r = ucp_tag_recv_nbx(c->worker, &c->helloIn[i], sizeof(c->helloIn[i]),
                                          kHelloTag, ~uint64_t{0}, &rp);
    if (UCS_PTR_IS_ERR(r)) {
      return fail(tideSystemError, "handshake: ucp_tag_recv_nbx: %s",
                  ucs_status_string(UCS_PTR_STATUS(r)));
    }
    c->helloRecv[i] = r;
  }
  for (int i = 0; i < c->nstreams; ++i) {
    ucp_request_param_t sp{};
    ucs_status_ptr_t r =
        ucp_tag_send_sync_nbx(c->eps[i], &c->helloOut, sizeof(c->helloOut), kHelloTag, &sp);
    if (UCS_PTR_IS_ERR(r)) {
      return fail(tideRemoteError, "handshake: ucp_tag_send_nbx: %s",
                  ucs_status_string(UCS_PTR_STATUS(r)));
    }
    c->helloSend[i] = r;
    if (r == nullptr) ++c->helloSends;
  }
  return tideSuccess;
}

// Progresses the handshake; *done once our hello left and the peer's (with
// the expected nonce) arrived. Non-blocking.
tideResult_t progressHello(UcxComm* c, bool* done) {
  for (int i = 0; i < 64 && ucp_worker_progress(c->worker) != 0; ++i) {
  }
  for (int i = 0; i < c->nstreams; ++i) {
    if (!c->helloSend[i]) continue;
    ucs_status_t st = ucp_request_check_status(c->helloSend[i]);
    if (st == UCS_INPROGRESS) continue;
    ucp_request_free(c->helloSend[i]);
    c->helloSend[i] = nullptr;
    if (st != UCS_OK) return fail(tideRemoteError, "handshake send: %s", ucs_status_string(st));
    ++c->helloSends;
  }
  for (int i = 0; i < c->nstreams; ++i) {
    if (!c->helloRecv[i]) continue;
    ucp_tag_recv_info_t info{};
    ucs_status_t st = ucp_tag_recv_request_test(c->helloRecv[i], &info);
    if (st == UCS_INPROGRESS) continue;
    ucp_request_free(c->helloRecv[i]);
    c->helloRecv[i] = nullptr;
    if (st != UCS_OK) return fail(tideRemoteError, "handshake recv: %s", ucs_status_string(st));
    if (info.length != sizeof(c->helloIn[i]) || c->helloIn[i] != c->helloOut)
      return fail(tideRemoteError, "handshake: unexpected peer (bad nonce)");
    ++c->helloRecvs;
  }
  if (c->helloSends == c->nstreams && c->helloRecvs == c->nstreams && !c->flushed) {
    // Then flush the worker: wire-up messages still queued (a lane still
    // connecting) leave before the comm is handed out.
    if (!c->flushReq) {
      ucp_request_param_t fp{};
      ucs_status_ptr_t f = ucp_worker_flush_nbx(c->worker, &fp);
      if (UCS_PTR_IS_ERR(f)) {
        return fail(tideRemoteError, "handshake flush: %s", ucs_status_string(UCS_PTR_STATUS(f)));
      }
      c->flushReq = f;
      c->flushed = f == nullptr;
    } else {
      ucs_status_t st = ucp_request_check_status(c->flushReq);
      if (st != UCS_INPROGRESS) {
        ucp_request_free(c->flushReq);
        c->flushReq = nullptr;
        if (st != UCS_OK)
          return fail(tideRemoteError, "handshake flush: %s", ucs_status_string(st));
        c->flushed = true;
      }
    }
  }
  *done = c->flushed;
  if (*done) return tideSuccess;
  if (c->err != tideSuccess) return fail(c->err, "handshake: %s", c->errMsg.c_str());
  checkSide(c);
  if (c->peerGone && std::chrono::steady_clock::now() - c->peerGoneAt > kPeerGoneGrace)
    return fail(tideRemoteError, "handshake: peer closed the side channel");
  return tideSuccess;
}

tideResult_t workerAddress(UcxComm* c, std::vector<uint8_t>* out) {
  ucp_address_t* addr = nullptr;
  size_t len = 0;
  ucs_status_t st = ucp_worker_get_address(c->worker, &addr, &len);
  if (st != UCS_OK)
    return fail(tideSystemError, "ucp_worker_get_address: %s", ucs_status_string(st));
  out->assign(reinterpret_cast<uint8_t*>(addr), reinterpret_cast<uint8_t*>(addr) + len);
  ucp_worker_release_address(c->worker, addr);
  return tideSuccess;
}

// ---- Side channel: {magic, nonce, len, bytes} in each direction ----------------------

struct Wire {
  uint32_t magic;
  uint32_t len;
  uint64_t nonce;
};

// Non-blocking framed exchange on one socket.
struct Exchange {
  Socket sock;
  std::vector<uint8_t> out;  // Wire + payload
  size_t outDone = 0;
  std::vector<uint8_t> in;
  size_t inDone = 0;
  Wire hdr{};
  bool hdrDone = false;

  void setOut(uint64_t nonce, const std::vector<uint8_t>& payload) {
    Wire w{kHelloMagic, static_cast<uint32_t>(payload.size()), nonce};
    out.resize(sizeof(w) + payload.size());
    memcpy(out.data(), &w, sizeof(w));
    if (!payload.empty()) memcpy(out.data() + sizeof(w), payload.data(), payload.size());
    outDone = 0;
  }
  // *done when everything was written.
  tideResult_t pushOut(bool* done) {
    while (outDone < out.size()) {
      size_t n = 0;
      Status s = sock.sendSome(out.data() + outDone, out.size() - outDone, &n);
      if (!s.ok()) return fail(s.code(), "side channel: %s", s.message().c_str());
      if (n == 0) break;
      outDone += n;
    }
    *done = outDone == out.size();
    return tideSuccess;
  }
  // *done when a whole frame with `nonce` arrived (payload in `in`).
  tideResult_t pullIn(uint64_t nonce, bool* done) {
    *done = false;
    while (!hdrDone) {
      size_t n = 0;
      uint8_t* p = reinterpret_cast<uint8_t*>(&hdr);
      Status s = sock.recvSome(p + inDone, sizeof(hdr) - inDone, &n);
      if (!s.ok()) return fail(s.code(), "side channel: %s", s.message().c_str());
      if (n == 0) return tideSuccess;
      inDone += n;
      if (inDone == sizeof(hdr)) {
        if (hdr.magic != kHelloMagic || hdr.nonce != nonce || hdr.len > kMaxAddressBytes)
          return fail(tideRemoteError, "side channel: unexpected peer (bad magic or nonce)");
        hdrDone = true;
        in.resize(hdr.len);
        inDone = 0;
      }
    }
    while (inDone < in.size()) {
      size_t n = 0;
      Status s = sock.recvSome(in.data() + inDone, in.size() - inDone, &n);
      if (!s.ok()) return fail(s.code(), "side channel: %s", s.message().c_str());
      if (n == 0) return tideSuccess;
      inDone += n;
    }
    *done = true;
    return tideSuccess;
  }
};

// Side-channel payload: {uint32 streams, uint32 stripe unit, worker address}.
std::vector<uint8_t> withStreams(int n, size_t unit, const std::vector<uint8_t>& addr) {
  uint32_t v[2] = {static_cast<uint32_t>(n), static_cast<uint32_t>(unit)};
  std::vector<uint8_t> out(sizeof(v) + addr.size());
  memcpy(out.data(), v, sizeof(v));
  if (!addr.empty()) memcpy(out.data() + sizeof(v), addr.data(), addr.size());
  return out;
}

tideResult_t splitStreams(const std::vector<uint8_t>& in, int* n, size_t* unit,
                          std::vector<uint8_t>* addr) {
  uint32_t v[2] = {};
  if (in.size() <= sizeof(v)) return fail(tideRemoteError, "side channel: short peer address");
  memcpy(v, in.data(), sizeof(v));
  if (v[0] < 1 || v[0] > static_cast<uint32_t>(kMaxStreams) || v[1] < kMinStripeUnit)
    return fail(tideRemoteError, "side channel: bad stream count %u or unit %u", v[0], v[1]);
  *n = static_cast<int>(v[0]);
  *unit = v[1];
  addr->assign(in.begin() + sizeof(v), in.end());
  return tideSuccess;
}

struct UcxListen {
  Socket lsock;
  uint64_t nonce = 0;
  struct Pending {
    Exchange x;
    UcxComm* comm = nullptr;
    bool replying = false;
    bool hello = false;  // reply sent; set-up handshake under way
  };
  std::vector<std::unique_ptr<Pending>> pending;
};

struct ConnectState {
  Exchange x;
  bool connected = false;  // TCP connect finished
  bool sent = false;
  bool hello = false;  // endpoint made; set-up handshake under way
  UcxComm* comm = nullptr;
  uint64_t nonce = 0;
};

tideResult_t ucxListen(int dev, void* handle, void** listenComm) {
  Global& g = global();
  if (dev != 0 || !g.ctx) return fail(tideInvalidArgument, "listen: no device %d", dev);
  auto l = std::make_unique<UcxListen>();
  Status s = Socket::listen(g.ifaddr, 128, &l->lsock);
  if (s.ok()) s = l->lsock.setNonBlocking(true);
  SockAddr bound;
  if (s.ok()) s = l->lsock.localAddr(&bound);
  if (!s.ok()) return fail(s.code(), "listen: %s", s.message().c_str());
  if (!randomBytes(reinterpret_cast<uint8_t*>(&l->nonce), sizeof(l->nonce)).ok()) {
    return fail(tideSystemError, "listen: no random bytes");
  }
  UcxHandle h{};
  h.magic = kUcxHandleMagic;
  h.family = static_cast<uint16_t>(bound.family());
  h.port = static_cast<uint16_t>(bound.port());
  if (bound.family() == AF_INET) {
    memcpy(h.addr, &reinterpret_cast<sockaddr_in*>(&bound.ss)->sin_addr, 4);
  } else {
    memcpy(h.addr, &reinterpret_cast<sockaddr_in6*>(&bound.ss)->sin6_addr, 16);
  }
  h.nonce = l->nonce;
  memset(handle, 0, kUcxStateOffset + sizeof(void*));
  memcpy(handle, &h, sizeof(h));
  *listenComm = l.release();
  return tideSuccess;
}

tideResult_t connectStart(const UcxHandle& h, ConnectState* cs) {
  SockAddr a;
  if (h.family == AF_INET) {
    auto* sin = reinterpret_cast<sockaddr_in*>(&a.ss);
    sin->sin_family = AF_INET;
    memcpy(&sin->sin_addr, h.addr, 4);
    a.len = sizeof(sockaddr_in);
  } else {
    auto* sin6 = reinterpret_cast<sockaddr_in6*>(&a.ss);
    sin6->sin6_family = AF_INET6;
    memcpy(&sin6->sin6_addr, h.addr, 16);
    a.len = sizeof(sockaddr_in6);
  }
  a.setPort(h.port);
  int fd = socket(a.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return fail(tideSystemError, "connect: socket: %s", strerror(errno));
  cs->x.sock = Socket(fd);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a.ss), a.len) != 0 && errno != EINPROGRESS) {
    return fail(tideRemoteError, "connect to %s: %s", a.str().c_str(), strerror(errno));
  }
  cs->nonce = h.nonce;
  tideResult_t r = newComm(true, &cs->comm);
  if (r != tideSuccess) return r;
  std::vector<uint8_t> addr;
  if ((r = workerAddress(cs->comm, &addr)) != tideSuccess) return r;
  int offer = configuredStreams();
  cs->x.setOut(h.nonce, withStreams(offer, configuredUnit(offer), addr));
  return tideSuccess;
}

void freeConnectState(ConnectState* cs) {
  if (cs->comm) destroyComm(cs->comm);
  delete cs;
}

tideResult_t ucxConnect(int dev, void* handle, void** sendComm) {
  *sendComm = nullptr;
  sweepClosing();
  if (dev != 0) return fail(tideInvalidArgument, "connect: no device %d", dev);
  UcxHandle h;
  memcpy(&h, handle, sizeof(h));
  if (h.magic != kUcxHandleMagic) return fail(tideInvalidArgument, "connect: not a ucx handle");
  ConnectState* cs = nullptr;
  uint8_t* statePtr = static_cast<uint8_t*>(handle) + kUcxStateOffset;
  // NOLINTNEXTLINE(bugprone-sizeof-expression): the slot holds the pointer itself
  memcpy(&cs, statePtr, sizeof(cs));
  tideResult_t r = tideSuccess;
  if (!cs) {
    cs = new ConnectState;
    // NOLINTNEXTLINE(bugprone-sizeof-expression): the slot holds the pointer itself
    memcpy(statePtr, &cs, sizeof(cs));
    r = connectStart(h, cs);
  }
  if (r == tideSuccess && !cs->connected) {
    pollfd p{cs->x.sock.fd(), POLLOUT, 0};
    if (poll(&p, 1, 0) > 0) {
      int err = 0;
      socklen_t len = sizeof(err);
      getsockopt(cs->x.sock.fd(), SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) {
        r = fail(tideRemoteError, "connect: side channel: %s", strerror(err));
      } else {
        cs->connected = true;
      }
    }
  }
  if (r == tideSuccess && cs->connected && !cs->sent) r = cs->x.pushOut(&cs->sent);
  if (r == tideSuccess && cs->sent && !cs->hello) {
    bool got = false;
    r = cs->x.pullIn(cs->nonce, &got);
    if (r == tideSuccess && got) {
      int n = 0;
      std::vector<uint8_t> peer;
      r = splitStreams(cs->x.in, &n, &cs->comm->unit, &peer);
      if (r == tideSuccess) r = connectEps(cs->comm, peer, n, false);
      if (r == tideSuccess) {
        adoptSide(cs->comm, std::move(cs->x.sock));
        r = startHello(cs->comm, cs->nonce);
        cs->hello = true;
      }
    }
  }
  bool ready = false;
  if (r == tideSuccess && cs->hello) r = progressHello(cs->comm, &ready);
  if (r != tideSuccess || ready) {
    // NOLINTNEXTLINE(bugprone-sizeof-expression): the slot holds the pointer itself
    memset(statePtr, 0, sizeof(cs));
    if (r == tideSuccess) {
      *sendComm = cs->comm;
      cs->comm = nullptr;
    }
    freeConnectState(cs);
  }
  return r;
}

tideResult_t ucxAccept(void* listenComm, void** recvComm) {
  *recvComm = nullptr;
  sweepClosing();
  auto* l = static_cast<UcxListen*>(listenComm);
  for (;;) {
    int fd = accept4(l->lsock.fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
      return fail(tideSystemError, "accept: %s", strerror(errno));
    }
    auto p = std::make_unique<UcxListen::Pending>();
    p->x.sock = Socket(fd);
    l->pending.push_back(std::move(p));
  }
  for (size_t i = 0; i < l->pending.size(); ++i) {
    UcxListen::Pending& p = *l->pending[i];
    tideResult_t r = tideSuccess;
    if (!p.replying) {
      bool got = false;
      r = p.x.pullIn(l->nonce, &got);
      if (r == tideSuccess && got) {
        int offer = 0;
        std::vector<uint8_t> addr, peer;
        size_t unit = 0;
        r = splitStreams(p.x.in, &offer, &unit, &peer);
        if (r == tideSuccess) r = newComm(false, &p.comm);
        if (r == tideSuccess) p.comm->unit = unit;
        if (r == tideSuccess) r = connectEps(p.comm, peer, offer, true);
        if (r == tideSuccess) r = startHello(p.comm, l->nonce);
        if (r == tideSuccess) r = workerAddress(p.comm, &addr);
        if (r == tideSuccess) {
          p.x.setOut(l->nonce, withStreams(p.comm->nstreams, p.comm->unit, addr));
          p.replying = true;
        }
      }
    }
    if (r == tideSuccess && p.replying && !p.hello) {
      bool sent = false;
      r = p.x.pushOut(&sent);
      if (r == tideSuccess && sent) {
        adoptSide(p.comm, std::move(p.x.sock));
        p.hello = true;
      }
    }
    bool ready = false;
    if (r == tideSuccess && p.hello) r = progressHello(p.comm, &ready);
    if (r != tideSuccess) {
      // A stray or broken connector: drop it and keep accepting others.
      if (p.comm) destroyComm(p.comm);
      l->pending.erase(l->pending.begin() + i);
      --i;
      continue;
    }
    if (ready) {
      *recvComm = p.comm;
      l->pending.erase(l->pending.begin() + i);
      return tideSuccess;
    }
  }
  return tideSuccess;
}

tideResult_t ucxCloseListen(void* listenComm) {
  auto* l = static_cast<UcxListen*>(listenComm);
  for (auto& p : l->pending) {
    if (p->comm) destroyComm(p->comm);
  }
  delete l;
  return tideSuccess;
}

tideResult_t ucxCloseComm(void* comm) {
  if (comm) destroyComm(static_cast<UcxComm*>(comm));
  return tideSuccess;
}

}  // namespace ucx
}  // namespace tide
