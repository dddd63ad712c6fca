#include "transports/ucx/ucx_net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/auth.h"
#include "core/config.h"
#include "core/log.h"
#include "core/registry.h"
#include "core/socket.h"
#include "transports/ib/ib_logic.h"
#include "transports/ib/mr_cache.h"
#include "transports/net/net_registry.h"

namespace tide {
namespace {

constexpr int kMaxRecvs = 8;
constexpr int kIdleBeforeArm = 32;  // idle test() calls before the worker is armed
constexpr uint32_t kHelloMagic = 0x55435848;  // "HXCU"
constexpr size_t kMaxAddressBytes = 64 << 10;
// After the side channel closes, data the peer flushed before closing may
// still be in flight: requests fail only when this much time passed.
constexpr auto kPeerGoneGrace = std::chrono::milliseconds(1000);

// ---- Process-wide state ---------------------------------------------------------------

struct Global {
  std::mutex mu;
  bool inited = false;
  tideResult_t initResult = tideSuccess;
  ucp_context_h ctx = nullptr;
  bool wakeup = false;
  std::unique_ptr<MrCache> mrs;
  std::string ifname;  // side-channel interface
  SockAddr ifaddr;     // its address (port 0)
  std::string devName;
};

Global& global() {
  static Global* g = new Global;  // never destroyed: comms may outlive static destructors
  return *g;
}

tideResult_t fail(tideResult_t code, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
tideResult_t fail(tideResult_t code, const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  TIDE_WARN("ucx net: %s", buf);
  return code;
}

// First interface that is up and matches TIDE_SOCKET_IFNAME (default: not
// loopback, not docker/virbr); loopback when nothing else exists.
bool pickInterface(std::string* name, SockAddr* addr) {
  std::string filter = knobString(Knob::SocketIfname);
  HcaFilter f = HcaFilter::parse(filter);
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return false;
  bool found = false, haveLo = false;
  SockAddr lo;
  std::string loName;
  for (int pass = 0; pass < 2 && !found; ++pass) {  // pass 0: IPv4, pass 1: IPv6
    int fam = pass == 0 ? AF_INET : AF_INET6;
    for (ifaddrs* i = list; i && !found; i = i->ifa_next) {
      if (!i->ifa_addr || !(i->ifa_flags & IFF_UP) || i->ifa_addr->sa_family != fam) continue;
      if (fam == AF_INET6 &&
          IN6_IS_ADDR_LINKLOCAL(&reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr))
        continue;
      std::string n = i->ifa_name;
      bool isLo = (i->ifa_flags & IFF_LOOPBACK) != 0;
      SockAddr a;
      a.len = fam == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
      memcpy(&a.ss, i->ifa_addr, a.len);
      if (filter.empty()) {
        if (isLo) {
          if (!haveLo) lo = a, loName = n, haveLo = true;
          continue;
        }
        if (n.rfind("docker", 0) == 0 || n.rfind("virbr", 0) == 0) continue;
      } else if (!f.matches(n, -1)) {
        continue;
      }
      *name = n;
      *addr = a;
      found = true;
    }
  }
  freeifaddrs(list);
  if (!found && haveLo && filter.empty()) {
    *name = loName;
    *addr = lo;
    found = true;
  }
  return found;
}

tideResult_t ucxInit(tideNetLogger_t /*logger*/) {
  Global& g = global();
  std::lock_guard<std::mutex> lock(g.mu);
  if (g.inited) return g.initResult;
  g.inited = true;
  if (!pickInterface(&g.ifname, &g.ifaddr)) {
    return g.initResult = fail(tideSystemError, "no usable network interface (TIDE_SOCKET_IFNAME='%s')",
                               knobString(Knob::SocketIfname).c_str());
  }
  g.ifaddr.setPort(0);
  ucp_config_t* config = nullptr;
  ucs_status_t st = ucp_config_read(nullptr, nullptr, &config);
  if (st != UCS_OK) {
    return g.initResult = fail(tideSystemError, "ucp_config_read: %s", ucs_status_string(st));
  }
  g.wakeup = knobBool(Knob::UcxWakeup);
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_TAG | (g.wakeup ? UCP_FEATURE_WAKEUP : 0);
  params.mt_workers_shared = 1;
  st = ucp_init(&params, config, &g.ctx);
  ucp_config_release(config);
  if (st != UCS_OK) {
    return g.initResult = fail(tideSystemError, "ucp_init: %s (check UCX_TLS)", ucs_status_string(st));
  }
  ucp_context_h ctx = g.ctx;
  auto reg = [ctx](uintptr_t base, size_t len, void** handle) -> Status {
    ucp_mem_map_params_t mp{};
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    mp.address = reinterpret_cast<void*>(base);
    mp.length = len;
    ucp_mem_h memh = nullptr;
    ucs_status_t s = ucp_mem_map(ctx, &mp, &memh);
    if (s != UCS_OK) return systemError("ucx: ucp_mem_map(%zu bytes): %s", len, ucs_status_string(s));
    *handle = memh;
    return Status::Ok();
  };
  auto dereg = [ctx](void* handle) { ucp_mem_unmap(ctx, static_cast<ucp_mem_h>(handle)); };
  int64_t entries = knobInt(Knob::UcxMrCacheEntries);
  g.mrs = std::make_unique<MrCache>(reg, dereg, entries > 0 ? entries : 1, 0);
  g.devName = "ucx:" + g.ifname;
  TIDE_INFO("ucx net: UCP %s, side channel on %s (%s), wakeup %d", ucp_get_version_string(),
            g.ifname.c_str(), g.ifaddr.hostStr().c_str(), g.wakeup ? 1 : 0);
  return tideSuccess;
}

tideResult_t ucxDevices(int* ndev) {
  Global& g = global();
  std::lock_guard<std::mutex> lock(g.mu);
  *ndev = (g.inited && g.initResult == tideSuccess) ? 1 : 0;
  return tideSuccess;
}

int linkSpeed(const std::string& ifname) {
  FILE* f = fopen(("/sys/class/net/" + ifname + "/speed").c_str(), "r");
  if (!f) return 0;
  int speed = 0;
  if (fscanf(f, "%d", &speed) != 1 || speed < 0) speed = 0;
  fclose(f);
  return speed;
}

tideResult_t ucxGetProperties(int dev, tideNetProperties_v1_t* props) {
  Global& g = global();
  if (dev != 0 || !g.ctx) return fail(tideInvalidArgument, "getProperties: no device %d", dev);
  memset(props, 0, sizeof(*props));
  props->name = g.devName.c_str();
  props->pciPath = nullptr;
  props->guid = 0;
  props->ptrSupport = TIDE_NET_PTR_HOST;
  props->speed = linkSpeed(g.ifname);
  props->port = 0;
  props->latency = 0;
  props->maxComms = 65536;
  props->maxRecvs = kMaxRecvs;
  props->maxSize = size_t{1} << 31;
  return tideSuccess;
}

}  // namespace

// ---- Comms ------------------------------------------------------------------------------

struct UcxRequest;

struct UcxComm {
  bool isSend = false;
  ucp_worker_h worker = nullptr;
  ucp_ep_h ep = nullptr;
  tideResult_t err = tideSuccess;  // sticky; set by the endpoint error callback
  std::string errMsg;
  uint32_t seq = 0;
  int epfd = -1;
  int evfd = -1;
  int idle = 0;
  bool armed = false;
  std::vector<UcxRequest*> live;  // outstanding requests, cancelled at close
  // The side-channel socket stays open as a liveness signal: the kernel
  // closes it when the peer process dies, which UCX's shared-memory
  // transports (no peer-failure support in 1.13) would never report.
  Socket side;
  bool peerMode = false;  // UCP_ERR_HANDLING_MODE_PEER accepted by the transports
  std::chrono::steady_clock::time_point peerGoneAt{};
  bool peerGone = false;
};

struct UcxRequest {
  UcxComm* comm = nullptr;
  int n = 0;
  bool isSend = false;
  void* ucx[kMaxRecvs] = {};
  bool done[kMaxRecvs] = {};
  size_t sizes[kMaxRecvs] = {};
};

namespace {

void epError(void* arg, ucp_ep_h /*ep*/, ucs_status_t status) {
  auto* c = static_cast<UcxComm*>(arg);
  if (c->err == tideSuccess) {
    c->err = tideRemoteError;
    c->errMsg = std::string("peer failed: ") + ucs_status_string(status);
    TIDE_INFO("ucx net: %s comm %p: %s", c->isSend ? "send" : "recv", static_cast<void*>(c),
              c->errMsg.c_str());
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

tideResult_t connectEp(UcxComm* c, const std::vector<uint8_t>& peerAddr) {
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
    ep.address = reinterpret_cast<const ucp_address_t*>(peerAddr.data());
    ep.err_mode = mode == 0 ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
    ep.err_handler.cb = epError;
    ep.err_handler.arg = c;
    ucs_status_t st = ucp_ep_create(c->worker, &ep, &c->ep);
    if (st == UCS_OK) {
      c->peerMode = mode == 0;
      if (mode == 1) {
        TIDE_INFO("ucx net: transports without peer-failure support; peer death is detected "
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
void checkSide(UcxComm* c) {
  if (c->peerGone || !c->side.valid()) return;
  char b;
  ssize_t n = recv(c->side.fd(), &b, 1, MSG_DONTWAIT | MSG_PEEK);
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
    c->peerGone = true;
    c->peerGoneAt = std::chrono::steady_clock::now();
    if (c->epfd >= 0) epoll_ctl(c->epfd, EPOLL_CTL_DEL, c->side.fd(), nullptr);
  }
}

// Closes the endpoint and frees the comm. A healthy, idle comm flushes
// (its last sends reach the peer), bounded by a short linger; a busy or
// broken one is force-closed, which completes outstanding sends with an
// error. Receives are cancelled.
void destroyComm(UcxComm* c) {
  bool busy = !c->live.empty();
  for (UcxRequest* r : c->live) {
    for (int i = 0; i < r->n; ++i) {
      if (r->ucx[i] && !r->isSend) ucp_request_cancel(c->worker, r->ucx[i]);
    }
  }
  bool leak = false;
  if (c->ep) {
    bool force = busy || c->err != tideSuccess || c->peerGone;
    for (int attempt = 0; attempt < 2; ++attempt) {
      ucp_request_param_t p{};
      p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      p.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
      ucs_status_ptr_t req = ucp_ep_close_nbx(c->ep, &p);
      if (!UCS_PTR_IS_PTR(req)) break;
      auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(force ? 2000 : 1000);
      while (ucp_request_check_status(req) == UCS_INPROGRESS &&
             std::chrono::steady_clock::now() < until) {
        if (ucp_worker_progress(c->worker) == 0) usleep(50);
      }
      bool finished = ucp_request_check_status(req) != UCS_INPROGRESS;
      ucp_request_free(req);
      if (finished) break;
      // A flush that does not finish means the peer is gone: the endpoint
      // is in the middle of closing and cannot be forced any more; keep the
      // worker rather than destroy it under UCX's feet.
      TIDE_INFO("ucx net: endpoint close did not finish within the linger; leaking its worker");
      leak = true;
      break;
    }
    c->ep = nullptr;
  }
  for (UcxRequest* r : c->live) {
    for (int i = 0; i < r->n; ++i) {
      if (r->ucx[i]) ucp_request_free(r->ucx[i]);
    }
    delete r;
  }
  c->live.clear();
  if (c->worker && !leak) {
    for (int i = 0; i < 64 && ucp_worker_progress(c->worker) != 0; ++i) {
    }
    ucp_worker_destroy(c->worker);
  }
  if (c->epfd >= 0) close(c->epfd);
  if (c->evfd >= 0) close(c->evfd);
  delete c;
}

tideResult_t workerAddress(UcxComm* c, std::vector<uint8_t>* out) {
  ucp_address_t* addr = nullptr;
  size_t len = 0;
  ucs_status_t st = ucp_worker_get_address(c->worker, &addr, &len);
  if (st != UCS_OK) return fail(tideSystemError, "ucp_worker_get_address: %s", ucs_status_string(st));
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

struct UcxListen {
  Socket lsock;
  uint64_t nonce = 0;
  struct Pending {
    Exchange x;
    UcxComm* comm = nullptr;
    bool replying = false;
  };
  std::vector<std::unique_ptr<Pending>> pending;
};

struct ConnectState {
  Exchange x;
  bool connected = false;  // TCP connect finished
  bool sent = false;
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
  cs->x.setOut(h.nonce, addr);
  return tideSuccess;
}

void freeConnectState(ConnectState* cs) {
  if (cs->comm) destroyComm(cs->comm);
  delete cs;
}

tideResult_t ucxConnect(int dev, void* handle, void** sendComm) {
  *sendComm = nullptr;
  if (dev != 0) return fail(tideInvalidArgument, "connect: no device %d", dev);
  UcxHandle h;
  memcpy(&h, handle, sizeof(h));
  if (h.magic != kUcxHandleMagic) return fail(tideInvalidArgument, "connect: not a ucx handle");
  ConnectState* cs = nullptr;
  uint8_t* statePtr = static_cast<uint8_t*>(handle) + kUcxStateOffset;
  memcpy(&cs, statePtr, sizeof(cs));
  tideResult_t r = tideSuccess;
  if (!cs) {
    cs = new ConnectState;
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
  bool got = false;
  if (r == tideSuccess && cs->sent) r = cs->x.pullIn(cs->nonce, &got);
  if (r == tideSuccess && got) r = connectEp(cs->comm, cs->x.in);
  if (r != tideSuccess || got) {
    memset(statePtr, 0, sizeof(cs));
    if (r == tideSuccess) {
      adoptSide(cs->comm, std::move(cs->x.sock));
      *sendComm = cs->comm;
      cs->comm = nullptr;
    }
    freeConnectState(cs);
  }
  return r;
}

tideResult_t ucxAccept(void* listenComm, void** recvComm) {
  *recvComm = nullptr;
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
        r = newComm(false, &p.comm);
        std::vector<uint8_t> addr;
        if (r == tideSuccess) r = connectEp(p.comm, p.x.in);
        if (r == tideSuccess) r = workerAddress(p.comm, &addr);
        if (r == tideSuccess) {
          p.x.setOut(l->nonce, addr);
          p.replying = true;
        }
      }
    }
    bool sent = false;
    if (r == tideSuccess && p.replying) r = p.x.pushOut(&sent);
    if (r != tideSuccess) {
      // A stray or broken connector: drop it and keep accepting others.
      if (p.comm) destroyComm(p.comm);
      l->pending.erase(l->pending.begin() + i);
      --i;
      continue;
    }
    if (sent) {
      adoptSide(p.comm, std::move(p.x.sock));
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

// ---- Memory registration ------------------------------------------------------------------

tideResult_t ucxRegMr(void* /*comm*/, void* data, size_t size, int type, void** mhandle) {
  *mhandle = nullptr;
  if (type != TIDE_NET_PTR_HOST) return fail(tideInvalidArgument, "regMr: only host memory");
  const MrCache::Entry* e = nullptr;
  Status s = global().mrs->acquire(data, size, &e);
  if (!s.ok()) return fail(s.code(), "regMr: %s", s.message().c_str());
  *mhandle = const_cast<MrCache::Entry*>(e);
  return tideSuccess;
}

tideResult_t ucxDeregMr(void* /*comm*/, void* mhandle) {
  global().mrs->release(static_cast<const MrCache::Entry*>(mhandle));
  return tideSuccess;
}

// ---- Data path ----------------------------------------------------------------------------

uint64_t makeTag(int tag, uint32_t seq) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(tag)) << 32) | seq;
}

void setMemh(ucp_request_param_t* p, void* mhandle, const void* data, size_t size) {
  if (!mhandle || size == 0) return;
  auto* e = static_cast<const MrCache::Entry*>(mhandle);
  if (!e->contains(reinterpret_cast<uintptr_t>(data), size)) return;
  p->op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
  p->memh = static_cast<ucp_mem_h>(e->handle);
}

tideResult_t brokenComm(UcxComm* c, const char* what) {
  return fail(c->err, "%s: %s", what, c->errMsg.c_str());
}

tideResult_t ucxIsend(void* sendComm, const void* data, size_t size, int tag, void* mhandle,
                      void** request) {
  *request = nullptr;
  auto* c = static_cast<UcxComm*>(sendComm);
  if (c->err != tideSuccess) return brokenComm(c, "isend");
  ucp_request_param_t p{};
  setMemh(&p, mhandle, data, size);
  ucs_status_ptr_t r = ucp_tag_send_nbx(c->ep, data, size, makeTag(tag, c->seq), &p);
  if (UCS_PTR_IS_ERR(r)) {
    return fail(tideRemoteError, "isend: ucp_tag_send_nbx: %s", ucs_status_string(UCS_PTR_STATUS(r)));
  }
  ++c->seq;
  auto* req = new UcxRequest;
  req->comm = c;
  req->n = 1;
  req->isSend = true;
  req->ucx[0] = r;  // NULL: completed inline
  req->done[0] = r == nullptr;
  req->sizes[0] = size;
  c->live.push_back(req);
  *request = req;
  return tideSuccess;
}

tideResult_t ucxIrecv(void* recvComm, int n, void** data, const size_t* sizes, const int* tags,
                      void** mhandles, void** request) {
  *request = nullptr;
  auto* c = static_cast<UcxComm*>(recvComm);
  if (n < 1 || n > kMaxRecvs) return fail(tideInvalidArgument, "irecv: n = %d", n);
  if (c->err != tideSuccess) return brokenComm(c, "irecv");
  auto req = std::make_unique<UcxRequest>();
  req->comm = c;
  req->n = n;
  for (int i = 0; i < n; ++i) {
    ucp_request_param_t p{};
    // UCX 1.13 does not report the length of a receive that completes
    // inline, so always take a request.
    p.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    setMemh(&p, mhandles ? mhandles[i] : nullptr, data[i], sizes[i]);
    ucs_status_ptr_t r =
        ucp_tag_recv_nbx(c->worker, data[i], sizes[i], makeTag(tags[i], c->seq), ~uint64_t{0}, &p);
    if (UCS_PTR_IS_ERR(r)) {
      // Earlier sub-receives stay in the request; they are cancelled with it.
      for (int j = 0; j < i; ++j) {
        ucp_request_cancel(c->worker, req->ucx[j]);
        ucp_request_free(req->ucx[j]);
      }
      return fail(tideSystemError, "irecv: ucp_tag_recv_nbx: %s",
                  ucs_status_string(UCS_PTR_STATUS(r)));
    }
    ++c->seq;
    req->ucx[i] = r;
  }
  c->live.push_back(req.get());
  *request = req.release();
  return tideSuccess;
}

void forget(UcxComm* c, UcxRequest* r) {
  for (size_t i = 0; i < c->live.size(); ++i) {
    if (c->live[i] == r) {
      c->live[i] = c->live.back();
      c->live.pop_back();
      break;
    }
  }
  delete r;
}

void drainEventFd(UcxComm* c) {
  uint64_t v;
  if (c->evfd >= 0 && c->armed) {
    while (read(c->evfd, &v, sizeof(v)) == sizeof(v)) {
    }
  }
}

tideResult_t ucxTest(void* request, int* done, size_t* sizes) {
  *done = 0;
  auto* r = static_cast<UcxRequest*>(request);
  UcxComm* c = r->comm;
  bool moved = false;
  for (int i = 0; i < 64 && ucp_worker_progress(c->worker) != 0; ++i) moved = true;
  bool all = true;
  tideResult_t bad = tideSuccess;
  for (int i = 0; i < r->n; ++i) {
    if (r->done[i]) continue;
    ucs_status_t st;
    if (r->isSend) {
      st = ucp_request_check_status(r->ucx[i]);
    } else {
      ucp_tag_recv_info_t info{};
      st = ucp_tag_recv_request_test(r->ucx[i], &info);
      if (st == UCS_OK) r->sizes[i] = info.length;
    }
    if (st == UCS_INPROGRESS) {
      all = false;
      continue;
    }
    ucp_request_free(r->ucx[i]);
    r->ucx[i] = nullptr;
    r->done[i] = true;
    moved = true;
    if (st != UCS_OK && bad == tideSuccess) {
      bad = st == UCS_ERR_MESSAGE_TRUNCATED ? tideInvalidUsage : tideRemoteError;
      if (c->err == tideSuccess) {
        c->err = bad;
        c->errMsg = std::string(r->isSend ? "send" : "receive") + " failed: " + ucs_status_string(st);
        if (st == UCS_ERR_MESSAGE_TRUNCATED) c->errMsg += " (message larger than the receive)";
      }
    }
  }
  if (!all && !moved && c->err == tideSuccess && (c->idle % 16) == 0) {
    checkSide(c);
    if (c->peerGone && std::chrono::steady_clock::now() - c->peerGoneAt > kPeerGoneGrace) {
      c->err = tideRemoteError;
      c->errMsg = "peer closed its end or died (side channel closed)";
    }
  }
  if (bad == tideSuccess && !all && c->err != tideSuccess) bad = c->err;
  if (bad != tideSuccess) {
    for (int i = 0; i < r->n; ++i) {
      if (r->ucx[i]) {
        ucp_request_cancel(c->worker, r->ucx[i]);
        ucp_request_free(r->ucx[i]);
        r->ucx[i] = nullptr;
      }
    }
    forget(c, r);
    return brokenComm(c, "test");
  }
  if (all) {
    if (sizes) {
      for (int i = 0; i < r->n; ++i) sizes[i] = r->sizes[i];
    }
    forget(c, r);
    *done = 1;
    c->idle = 0;
    return tideSuccess;
  }
  if (moved) {
    c->idle = 0;
  } else if (c->epfd >= 0 && ++c->idle >= kIdleBeforeArm) {
    // Idle: arm the worker so the poll fd wakes a sleeping caller.
    c->idle = 0;
    drainEventFd(c);
    ucs_status_t st = ucp_worker_arm(c->worker);
    c->armed = true;
    if (st == UCS_ERR_BUSY) {
      uint64_t one = 1;
      ssize_t w = write(c->evfd, &one, sizeof(one));
      (void)w;
    }
  }
  return tideSuccess;
}

tideResult_t ucxGetPollFd(void* comm, int* fd) {
  *fd = static_cast<UcxComm*>(comm)->epfd;
  return tideSuccess;
}

}  // namespace

const tideNet_v1_t kUcxNet = {
    "ucx",        ucxInit,      ucxDevices,   ucxGetProperties, ucxListen,
    ucxConnect,   ucxAccept,    ucxRegMr,     ucxDeregMr,       ucxIsend,
    ucxIrecv,     ucxTest,      ucxGetPollFd, ucxCloseComm,     ucxCloseComm,
    ucxCloseListen,
};

TIDE_ON_LOAD(registerNet(&kUcxNet));

}  // namespace tide
