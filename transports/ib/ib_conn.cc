// The verbs net's connection set-up and teardown: comm creation (CQ, QPs,
// CTS memory, receive WRs), listen, the connector's and the acceptor's
// non-blocking state machines over the TCP side channel, and close
// (protocol in ib_net_internal.h). UNVERIFIED ON HARDWARE.
#include <errno.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "core/auth.h"
#include "core/config.h"
#include "core/log.h"
#include "core/socket.h"
#include "transports/common/net_devices.h"
#include "transports/ib/ib_net_internal.h"

namespace tide {
namespace ibnet {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint8_t kReady = 'R';
constexpr size_t kMaxPendingAccepts = 256;

void closeFd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

std::string peerName(int fd) {
  SockAddr a;
  a.len = sizeof(a.ss);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&a.ss), &a.len) != 0) return "?";
  return a.str();
}

// Sends/receives what is left of buf[0..n); false with *err on failure.
bool sendSome(int fd, const uint8_t* buf, size_t n, size_t* done, Status* err) {
  while (*done < n) {
    ssize_t r = ::send(fd, buf + *done, n - *done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (r > 0) {
      *done += static_cast<size_t>(r);
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    *err =
        remoteError("ib net: side channel to %s: send: %s", peerName(fd).c_str(), strerror(errno));
    return false;
  }
  return true;
}

bool recvSome(int fd, uint8_t* buf, size_t n, size_t* done, Status* err) {
  while (*done < n) {
    ssize_t r = ::recv(fd, buf + *done, n - *done, MSG_DONTWAIT);
    if (r > 0) {
      *done += static_cast<size_t>(r);
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    *err = remoteError("ib net: side channel to %s closed during connection set-up%s%s",
                       peerName(fd).c_str(), r < 0 ? ": " : "", r < 0 ? strerror(errno) : "");
    return false;
  }
  return true;
}

uint32_t randomPsn() {
  uint32_t v = 0;
  if (!randomBytes(&v, sizeof(v)).ok())
    v = static_cast<uint32_t>(Clock::now().time_since_epoch().count());
  return v & 0xffffff;
}

Status buildComm(Comm* c, bool send, int dev, int nqps) {
  c->send = send;
  c->devIndex = dev;
  c->nqps = nqps;
  TIDE_TRY(getDevice(dev, &c->dev));
  const IbPortInfo& port = c->dev->dev->port();
  int maxWr = port.maxQpWr > 0 ? port.maxQpWr : 16384;
  c->rqDepth = kIbSlots;
  if (send) {
    c->sqDepth = std::min(maxWr, kIbSlots * kMaxWrsPerMsg);
    c->wrsPerMsg = std::max(1, c->sqDepth / kIbSlots);
  } else {
    c->sqDepth = std::min(maxWr, 2 * kIbSlots);
  }
  if (c->sqDepth < kIbSlots || maxWr < c->rqDepth)
    return systemError("ib net: %s allows only %d WRs per queue", port.device.c_str(), maxWr);
  TIDE_TRY(ibCreateCq(c->dev->dev, nqps * (c->sqDepth + c->rqDepth) + 16, &c->cq));
  size_t ctsBytes = kIbSlots * sizeof(CtsEntry);
  c->cts = static_cast<CtsEntry*>(aligned_alloc(4096, 4096));
  if (c->cts == nullptr) return systemError("ib net: out of memory");
  memset(static_cast<void*>(c->cts), 0, 4096);
  TIDE_TRY(ibRegMr(c->dev->dev, c->cts, ctsBytes, -1, 0, &c->ctsMr));
  c->inlineBytes = INT32_MAX;
  for (int q = 0; q < nqps; ++q) {
    ibv_qp* qp = nullptr;
    int inl = 0;
    TIDE_TRY(ibCreateQp(c->dev->dev, c->cq.cq, c->sqDepth, c->rqDepth,
                        static_cast<int>(sizeof(CtsEntry)), &qp, &inl));
    c->qps.push_back(qp);
    c->psn.push_back(randomPsn());
    c->inlineBytes = std::min(c->inlineBytes, inl);
    TIDE_TRY(ibQpToInit(qp, port.port));
  }
  // Receive WRs may be posted in INIT; they are there before the peer can
  // send anything.
  c->poster = std::make_unique<VerbsPoster>(c);
  if (send) {
    c->sender = std::make_unique<IbSender>(nqps, c->wrsPerMsg, c->cts, c->poster.get(), "");
    TIDE_TRY(c->sender->start());
  } else {
    c->receiver = std::make_unique<IbReceiver>(nqps, c->cts, c->ctsMr->lkey, 0, 0, c->sqDepth,
                                               c->poster.get(), "");
    TIDE_TRY(c->receiver->start());
  }
  TIDE_TRY(c->fsm.apply(IbConnEvent::Create));
  TIDE_TRY(c->fsm.apply(IbConnEvent::ToInit));
  return Status::Ok();
}

// The side channel becomes the comm's liveness signal; getPollFd's epoll
// set watches it and the completion channel.
Status attachSideChannel(Comm* c, int fd) {
  c->sock = fd;
  c->peer = peerName(fd) + " (" + c->dev->dev->port().device + ":" +
            std::to_string(c->dev->dev->port().port) + ", local QPN " +
            std::to_string(c->qps[0]->qp_num) + ")";
  if (c->sender) c->sender->setPeerName(c->peer);
  if (c->receiver) c->receiver->setPeerName(c->peer);
  c->epfd = epoll_create1(EPOLL_CLOEXEC);
  if (c->epfd < 0) return errnoError(errno, "ib net: epoll_create1");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = c->cq.channel->fd;
  if (epoll_ctl(c->epfd, EPOLL_CTL_ADD, c->cq.channel->fd, &ev) != 0)
    return errnoError(errno, "ib net: epoll_ctl");
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.fd = fd;
  if (epoll_ctl(c->epfd, EPOLL_CTL_ADD, fd, &ev) != 0)
    return errnoError(errno, "ib net: epoll_ctl");
  return Status::Ok();
}

int configuredQps() {
  return static_cast<int>(std::clamp<int64_t>(knobInt(Knob::IbQpsPerConn), 1, kIbMaxQps));
}

struct Connecting {
  int fd = -1;
  int phase = 0;  // 0 TCP connect, 1 send info, 2 receive info, 3 send ready
  Comm* comm = nullptr;
  uint64_t nonce = 0;
  uint8_t out[kIbConnInfoBytes] = {};
  size_t sent = 0;
  uint8_t in[kIbConnInfoBytes] = {};
  size_t got = 0;
};

struct Pending {
  int fd = -1;
  int phase = 0;  // 0 receive info, 1 send info, 2 receive ready
  Comm* comm = nullptr;
  Clock::time_point since;
  uint8_t in[kIbConnInfoBytes] = {};
  size_t got = 0;
  uint8_t out[kIbConnInfoBytes] = {};
  size_t sent = 0;
  uint8_t ready = 0;
  size_t readyGot = 0;
};

struct ListenComm {
  int fd = -1;
  int dev = 0;
  uint64_t nonce = 0;
  std::vector<Pending> pending;
};

// One step of an accepted side channel: 1 = comm ready, 0 = not yet,
// -1 = drop it (*why says why).
int stepAccept(ListenComm& lc, Pending& p, Status* why) {
  if (p.phase == 0) {
    if (!recvSome(p.fd, p.in, sizeof(p.in), &p.got, why)) return -1;
    if (p.got < sizeof(p.in)) return 0;
    IbConnInfo peer;
    Status s = ibConnInfoDecode(p.in, sizeof(p.in), &peer);
    if (s.ok() && (peer.role != IbRole::Sender || peer.nonce != lc.nonce))
      s = invalidArgument("ib net: stray connection from %s (wrong nonce or role)",
                          peerName(p.fd).c_str());
    if (s.ok()) s = createComm(false, lc.dev, peer.nqps, &p.comm);
    if (s.ok()) s = p.comm->fsm.apply(IbConnEvent::GotHandle);
    if (s.ok()) {
      IbConnInfo mine;
      localInfo(*p.comm, lc.nonce, &mine);
      ibConnInfoEncode(mine, p.out);
      s = p.comm->fsm.apply(IbConnEvent::SendHandle);
    }
    if (s.ok()) s = connectComm(p.comm, peer);
    if (!s.ok()) {
      *why = s;
      return -1;
    }
    p.phase = 1;
  }
  if (p.phase == 1) {
    if (!sendSome(p.fd, p.out, sizeof(p.out), &p.sent, why)) return -1;
    if (p.sent < sizeof(p.out)) return 0;
    p.phase = 2;
  }
  if (!recvSome(p.fd, &p.ready, 1, &p.readyGot, why)) return -1;
  if (p.readyGot < 1) return 0;
  if (p.ready != kReady) {
    *why = remoteError("ib net: bad ready byte from %s", peerName(p.fd).c_str());
    return -1;
  }
  return 1;
}

void dropPending(Pending& p) {
  closeFd(p.fd);
  if (p.comm) destroyComm(p.comm);
  p.comm = nullptr;
}

}  // namespace

Status createComm(bool send, int dev, int nqps, Comm** out) {
  *out = nullptr;
  auto* c = new Comm;
  Status s = buildComm(c, send, dev, nqps);
  if (!s.ok()) {
    destroyComm(c);
    return s;
  }
  *out = c;
  return Status::Ok();
}

void localInfo(const Comm& c, uint64_t nonce, IbConnInfo* out) {
  const IbPortInfo& port = c.dev->dev->port();
  *out = IbConnInfo{};
  out->role = c.send ? IbRole::Sender : IbRole::Receiver;
  out->nonce = nonce;
  out->nqps = c.nqps;
  out->linkLayer = static_cast<uint8_t>(port.linkLayer);
  out->mtu = static_cast<uint8_t>(port.mtu);
  out->lid = port.lid;
  memcpy(out->gid, port.gid.raw, 16);
  if (c.send) {
    out->ctsAddr = reinterpret_cast<uintptr_t>(c.cts);
    out->ctsRkey = c.ctsMr->rkey;
  }
  for (int q = 0; q < c.nqps; ++q) {
    out->qpn[q] = c.qps[q]->qp_num;
    out->psn[q] = c.psn[q];
  }
}

Status connectComm(Comm* c, const IbConnInfo& peer) {
  const IbPortInfo& port = c->dev->dev->port();
  if (peer.nqps != c->nqps)
    return invalidArgument("ib net: the peer uses %d QPs per connection, this side %d", peer.nqps,
                           c->nqps);
  if (peer.linkLayer != port.linkLayer)
    return invalidArgument(
        "ib net: link layers differ (peer %u, local %d): InfiniBand and RoCE "
        "ports cannot be connected",
        peer.linkLayer, port.linkLayer);
  for (int q = 0; q < c->nqps; ++q) {
    IbRemoteQp r;
    r.qpn = peer.qpn[q];
    r.psn = peer.psn[q];
    r.lid = peer.lid;
    memcpy(r.gid, peer.gid, 16);
    r.mtu = static_cast<ibv_mtu>(ibPathMtu(static_cast<uint8_t>(port.mtu), peer.mtu));
    TIDE_TRY(ibQpToRtr(c->qps[q], port, r));
  }
  TIDE_TRY(c->fsm.apply(IbConnEvent::ToRtr));
  int timeout = static_cast<int>(std::clamp<int64_t>(knobInt(Knob::IbTimeout), 1, 31));
  int retry = static_cast<int>(std::clamp<int64_t>(knobInt(Knob::IbRetryCnt), 0, 7));
  for (int q = 0; q < c->nqps; ++q) TIDE_TRY(ibQpToRts(c->qps[q], c->psn[q], timeout, retry));
  TIDE_TRY(c->fsm.apply(IbConnEvent::ToRts));
  if (!c->send) c->receiver->setPeerFifo(peer.ctsAddr, peer.ctsRkey);
  return Status::Ok();
}

void destroyComm(Comm* c) {
  if (c == nullptr) return;
  if (c->fsm.state() != IbConnState::Closed) (void)c->fsm.apply(IbConnEvent::Close);
  for (ibv_qp* qp : c->qps) {
    ibQpToError(qp);
    ibv_destroy_qp(qp);
  }
  c->qps.clear();
  ibDestroyCq(&c->cq);
  if (c->ctsMr) ibv_dereg_mr(c->ctsMr);
  free(c->cts);
  closeFd(c->sock);
  closeFd(c->epfd);
  std::set<Request*> live = std::move(c->live);
  for (Request* r : live) freeRequest(r);
  delete c;
}

tideResult_t netListen(int dev, void* handle, void** listenComm) {
  if (handle == nullptr || listenComm == nullptr || dev < 0 || dev >= numDevices())
    return fail(invalidArgument("ib net: listen: bad arguments (device %d)", dev));
  std::vector<NetDevice> ifs = findNetDevices(knobString(Knob::SocketIfname), AF_UNSPEC);
  if (ifs.empty()) {
    return fail(
        systemError("ib net: no interface for the set-up side channel matches "
                    "TIDE_SOCKET_IFNAME='%s'",
                    knobString(Knob::SocketIfname).c_str()));
  }
  Socket s;
  Status st = Socket::listen(ifs[0].addr, SOMAXCONN, &s);
  if (!st.ok()) return fail(st);
  SockAddr bound;
  if (!s.setNonBlocking(true).ok() || !s.localAddr(&bound).ok())
    return fail(systemError("ib net: listen: cannot configure the side channel"));
  auto lc = std::make_unique<ListenComm>();
  if (!randomBytes(&lc->nonce, sizeof(lc->nonce)).ok())
    return fail(systemError("ib net: no random bytes"));
  lc->dev = dev;
  IbHandle h;
  h.nonce = lc->nonce;
  h.addrLen = static_cast<uint16_t>(std::min<size_t>(bound.len, kIbAddrMax));
  memcpy(h.addr, &bound.ss, h.addrLen);
  memset(handle, 0, TIDE_NET_HANDLE_MAXSIZE);
  ibHandleEncode(h, static_cast<uint8_t*>(handle));
  lc->fd = s.release();
  TIDE_INFO("ib net: listening on %s (side channel of %s)", bound.str().c_str(),
            portInfo(dev).device.c_str());
  *listenComm = lc.release();
  return tideSuccess;
}

tideResult_t netConnect(int dev, void* handle, void** sendComm) {
  if (handle == nullptr || sendComm == nullptr)
    return fail(invalidArgument("ib net: connect: null"));
  *sendComm = nullptr;
  uint8_t* slot = static_cast<uint8_t*>(handle) + kIbHandleStateOffset;
  Connecting* cs = nullptr;
  // NOLINTNEXTLINE(bugprone-sizeof-expression): the slot holds the pointer itself
  memcpy(&cs, slot, sizeof(cs));
  auto abandon = [&](const Status& s) {
    // NOLINTNEXTLINE(bugprone-sizeof-expression): the slot holds the pointer itself
    memset(slot, 0, sizeof(cs));
    closeFd(cs->fd);
    destroyComm(cs->comm);
    delete cs;
    return fail(s);
  };
  if (cs == nullptr) {
    if (dev < 0 || dev >= numDevices()) return fail(invalidArgument("ib net: no device %d", dev));
    IbHandle h;
    Status s = ibHandleDecode(static_cast<const uint8_t*>(handle), &h);
    if (!s.ok()) return fail(s);
    SockAddr a;
    memcpy(&a.ss, h.addr, h.addrLen);
    a.len = h.addrLen;
    int fd = ::socket(a.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return fail(errnoError(errno, "ib net: socket"));
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&a.ss), a.len) != 0 &&
        errno != EINPROGRESS) {
      int e = errno;
      ::close(fd);
      return fail(remoteError("ib net: side channel to %s: %s", a.str().c_str(), strerror(e)));
    }
    cs = new Connecting;
    cs->fd = fd;
    cs->nonce = h.nonce;
    // NOLINTNEXTLINE(bugprone-sizeof-expression): the slot holds the pointer itself
    memcpy(slot, &cs, sizeof(cs));
  }
  Status err;
  if (cs->phase == 0) {
    pollfd p{cs->fd, POLLOUT, 0};
    if (::poll(&p, 1, 0) <= 0) return tideSuccess;
    int e = 0;
    socklen_t len = sizeof(e);
    getsockopt(cs->fd, SOL_SOCKET, SO_ERROR, &e, &len);
    if (e != 0) return abandon(remoteError("ib net: side channel connect: %s", strerror(e)));
    Status s = createComm(true, dev, configuredQps(), &cs->comm);
    if (!s.ok()) return abandon(s);
    IbConnInfo mine;
    localInfo(*cs->comm, cs->nonce, &mine);
    ibConnInfoEncode(mine, cs->out);
    cs->phase = 1;
  }
  if (cs->phase == 1) {
    if (!sendSome(cs->fd, cs->out, sizeof(cs->out), &cs->sent, &err)) return abandon(err);
    if (cs->sent < sizeof(cs->out)) return tideSuccess;
    Status s = cs->comm->fsm.apply(IbConnEvent::SendHandle);
    if (!s.ok()) return abandon(s);
    cs->phase = 2;
  }
  if (cs->phase == 2) {
    if (!recvSome(cs->fd, cs->in, sizeof(cs->in), &cs->got, &err)) return abandon(err);
    if (cs->got < sizeof(cs->in)) return tideSuccess;
    IbConnInfo peer;
    Status s = ibConnInfoDecode(cs->in, sizeof(cs->in), &peer);
    if (s.ok() && (peer.role != IbRole::Receiver || peer.nonce != cs->nonce))
      s = remoteError("ib net: the listener answered with a foreign connection info");
    if (s.ok()) s = cs->comm->fsm.apply(IbConnEvent::GotHandle);
    if (s.ok()) s = connectComm(cs->comm, peer);
    if (!s.ok()) return abandon(s);
    cs->phase = 3;
  }
  size_t one = 0;
  if (!sendSome(cs->fd, &kReady, 1, &one, &err)) return abandon(err);
  if (one < 1) return tideSuccess;
  Status s = attachSideChannel(cs->comm, cs->fd);
  cs->fd = -1;  // owned by the comm now
  if (!s.ok()) return abandon(s);
  // NOLINTNEXTLINE(bugprone-sizeof-expression): the slot holds the pointer itself
  memset(slot, 0, sizeof(cs));
  TIDE_INFO("ib net: connected to %s, %d QPs", cs->comm->peer.c_str(), cs->comm->nqps);
  *sendComm = cs->comm;
  delete cs;
  return tideSuccess;
}

tideResult_t netAccept(void* listenComm, void** recvComm) {
  auto* lc = static_cast<ListenComm*>(listenComm);
  if (lc == nullptr || recvComm == nullptr) return fail(invalidArgument("ib net: accept: null"));
  *recvComm = nullptr;
  for (;;) {
    int fd = ::accept4(lc->fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EMFILE || errno == ENFILE) break;
      return fail(errnoError(errno, "ib net: accept"));
    }
    if (lc->pending.size() >= kMaxPendingAccepts) {
      ::close(fd);
      continue;
    }
    Pending p;
    p.fd = fd;
    p.since = Clock::now();
    lc->pending.push_back(p);
  }
  auto now = Clock::now();
  for (size_t i = 0; i < lc->pending.size();) {
    Pending& p = lc->pending[i];
    Status why;
    int r = stepAccept(*lc, p, &why);
    if (r == 0 && now - p.since > std::chrono::seconds(kSetupSeconds)) {
      why = timeoutError("ib net: connection from %s not set up within %d s",
                         peerName(p.fd).c_str(), kSetupSeconds);
      r = -1;
    }
    if (r < 0) {
      TIDE_INFO("%s", why.message().c_str());
      dropPending(p);
      lc->pending.erase(lc->pending.begin() + static_cast<long>(i));
      continue;
    }
    if (r > 0) {
      Comm* c = p.comm;
      Status s = attachSideChannel(c, p.fd);
      lc->pending.erase(lc->pending.begin() + static_cast<long>(i));
      if (!s.ok()) {
        destroyComm(c);
        return fail(s);
      }
      TIDE_INFO("ib net: accepted %s, %d QPs", c->peer.c_str(), c->nqps);
      *recvComm = c;
      return tideSuccess;
    }
    ++i;
  }
  return tideSuccess;
}

tideResult_t netCloseListen(void* listenComm) {
  auto* lc = static_cast<ListenComm*>(listenComm);
  if (lc == nullptr) return tideSuccess;
  closeFd(lc->fd);
  for (Pending& p : lc->pending) dropPending(p);
  delete lc;
  return tideSuccess;
}

tideResult_t netClose(void* comm) {
  destroyComm(static_cast<Comm*>(comm));
  return tideSuccess;
}

}  // namespace ibnet
}  // namespace tide
