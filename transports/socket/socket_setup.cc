// The socket net's connection setup: listen, non-blocking connect of all
// sockets of a comm, and accept, which groups incoming sockets by the
// connector's random id (each sends a Preamble naming the listener's cookie
// and its index).
#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>

#include "core/auth.h"
#include "core/config.h"
#include "core/log.h"
#include "transports/socket/socket_internal.h"

namespace tide {
namespace socknet {
namespace {

constexpr uint32_t kHandleMagic = 0x534f434b;
constexpr uint32_t kPreambleMagic = 0x534f4350;
constexpr size_t kMaxPendingAccepts = 256;  // sockets still sending their preamble
constexpr int kPreambleSeconds = 30;
constexpr size_t kStateOffset = 96;  // connect() keeps its state pointer here

struct Handle {
  uint32_t magic;
  uint16_t nsocks;
  uint16_t addrLen;
  uint64_t cookie;
  uint8_t addr[sizeof(sockaddr_in6)];
};
static_assert(sizeof(Handle) <= kStateOffset);

struct Preamble {
  uint32_t magic;
  uint16_t index;
  uint16_t nsocks;
  uint64_t cookie;
  uint64_t connId;
};
static_assert(sizeof(Preamble) == 24);

struct PendingSock {
  int fd;
  Preamble pre;
  size_t got;
  std::chrono::steady_clock::time_point since;
};

struct ListenComm {
  int fd = -1;
  uint64_t cookie = 0;
  int nsocks = 1;
  std::vector<PendingSock> pending;
  std::map<uint64_t, std::vector<int>> groups;  // connId -> fds by index
};

struct ConnectState {
  std::vector<int> fds;
  std::vector<bool> ready;
  uint64_t connId;
};

int configuredSocks() {
  int64_t t = socketThreads();
  int64_t p = std::clamp<int64_t>(knobInt(Knob::NsocksPerthread), 1, kMaxSocks);
  return static_cast<int>(std::clamp<int64_t>(t == 0 ? p : t * p, 1, kMaxSocks));
}

}  // namespace

tideResult_t netListen(int dev, void* handle, void** listenComm) {
  const NetDevice* d = socketDevice(dev);
  if (d == nullptr || handle == nullptr || listenComm == nullptr)
    return fail(tideInvalidArgument, "listen: bad arguments (device %d)", dev);
  const SockAddr& a = d->addr;
  Socket s;
  Status st = Socket::listen(a, SOMAXCONN, &s);
  if (!st.ok()) return fail(st.code(), "listen on %s: %s", a.str().c_str(), st.message().c_str());
  setBuffers(s.fd());  // inherited by accepted sockets
  (void)s.setNonBlocking(true);
  SockAddr bound;
  if (!s.localAddr(&bound).ok()) return fail(tideSystemError, "getsockname failed");
  auto lc = std::make_unique<ListenComm>();
  if (!randomBytes(&lc->cookie, sizeof(lc->cookie)).ok())
    return fail(tideSystemError, "no random bytes");
  lc->nsocks = configuredSocks();
  std::memset(handle, 0, TIDE_NET_HANDLE_MAXSIZE);
  Handle h{};
  h.magic = kHandleMagic;
  h.nsocks = static_cast<uint16_t>(lc->nsocks);
  h.addrLen = static_cast<uint16_t>(bound.len);
  h.cookie = lc->cookie;
  std::memcpy(h.addr, &bound.ss, std::min<size_t>(bound.len, sizeof(h.addr)));
  std::memcpy(handle, &h, sizeof(h));
  lc->fd = s.release();
  TIDE_INFO("socket net: listening on %s (%d sockets per comm)", bound.str().c_str(), lc->nsocks);
  *listenComm = lc.release();
  return tideSuccess;
}

static void dropConnect(ConnectState* cs) {
  for (int& fd : cs->fds) closeFd(fd);
  delete cs;
}

tideResult_t netConnect(int dev, void* handle, void** sendComm) {
  if (handle == nullptr || sendComm == nullptr) return fail(tideInvalidArgument, "connect: null");
  (void)dev;  // the route to the peer's address picks the interface
  *sendComm = nullptr;
  Handle h;
  std::memcpy(&h, handle, sizeof(h));
  uint8_t* slot = static_cast<uint8_t*>(handle) + kStateOffset;
  ConnectState* cs = nullptr;
  // NOLINTNEXTLINE(bugprone-sizeof-expression): the slot holds the pointer itself
  std::memcpy(&cs, slot, sizeof(cs));
  if (cs == nullptr) {
    if (h.magic != kHandleMagic || h.nsocks < 1 || h.nsocks > kMaxSocks ||
        h.addrLen > sizeof(h.addr) || h.addrLen < sizeof(sockaddr_in))
      return fail(tideInvalidArgument, "connect: not a socket-net handle");
    cs = new ConnectState;
    if (!randomBytes(&cs->connId, sizeof(cs->connId)).ok()) {
      delete cs;
      return fail(tideSystemError, "no random bytes");
    }
    SockAddr a;
    std::memcpy(&a.ss, h.addr, h.addrLen);
    a.len = h.addrLen;
    for (int i = 0; i < h.nsocks; ++i) {
      int fd = ::socket(a.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (fd < 0) {
        dropConnect(cs);
        return fail(tideSystemError, "socket: %s", strerror(errno));
      }
      cs->fds.push_back(fd);
      cs->ready.push_back(false);
      setBuffers(fd);
      if (::connect(fd, reinterpret_cast<const sockaddr*>(&a.ss), a.len) != 0 &&
          errno != EINPROGRESS) {
        int e = errno;
        dropConnect(cs);
        return fail(tideRemoteError, "connect to %s: %s", a.str().c_str(), strerror(e));
      }
    }
    // NOLINTNEXTLINE(bugprone-sizeof-expression): the slot holds the pointer itself
    std::memcpy(slot, &cs, sizeof(cs));
  }
  bool all = true;
  for (size_t i = 0; i < cs->fds.size(); ++i) {
    if (cs->ready[i]) continue;
    pollfd p{cs->fds[i], POLLOUT, 0};
    if (::poll(&p, 1, 0) <= 0) {
      all = false;
      continue;
    }
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(cs->fds[i], SOL_SOCKET, SO_ERROR, &err, &len);
    Preamble pre{kPreambleMagic, static_cast<uint16_t>(i), h.nsocks, h.cookie, cs->connId};
    if (err == 0 && ::send(cs->fds[i], &pre, sizeof(pre), MSG_NOSIGNAL | MSG_DONTWAIT) !=
                        static_cast<ssize_t>(sizeof(pre))) {
      err = errno != 0 ? errno : EIO;
    }
    if (err != 0) {
      // NOLINTNEXTLINE(bugprone-sizeof-expression): the slot holds the pointer itself
      std::memset(slot, 0, sizeof(cs));
      dropConnect(cs);
      return fail(tideRemoteError, "connect: %s", strerror(err));
    }
    cs->ready[i] = true;
  }
  if (!all) return tideSuccess;
  // NOLINTNEXTLINE(bugprone-sizeof-expression): the slot holds the pointer itself
  std::memset(slot, 0, sizeof(cs));
  std::vector<int> fds = std::move(cs->fds);
  delete cs;
  Comm* c = nullptr;
  tideResult_t r = makeComm(true, fds, &c);
  if (r != tideSuccess) return r;
  *sendComm = c;
  return tideSuccess;
}

tideResult_t netAccept(void* listenComm, void** recvComm) {
  auto* lc = static_cast<ListenComm*>(listenComm);
  if (lc == nullptr || recvComm == nullptr) return fail(tideInvalidArgument, "accept: null");
  *recvComm = nullptr;
  for (;;) {
    int fd = ::accept4(lc->fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EMFILE || errno == ENFILE) break;
      return fail(tideSystemError, "accept: %s", strerror(errno));
    }
    if (lc->pending.size() >= kMaxPendingAccepts) {
      ::close(fd);
      continue;
    }
    lc->pending.push_back(PendingSock{fd, {}, 0, std::chrono::steady_clock::now()});
  }
  auto now = std::chrono::steady_clock::now();
  for (size_t i = lc->pending.size(); i-- > 0;) {
    PendingSock& p = lc->pending[i];
    ssize_t r = ::recv(p.fd, reinterpret_cast<uint8_t*>(&p.pre) + p.got, sizeof(p.pre) - p.got,
                       MSG_DONTWAIT);
    bool drop = r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) ||
                now - p.since > std::chrono::seconds(kPreambleSeconds);
    if (r > 0) p.got += static_cast<size_t>(r);
    if (!drop && p.got == sizeof(p.pre)) {
      const Preamble& q = p.pre;
      if (q.magic != kPreambleMagic || q.cookie != lc->cookie || q.nsocks != lc->nsocks ||
          q.index >= q.nsocks) {
        TIDE_WARN("socket net: dropped a connection with a foreign preamble");
        drop = true;
      } else {
        std::vector<int>& g = lc->groups[q.connId];
        if (g.empty()) g.assign(lc->nsocks, -1);
        if (g[q.index] >= 0) {
          drop = true;
        } else {
          g[q.index] = p.fd;
          lc->pending.erase(lc->pending.begin() + static_cast<long>(i));
          continue;
        }
      }
    }
    if (drop) {
      ::close(p.fd);
      lc->pending.erase(lc->pending.begin() + static_cast<long>(i));
    }
  }
  for (auto it = lc->groups.begin(); it != lc->groups.end(); ++it) {
    if (std::count(it->second.begin(), it->second.end(), -1) != 0) continue;
    std::vector<int> fds = std::move(it->second);
    lc->groups.erase(it);
    Comm* c = nullptr;
    tideResult_t r = makeComm(false, fds, &c);
    if (r != tideSuccess) return r;
    *recvComm = c;
    return tideSuccess;
  }
  return tideSuccess;
}

tideResult_t netCloseListen(void* listenComm) {
  auto* lc = static_cast<ListenComm*>(listenComm);
  if (lc == nullptr) return tideSuccess;
  closeFd(lc->fd);
  for (PendingSock& p : lc->pending) ::close(p.fd);
  for (auto& g : lc->groups)
    for (int fd : g.second)
      if (fd >= 0) ::close(fd);
  delete lc;
  return tideSuccess;
}

}  // namespace socknet
}  // namespace tide
