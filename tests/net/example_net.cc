// libtide-net-example.so: a small, complete Tide net plugin written against
// include/tide/net.h only (no Tide internals), used by the conformance suite
// and as a template for plugin authors.
//
// One TCP socket per comm; no helper threads: test() moves the data. Each
// message is a 16-byte header {size, tag} followed by its bytes. The device
// address is 127.0.0.1 unless TIDE_EXAMPLE_NET_ADDR names another IPv4
// address of this host. TIDE_EXAMPLE_NET_MAXSIZE (tests of the caller's
// chunking) sets the advertised maxSize, which isend/irecv then enforce: a
// byte count with an optional K/M/G suffix, or a comma-separated list whose
// i-th entry applies to TIDE_RANK i (the last entry to higher ranks).
//
// TIDE_EXAMPLE_NET_PTR_DEVICE=1 (tests of the caller's GPUDirect RDMA path
// on machines without a GPU): the net also advertises TIDE_NET_PTR_DEVICE and
// registers memory of that type, treating it as host-addressable. regMr then
// returns a real registration {type, range}; isend/irecv check that a buffer
// passed with an mhandle lies inside it. The exported counters
// tideExampleNetRegCount / DeregCount / PostCount (per TIDE_NET_PTR_* type)
// let a test see what the caller registered and posted. With it,
// TIDE_EXAMPLE_NET_PTR_DMABUF=ok also advertises TIDE_NET_PTR_DMABUF and
// registers that type the same way, =fail advertises it but refuses its
// registrations (tideSystemError, as when a dma-buf export fails), and
// TIDE_EXAMPLE_NET_REG_FAIL=1 refuses every device-type registration.
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <deque>
#include <set>

#include "tide/net.h"

namespace {

constexpr uint32_t kMagic = 0x45584e54;
constexpr size_t kStateOffset = 64;  // connect() keeps its socket here between calls

tideNetLogger_t gLog = nullptr;
#define EX_LOG(level, ...)                                  \
  do {                                                      \
    if (gLog) gLog(level, __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)

struct Handle {
  uint32_t magic;
  uint32_t addr;  // network byte order
  uint16_t port;
};

struct Header {
  uint64_t size;
  int64_t tag;
};

struct Comm;
struct Request {
  Comm* comm;
  bool send;
  uint8_t* buf;
  size_t size;  // send: bytes; recv: capacity, then bytes received
  int tag;
  Header hdr;
  size_t moved = 0;  // header + payload bytes
  bool done = false;
};

struct Comm {
  int fd;
  bool send;
  std::deque<Request*> queue;  // in posting order
  std::set<Request*> live;
  tideResult_t err = tideSuccess;
};

struct Listen {
  int fd;
};

uint32_t deviceAddr() {
  const char* a = getenv("TIDE_EXAMPLE_NET_ADDR");
  in_addr in{};
  if (a == nullptr || inet_pton(AF_INET, a, &in) != 1) in.s_addr = htonl(INADDR_LOOPBACK);
  return in.s_addr;
}

// Advertised and enforced largest message (TIDE_EXAMPLE_NET_MAXSIZE; 1 TiB).
size_t maxSize() {
  const char* v = getenv("TIDE_EXAMPLE_NET_MAXSIZE");
  if (v == nullptr || *v == 0) return size_t{1} << 40;
  const char* r = getenv("TIDE_RANK");
  long rank = r != nullptr ? strtol(r, nullptr, 10) : 0;
  for (long i = 0; i < rank && strchr(v, ',') != nullptr; ++i) v = strchr(v, ',') + 1;
  char* end = nullptr;
  size_t n = strtoull(v, &end, 10);
  switch (*end) {
    case 'K':
      return n << 10;
    case 'M':
      return n << 20;
    case 'G':
      return n << 30;
    default:
      return n;
  }
}

tideResult_t exInit(tideNetLogger_t logger) {
  gLog = logger;
  return tideSuccess;
}

tideResult_t exDevices(int* n) {
  *n = 1;
  return tideSuccess;
}

bool deviceOptIn() {
  const char* v = getenv("TIDE_EXAMPLE_NET_PTR_DEVICE");
  return v != nullptr && strcmp(v, "1") == 0;
}

// TIDE_EXAMPLE_NET_PTR_DMABUF: 0 unset, 1 "ok", 2 "fail" (read at each call).
int dmaBufMode() {
  const char* v = getenv("TIDE_EXAMPLE_NET_PTR_DMABUF");
  if (v == nullptr || !deviceOptIn()) return 0;
  return strcmp(v, "ok") == 0 ? 1 : strcmp(v, "fail") == 0 ? 2 : 0;
}

bool deviceRegFails() {
  const char* v = getenv("TIDE_EXAMPLE_NET_REG_FAIL");
  return v != nullptr && strcmp(v, "1") == 0;
}

// Registrations, deregistrations and posts with an mhandle, per pointer type
// (index: TIDE_NET_PTR_HOST 1, DEVICE 2, DMABUF 4).
std::atomic<int> gRegs[8], gDeregs[8], gPosts[8];

struct Reg {
  uint32_t magic;
  int type;
  const uint8_t* base;
  size_t size;
};
constexpr uint32_t kRegMagic = 0x52454758;

tideResult_t exGetProperties(int dev, tideNetProperties_v1_t* p) {
  if (dev != 0) return tideInvalidArgument;
  *p = tideNetProperties_v1_t{};
  p->name = "example0";
  p->ptrSupport = TIDE_NET_PTR_HOST | (deviceOptIn() ? TIDE_NET_PTR_DEVICE : 0) |
                  (dmaBufMode() != 0 ? TIDE_NET_PTR_DMABUF : 0);
  p->maxComms = 1024;
  p->maxRecvs = 1;
  p->maxSize = maxSize();
  return tideSuccess;
}

tideResult_t exListen(int dev, void* handle, void** listenComm) {
  if (dev != 0) return tideInvalidArgument;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return tideSystemError;
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = deviceAddr();
  socklen_t len = sizeof(sa);
  if (bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0 || ::listen(fd, 128) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) {
    EX_LOG(TIDE_NET_LOG_WARN, "example net: listen: %s", strerror(errno));
    close(fd);
    return tideSystemError;
  }
  memset(handle, 0, TIDE_NET_HANDLE_MAXSIZE);
  Handle h{kMagic, sa.sin_addr.s_addr, sa.sin_port};
  memcpy(handle, &h, sizeof(h));
  *listenComm = new Listen{fd};
  return tideSuccess;
}

tideResult_t newComm(int fd, bool send, void** out) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  *out = new Comm{fd, send, {}, {}, tideSuccess};
  return tideSuccess;
}

tideResult_t exConnect(int, void* handle, void** sendComm) {
  *sendComm = nullptr;
  Handle h;
  memcpy(&h, handle, sizeof(h));
  if (h.magic != kMagic) return tideInvalidArgument;
  int* state = reinterpret_cast<int*>(static_cast<uint8_t*>(handle) + kStateOffset);
  int fd;
  memcpy(&fd, state, sizeof(fd));
  fd -= 1;  // stored as fd + 1 so that zeros mean "not started"
  if (fd < 0) {
    fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return tideSystemError;
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = h.addr;
    sa.sin_port = h.port;
    if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0 && errno != EINPROGRESS) {
      close(fd);
      return tideRemoteError;
    }
    int stored = fd + 1;
    memcpy(state, &stored, sizeof(stored));
  }
  pollfd p{fd, POLLOUT, 0};
  if (poll(&p, 1, 0) <= 0) return tideSuccess;  // not yet
  int zero = 0, err = 0;
  socklen_t len = sizeof(err);
  getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
  memcpy(state, &zero, sizeof(zero));
  if (err != 0) {
    close(fd);
    return tideRemoteError;
  }
  return newComm(fd, true, sendComm);
}

tideResult_t exAccept(void* listenComm, void** recvComm) {
  *recvComm = nullptr;
  int fd =
      accept4(static_cast<Listen*>(listenComm)->fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED)
      return tideSuccess;
    return tideSystemError;
  }
  return newComm(fd, false, recvComm);
}

tideResult_t exRegMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  if (comm == nullptr || mhandle == nullptr) return tideInvalidArgument;
  const bool device = type == TIDE_NET_PTR_DEVICE && deviceOptIn();
  const bool dmaBuf = type == TIDE_NET_PTR_DMABUF && dmaBufMode() != 0;
  if (type != TIDE_NET_PTR_HOST && !device && !dmaBuf) return tideInvalidArgument;
  if ((device || dmaBuf) && (deviceRegFails() || (dmaBuf && dmaBufMode() == 2))) {
    return tideSystemError;
  }
  *mhandle = new Reg{kRegMagic, type, static_cast<const uint8_t*>(data), size};
  gRegs[type].fetch_add(1);
  return tideSuccess;
}

tideResult_t exDeregMr(void* comm, void* mhandle) {
  auto* r = static_cast<Reg*>(mhandle);
  if (comm == nullptr || r == nullptr || r->magic != kRegMagic) return tideInvalidArgument;
  gDeregs[r->type].fetch_add(1);
  r->magic = 0;
  delete r;
  return tideSuccess;
}

// A buffer posted with an mhandle must lie inside that registration.
bool regCovers(void* mhandle, const void* data, size_t size) {
  if (mhandle == nullptr) return true;
  auto* r = static_cast<const Reg*>(mhandle);
  if (r->magic != kRegMagic) return false;
  auto* p = static_cast<const uint8_t*>(data);
  if (p < r->base || size > r->size || static_cast<size_t>(p - r->base) > r->size - size) {
    return false;
  }
  gPosts[r->type].fetch_add(1);
  return true;
}

tideResult_t post(Comm* c, Request* r, void** request) {
  if (c->err != tideSuccess) {
    delete r;
    return c->err;
  }
  c->queue.push_back(r);
  c->live.insert(r);
  *request = r;
  return tideSuccess;
}

tideResult_t exIsend(void* sendComm, const void* data, size_t size, int tag, void* mhandle,
                     void** request) {
  auto* c = static_cast<Comm*>(sendComm);
  if (!regCovers(mhandle, data, size)) {
    EX_LOG(TIDE_NET_LOG_WARN, "example net: isend buffer outside its registration");
    return tideInvalidArgument;
  }
  if (size > maxSize()) {
    EX_LOG(TIDE_NET_LOG_WARN, "example net: isend of %zu bytes (maxSize %zu)", size, maxSize());
    return tideInvalidArgument;
  }
  auto* r = new Request{c,    true, static_cast<uint8_t*>(const_cast<void*>(data)),
                        size, tag,  Header{size, tag}};
  return post(c, r, request);
}

tideResult_t exIrecv(void* recvComm, int n, void** data, const size_t* sizes, const int* tags,
                     void** mhandles, void** request) {
  if (n != 1) return tideInvalidArgument;
  if (mhandles != nullptr && !regCovers(mhandles[0], data[0], sizes[0])) {
    EX_LOG(TIDE_NET_LOG_WARN, "example net: irecv buffer outside its registration");
    return tideInvalidArgument;
  }
  if (sizes[0] > maxSize()) {
    EX_LOG(TIDE_NET_LOG_WARN, "example net: irecv of %zu bytes (maxSize %zu)", sizes[0], maxSize());
    return tideInvalidArgument;
  }
  auto* c = static_cast<Comm*>(recvComm);
  auto* r = new Request{c, false, static_cast<uint8_t*>(data[0]), sizes[0], tags[0], Header{}};
  return post(c, r, request);
}

// Moves queued data until the socket would block; sets c->err on failure.
void progress(Comm* c) {
  while (c->err == tideSuccess && !c->queue.empty()) {
    Request* r = c->queue.front();
    size_t hb = sizeof(Header);
    iovec iov[2];
    int n = 0;
    if (r->moved < hb) iov[n++] = {reinterpret_cast<uint8_t*>(&r->hdr) + r->moved, hb - r->moved};
    size_t total = hb + (r->send || r->moved >= hb ? r->hdr.size : 0);
    size_t pay = r->moved > hb ? r->moved - hb : 0;
    if (r->moved >= hb && r->hdr.size > pay) iov[n++] = {r->buf + pay, r->hdr.size - pay};
    if (r->send && r->moved < hb && r->size > 0) iov[n++] = {r->buf, r->size};
    ssize_t k;
    if (n == 0) {
      k = 0;
    } else {
      msghdr m{};
      m.msg_iov = iov;
      m.msg_iovlen = n;
      k = r->send ? sendmsg(c->fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT) : recvmsg(c->fd, &m, 0);
      if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
      if (k < 0 || (k == 0 && !r->send)) {
        c->err = tideRemoteError;
        EX_LOG(TIDE_NET_LOG_INFO, "example net: peer gone (%s)", k < 0 ? strerror(errno) : "EOF");
        return;
      }
    }
    bool hadHeader = r->moved >= hb;
    r->moved += static_cast<size_t>(k);
    if (!r->send && !hadHeader && r->moved >= hb) {
      if (r->hdr.size > r->size || r->hdr.tag != r->tag) {
        c->err = tideInvalidUsage;
        EX_LOG(TIDE_NET_LOG_WARN,
               "example net: message of %zu bytes, tag %lld for a receive of "
               "%zu bytes, tag %d",
               static_cast<size_t>(r->hdr.size), static_cast<long long>(r->hdr.tag), r->size,
               r->tag);
        return;
      }
      total = hb + r->hdr.size;
    }
    if (r->moved >= hb && r->moved == (r->send ? hb + r->size : total)) {
      if (!r->send) r->size = r->hdr.size;
      r->done = true;
      c->queue.pop_front();
    } else if (k == 0) {
      return;
    }
  }
}

tideResult_t exTest(void* request, int* done, size_t* sizes) {
  auto* r = static_cast<Request*>(request);
  Comm* c = r->comm;
  progress(c);
  *done = 0;
  if (!r->done && c->err == tideSuccess) return tideSuccess;
  c->live.erase(r);
  bool ok = r->done;
  size_t size = r->size;
  if (!ok) {
    for (auto it = c->queue.begin(); it != c->queue.end(); ++it) {
      if (*it == r) {
        c->queue.erase(it);
        break;
      }
    }
  }
  delete r;
  if (!ok) return c->err;
  *done = 1;
  if (sizes) sizes[0] = size;
  return tideSuccess;
}

tideResult_t exGetPollFd(void* comm, int* fd) {
  *fd = static_cast<Comm*>(comm)->fd;
  return tideSuccess;
}

tideResult_t exClose(void* comm) {
  auto* c = static_cast<Comm*>(comm);
  if (c == nullptr) return tideSuccess;
  close(c->fd);
  for (Request* r : c->live) delete r;
  delete c;
  return tideSuccess;
}

tideResult_t exCloseListen(void* listenComm) {
  auto* l = static_cast<Listen*>(listenComm);
  if (l) close(l->fd);
  delete l;
  return tideSuccess;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) const tideNet_v1_t tideNetPlugin_v1 = {
    "example", exInit,  exDevices, exGetProperties, exListen,    exConnect, exAccept, exRegMr,
    exDeregMr, exIsend, exIrecv,   exTest,          exGetPollFd, exClose,   exClose,  exCloseListen,
};

// Counters for tests (see the file comment); type is a TIDE_NET_PTR_* value.
extern "C" __attribute__((visibility("default"))) int tideExampleNetRegCount(int type) {
  return type > 0 && type < 8 ? gRegs[type].load() : -1;
}
extern "C" __attribute__((visibility("default"))) int tideExampleNetDeregCount(int type) {
  return type > 0 && type < 8 ? gDeregs[type].load() : -1;
}
extern "C" __attribute__((visibility("default"))) int tideExampleNetPostCount(int type) {
  return type > 0 && type < 8 ? gPosts[type].load() : -1;
}
