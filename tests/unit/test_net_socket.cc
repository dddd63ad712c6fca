// Socket net pieces: stripe arithmetic, and real IPv4 / IPv6 transfers with
// the liveness options set (interface choice: test_net_common.cc).
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <thread>
#include <vector>

#include "transports/common/net_devices.h"
#include "transports/socket/socket_internal.h"
#include "transports/socket/socket_net.h"

// ---- Tools of ZeroByteReceiveNotTouchedAfterDone (in this process only) ----
namespace fence {
// While `on`, operator new gives every block pages of its own and delete makes
// them inaccessible for good, so a late access to a freed block faults.
std::atomic<bool> on{false};
// While set, a mutex unlock by a thread other than the process's main thread
// sleeps this many microseconds afterwards (widens a race window).
std::atomic<int> unlockDelayUs{0};
constexpr size_t kMax = 4096;
struct Block {
  void* p;
  size_t len;
};
Block blocks[kMax];
size_t nblocks = 0;
pthread_spinlock_t lock;
[[maybe_unused]] int lockInit = pthread_spin_init(&lock, PTHREAD_PROCESS_PRIVATE);

void* allocate(size_t n) {
  if (on.load(std::memory_order_relaxed)) {
    size_t len = (n + 4095) / 4096 * 4096 + 4096;
    void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    pthread_spin_lock(&lock);
    bool fits = p != MAP_FAILED && nblocks < kMax;
    if (fits) blocks[nblocks++] = Block{p, len};
    pthread_spin_unlock(&lock);
    if (fits) return p;
    if (p != MAP_FAILED) munmap(p, len);
  }
  void* p = malloc(n == 0 ? 1 : n);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

void release(void* p) {
  if (p == nullptr) return;
  pthread_spin_lock(&lock);
  for (size_t i = 0; i < nblocks; ++i) {
    if (blocks[i].p == p) {
      mprotect(p, blocks[i].len, PROT_NONE);
      pthread_spin_unlock(&lock);
      return;
    }
  }
  pthread_spin_unlock(&lock);
  free(p);
}
}  // namespace fence

// AddressSanitizer has its own operator new (and reports a late access to a
// freed block by itself); replacing it there mixes allocators.
#if !defined(__SANITIZE_ADDRESS__)
void* operator new(size_t n) { return fence::allocate(n); }
void* operator new[](size_t n) { return fence::allocate(n); }
void operator delete(void* p) noexcept { fence::release(p); }
void operator delete[](void* p) noexcept { fence::release(p); }
void operator delete(void* p, size_t) noexcept { fence::release(p); }
void operator delete[](void* p, size_t) noexcept { fence::release(p); }
#endif

extern "C" int pthread_mutex_unlock(pthread_mutex_t* m) {
  using Fn = int (*)(pthread_mutex_t*);
  static Fn real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "pthread_mutex_unlock"));
  int r = real(m);
  int us = fence::unlockDelayUs.load(std::memory_order_relaxed);
  if (us > 0 && gettid() != getpid()) usleep(static_cast<useconds_t>(us));
  return r;
}

namespace tide {
namespace {

TEST(SocketStripes, Split) {
  int n;
  uint64_t per;
  socketStripes(0, 4, &n, &per);
  EXPECT_EQ(n, 1);
  socketStripes(100 << 10, 4, &n, &per);  // < 2 x 64 KiB: one stripe
  EXPECT_EQ(n, 1);
  socketStripes(1 << 20, 4, &n, &per);
  EXPECT_EQ(n, 4);
  EXPECT_EQ(per, 256u << 10);
  socketStripes((1 << 20) + 1, 4, &n, &per);
  EXPECT_EQ(per % 4096, 0u);
  EXPECT_GE(per * n, (1u << 20) + 1);
  EXPECT_LT(per * (n - 1), (1u << 20) + 1);
  socketStripes(64 << 20, 1, &n, &per);
  EXPECT_EQ(n, 1);
}

// A stripe's length travels in 32 bits: messages of 4 GiB and more (one
// socket, or more than nsocks x 4 GiB) need more stripes, none over 4 GiB - 1.
TEST(SocketStripes, NoStripeOver32Bits) {
  for (uint64_t total : {uint64_t{1} << 32, (uint64_t{1} << 33) + 4096, uint64_t{40} << 30}) {
    for (int nsocks : {1, 2, 4}) {
      int n = 0;
      uint64_t per = 0;
      socketStripes(total, nsocks, &n, &per);
      EXPECT_LE(per, uint64_t{UINT32_MAX}) << total << " bytes over " << nsocks;
      EXPECT_GE(per * static_cast<uint64_t>(n), total);
      EXPECT_LT(per * static_cast<uint64_t>(n - 1), total);
    }
  }
}

// The stripe header's wire form is little-endian at fixed offsets on every
// host (socket_net.h), and decoding inverts encoding.
TEST(SocketStripes, HeaderWireFormat) {
  SocketStripeHeader h{0x534f4344,  0x01020304, 0x1122334455667788ull, 0x0a0b0c0d0e0f1011ull,
                       0xa1b2c3d4u, -2};
  uint8_t w[kStripeHeaderBytes];
  encodeStripeHeader(h, w);
  const uint8_t want[kStripeHeaderBytes] = {0x44, 0x43, 0x4f, 0x53, 0x04, 0x03, 0x02, 0x01,
                                            0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11,
                                            0x11, 0x10, 0x0f, 0x0e, 0x0d, 0x0c, 0x0b, 0x0a,
                                            0xd4, 0xc3, 0xb2, 0xa1, 0xfe, 0xff, 0xff, 0xff};
  EXPECT_EQ(std::memcmp(w, want, sizeof(w)), 0);
  SocketStripeHeader d = decodeStripeHeader(w);
  EXPECT_EQ(d.magic, h.magic);
  EXPECT_EQ(d.seq, h.seq);
  EXPECT_EQ(d.total, h.total);
  EXPECT_EQ(d.offset, h.offset);
  EXPECT_EQ(d.len, h.len);
  EXPECT_EQ(d.tag, h.tag);
  for (int32_t tag : {0, 1, INT32_MAX, INT32_MIN}) {
    SocketStripeHeader t{1, 2, 3, 4, 5, tag};
    encodeStripeHeader(t, w);
    EXPECT_EQ(decodeStripeHeader(w).tag, tag);
  }
}

// Runs `body` in a child (the net reads its knobs once); returns its exit code.
template <typename F>
int inChild(F body) {
  pid_t pid = fork();
  if (pid == 0) _exit(body());
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 100 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

// makeComm takes the sockets (it clears `fds`); when it fails (here: no fd
// left for its eventfds) it must close them and whatever it opened.
TEST(SocketNet, MakeCommFailureLeaksNoFd) {
  int rc = inChild([] {
    setenv("TIDE_SOCKET_NTHREADS", "1", 1);
    int sp[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sp) != 0) return 2;
    rlimit rl{};
    getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = static_cast<rlim_t>(std::max(sp[0], sp[1]) + 8);
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) return 3;
    std::vector<int> filler;
    for (int fd; (fd = dup(0)) >= 0;) filler.push_back(fd);
    close(filler.back());  // one free slot: the done eventfd fits, the wake eventfd does not
    filler.pop_back();
    std::vector<int> fds{sp[0]};
    socknet::Comm* c = nullptr;
    if (socknet::makeComm(false, fds, &c) == tideSuccess) return 4;
    if (!fds.empty()) return 5;
    int freed = 0;
    for (int fd; (fd = dup(0)) >= 0;) ++freed;
    return freed == 2 ? 0 : 10 + freed;  // the socket's slot and the one left free
  });
  EXPECT_EQ(rc, 0);
}

// Writes all of [p, p + n) to non-blocking `fd`.
bool writeAll(int fd, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  while (n > 0) {
    ssize_t r = ::send(fd, b, n, MSG_NOSIGNAL);
    if (r < 0 && (errno == EAGAIN || errno == EINTR)) {
      pollfd q{fd, POLLOUT, 0};
      ::poll(&q, 1, 1000);
      continue;
    }
    if (r <= 0) return false;
    b += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// Listens on device 0 and connects to itself: *lc, *s, *r. Returns 0, or the
// step that failed (2 listen, 3 connect, 4 accept, 5 no pair in time).
int connectSelf(const tideNet_v1_t& n, void** lc, void** s, void** r) {
  uint8_t handle[TIDE_NET_HANDLE_MAXSIZE];
  *lc = *s = *r = nullptr;
  if (n.listen(0, handle, lc) != tideSuccess) return 2;
  for (int i = 0; i < 100000 && (*s == nullptr || *r == nullptr); ++i) {
    if (*s == nullptr && n.connect(0, handle, s) != tideSuccess) return 3;
    if (*r == nullptr && n.accept(*lc, r) != tideSuccess) return 4;
    usleep(10);
  }
  return *s == nullptr || *r == nullptr ? 5 : 0;
}

void closeAll(const tideNet_v1_t& n, void* lc, void* s, void* r) {
  n.closeSend(s);
  n.closeRecv(r);
  n.closeListen(lc);
}

// Writes the wire form of `h` to non-blocking `fd`.
bool writeHeader(int fd, const SocketStripeHeader& h) {
  uint8_t w[kStripeHeaderBytes];
  encodeStripeHeader(h, w);
  return writeAll(fd, w, sizeof(w));
}

// Connects a socket-net comm pair over IPv4 loopback with `threads` helper
// threads and `nsocks` data sockets; sets `out` to the send comm's sockets in
// index (= creation) order, found as the fds whose peer is the listener, so
// a test can write stripes on them itself. Returns 0 or an exit code.
int rawPair(const char* threads, const char* perThread, size_t nsocks, void** lc, void** s,
            void** r, std::vector<int>* out) {
  setenv("TIDE_SOCKET_IFNAME", "lo", 1);
  setenv("TIDE_SOCKET_FAMILY", "AF_INET", 1);
  setenv("TIDE_SOCKET_NTHREADS", threads, 1);
  setenv("TIDE_NSOCKS_PERTHREAD", perThread, 1);
  const tideNet_v1_t& n = kSocketNet;
  if (n.init(nullptr) != tideSuccess) return 77;
  if (int e = connectSelf(n, lc, s, r)) return e;
  int listenPort = -1;
  for (int fd = 0; fd < 1024; ++fd) {
    int v = 0;
    socklen_t len = sizeof(v);
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &v, &len) != 0) continue;
    sockaddr_in a{};
    socklen_t al = sizeof(a);
    if (v == 1 && getsockname(fd, reinterpret_cast<sockaddr*>(&a), &al) == 0)
      listenPort = ntohs(a.sin_port);
  }
  for (int fd = 0; fd < 1024; ++fd) {
    sockaddr_in a{};
    socklen_t al = sizeof(a);
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&a), &al) == 0 &&
        ntohs(a.sin_port) == listenPort)
      out->push_back(fd);
  }
  return out->size() == nsocks ? 0 : 6;
}

constexpr uint32_t kStripeMagic = 0x534f4344;

// A stripe header whose offset + length wraps around 2^64 is corrupt: the
// receive must fail without writing outside its buffer.
TEST(SocketNet, WrappingStripeOffsetIsRejected) {
  int rc = inChild([] {
    void *lc, *s, *r;
    std::vector<int> out;
    if (int e = rawPair("0", "1", 1, &lc, &s, &r, &out)) return e;
    const tideNet_v1_t& n = kSocketNet;
    std::vector<uint8_t> mem(64 + 16 + 64, 0xee);  // guard, buffer, guard
    void* dst = mem.data() + 64;
    size_t cap = 16;
    int tag = 5;
    void* rr = nullptr;
    if (n.irecv(r, 1, &dst, &cap, &tag, nullptr, &rr) != tideSuccess || rr == nullptr) return 7;
    SocketStripeHeader h{kStripeMagic, 0, 16, ~uint64_t{0} - 7, 16, 5};  // offset "-8"
    std::vector<uint8_t> pay(16, 0x11);
    if (!writeHeader(out[0], h) || !writeAll(out[0], pay.data(), pay.size())) return 8;
    int done = 0;
    tideResult_t res = tideSuccess;
    for (int i = 0; i < 20000 && res == tideSuccess && !done; ++i) {
      res = n.test(rr, &done, nullptr);
      usleep(100);
    }
    for (size_t i = 0; i < mem.size(); ++i)
      if ((i < 64 || i >= 80) && mem[i] != 0xee) return 9;
    if (res != tideInvalidUsage) return 10;
    closeAll(n, lc, s, r);
    return 0;
  });
  if (rc == 77) GTEST_SKIP() << "no IPv4 loopback";
  EXPECT_EQ(rc, 0);
}

// With two helper threads: one socket delivers a mismatched message while the
// other is in the middle of a stripe of an earlier receive. Once test() has
// reported the failure and ended that receive, the net must no longer touch
// its request or its buffer (the caller may free both).
TEST(SocketNet, NoWriteIntoReceiveAfterItFailed) {
  int rc = inChild([] {
    void *lc, *s, *r;
    std::vector<int> out;
    if (int e = rawPair("2", "1", 2, &lc, &s, &r, &out)) return e;
    const tideNet_v1_t& n = kSocketNet;
    constexpr uint32_t kS = 256 << 10;
    std::vector<uint8_t> buf(2 * kS, 0), small(16, 0), pay(kS, 0x11);
    void *r0 = nullptr, *r1 = nullptr;
    void* d0 = buf.data();
    void* d1 = small.data();
    size_t c0 = buf.size(), c1 = small.size();
    int t0 = 1, t1 = 2;
    if (n.irecv(r, 1, &d0, &c0, &t0, nullptr, &r0) != tideSuccess || r0 == nullptr) return 7;
    if (n.irecv(r, 1, &d1, &c1, &t1, nullptr, &r1) != tideSuccess || r1 == nullptr) return 8;
    // Socket 1: the second stripe of message 0, half of it for now.
    SocketStripeHeader h1{kStripeMagic, 0, 2 * kS, kS, kS, 1};
    if (!writeHeader(out[1], h1) || !writeAll(out[1], pay.data(), kS / 2)) return 9;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    // Socket 0: the first stripe, then message 1 with a tag the receive does not expect.
    SocketStripeHeader h0{kStripeMagic, 0, 2 * kS, 0, kS, 1};
    SocketStripeHeader bad{kStripeMagic, 1, 16, 0, 16, 99};
    if (!writeHeader(out[0], h0) || !writeAll(out[0], pay.data(), kS) ||
        !writeHeader(out[0], bad) || !writeAll(out[0], pay.data(), 16))
      return 10;
    int done = 0;
    tideResult_t res = tideSuccess;
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (res == tideSuccess && !done && std::chrono::steady_clock::now() < until) {
      res = n.test(r0, &done, nullptr);
      if (res == tideSuccess && !done) usleep(100);
    }
    if (res != tideInvalidUsage) return 11;
    // Receive 0 has ended: its buffer is the caller's again.
    std::memset(buf.data(), 0xee, buf.size());
    if (!writeAll(out[1], pay.data(), kS / 2)) return 12;
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    for (uint8_t v : buf)
      if (v != 0xee) return 13;
    n.test(r1, &done, nullptr);
    closeAll(n, lc, s, r);
    return 0;
  });
  if (rc == 77) GTEST_SKIP() << "no IPv4 loopback";
  EXPECT_EQ(rc, 0);
}

// Zero-byte messages with a helper thread: test() may report the receive done
// (and free it) as soon as it looks complete, so the helper must not touch the
// request after making it look so. Here every unlock by the helper sleeps
// 20 ms (matching a stripe header ends with one) and freed blocks fault when
// touched: a helper that publishes the total before its last access faults.
TEST(SocketNet, ZeroByteReceiveNotTouchedAfterDone) {
  int rc = inChild([] {
    void *lc, *s, *r;
    std::vector<int> out;
    if (int e = rawPair("1", "1", 1, &lc, &s, &r, &out)) return e;
    const tideNet_v1_t& n = kSocketNet;
    fence::on = true;
    fence::unlockDelayUs = 20000;
    for (uint32_t k = 0; k < 5; ++k) {
      void* dst = nullptr;
      size_t cap = 0;
      int tag = 4;
      void* rr = nullptr;
      if (n.irecv(r, 1, &dst, &cap, &tag, nullptr, &rr) != tideSuccess || rr == nullptr) return 7;
      if (!writeHeader(out[0], SocketStripeHeader{kStripeMagic, k, 0, 0, 0, 4})) return 8;
      int done = 0;
      size_t got = 1;
      auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (!done && std::chrono::steady_clock::now() < until) {
        if (n.test(rr, &done, &got) != tideSuccess) return 9;
      }
      if (!done || got != 0) return 10;
    }
    usleep(100000);  // the helper's last unlock delay ends
    fence::unlockDelayUs = 0;
    fence::on = false;
    closeAll(n, lc, s, r);
    return 0;
  });
  if (rc == 77) GTEST_SKIP() << "no IPv4 loopback";
  EXPECT_EQ(rc, 0) << "100 + n: killed by signal n (11: the net touched a freed request)";
}

// The same without the delay, many times: sizes and completion.
TEST(SocketNet, ZeroByteReceivesWithHelperThread) {
  int rc = inChild([] {
    void *lc, *s, *r;
    std::vector<int> out;
    if (int e = rawPair("1", "1", 1, &lc, &s, &r, &out)) return e;
    const tideNet_v1_t& n = kSocketNet;
    for (uint32_t k = 0; k < 2000; ++k) {
      void* dst = nullptr;
      size_t cap = 0;
      int tag = 4;
      void* rr = nullptr;
      if (n.irecv(r, 1, &dst, &cap, &tag, nullptr, &rr) != tideSuccess || rr == nullptr) return 7;
      SocketStripeHeader h{kStripeMagic, k, 0, 0, 0, 4};
      if (!writeHeader(out[0], h)) return 8;
      int done = 0;
      size_t got = 1;
      auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (!done && std::chrono::steady_clock::now() < until) {
        if (n.test(rr, &done, &got) != tideSuccess) return 9;
      }
      if (!done || got != 0) return 10;
    }
    closeAll(n, lc, s, r);
    return 0;
  });
  if (rc == 77) GTEST_SKIP() << "no IPv4 loopback";
  EXPECT_EQ(rc, 0);
}

// In a child (the net reads its knobs once): init on `ifname`/`family`,
// connect to itself, move 3 MiB both ways and check TCP_USER_TIMEOUT and
// SO_KEEPALIVE on the data socket. Returns the child's exit code.
int loopbackTransfer(const char* ifname, const char* family) {
  pid_t pid = fork();
  if (pid != 0) {
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 100;
  }
  setenv("TIDE_SOCKET_IFNAME", ifname, 1);
  setenv("TIDE_SOCKET_FAMILY", family, 1);
  setenv("TIDE_SOCKET_NTHREADS", "0", 1);  // one socket; the receive comm's getPollFd returns it
  setenv("TIDE_NSOCKS_PERTHREAD", "1", 1);
  setenv("TIDE_TIMEOUT", "42", 1);
  const tideNet_v1_t& n = kSocketNet;
  if (n.init(nullptr) != tideSuccess) _exit(77);
  void *lc, *s, *r;
  if (int e = connectSelf(n, &lc, &s, &r)) _exit(e);
  int fd = -1, v = 0;
  socklen_t len = sizeof(v);
  n.getPollFd(r, &fd);
  if (fd < 0 || getsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &v, &len) != 0 || v != 42000)
    _exit(6);
  if (getsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &v, &len) != 0 || v != 1) _exit(7);
  std::vector<uint8_t> out(3 << 20), in(3 << 20);
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(i * 7);
  void *sr = nullptr, *rr = nullptr;
  void* dst = in.data();
  size_t cap = in.size();
  int tag = 9;
  if (n.isend(s, out.data(), out.size(), 9, nullptr, &sr) != tideSuccess || sr == nullptr) _exit(8);
  if (n.irecv(r, 1, &dst, &cap, &tag, nullptr, &rr) != tideSuccess || rr == nullptr) _exit(9);
  int sd = 0, rd = 0;
  size_t got = 0;
  for (int i = 0; i < 10000000 && !(sd && rd); ++i) {
    if (!sd && n.test(sr, &sd, nullptr) != tideSuccess) _exit(10);
    if (!rd && n.test(rr, &rd, &got) != tideSuccess) _exit(11);
  }
  if (!sd || !rd || got != out.size() || in != out) _exit(12);
  closeAll(n, lc, s, r);
  _exit(0);
}

TEST(SocketNet, Ipv4Loopback) { EXPECT_EQ(loopbackTransfer("lo", "AF_INET"), 0); }

TEST(SocketNet, Ipv6Loopback) {
  if (findNetDevices("lo", AF_INET6).empty()) GTEST_SKIP() << "no IPv6 on lo";
  EXPECT_EQ(loopbackTransfer("lo", "AF_INET6"), 0);
}

// net.h: a comm's poll fd turns readable when a request may have advanced,
// "room to send" included. Without helper threads a send comm's fd must wake a
// sender whose socket buffer was full once the receiver has drained it.
TEST(SocketNet, SendPollFdWakesWhenRoomToSend) {
  int rc = inChild([] {
    setenv("TIDE_SOCKET_IFNAME", "lo", 1);
    setenv("TIDE_SOCKET_FAMILY", "AF_INET", 1);
    setenv("TIDE_SOCKET_NTHREADS", "0", 1);
    setenv("TIDE_NSOCKS_PERTHREAD", "1", 1);
    setenv("TIDE_SOCKET_BUFSIZE", "128K", 1);  // the sender's buffer fills many times
    const tideNet_v1_t& n = kSocketNet;
    if (n.init(nullptr) != tideSuccess) return 77;
    void *lc, *s, *r;
    if (int e = connectSelf(n, &lc, &s, &r)) return e;
    constexpr size_t kBytes = 8 << 20;
    std::vector<uint8_t> out(kBytes, 0x5a), in(kBytes, 0);
    void *sr = nullptr, *rr = nullptr;
    void* dst = in.data();
    size_t cap = in.size();
    int tag = 3;
    if (n.irecv(r, 1, &dst, &cap, &tag, nullptr, &rr) != tideSuccess || rr == nullptr) return 6;
    std::thread receiver([&] {  // the receiving side drains its socket every 2 ms
      int rd = 0;
      while (!rd && n.test(rr, &rd, nullptr) == tideSuccess) usleep(2000);
    });
    int fd = -1;
    n.getPollFd(s, &fd);
    if (fd < 0 || n.isend(s, out.data(), out.size(), 3, nullptr, &sr) != tideSuccess) return 7;
    int sd = 0, timeouts = 0;
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < until) {
      if (n.test(sr, &sd, nullptr) != tideSuccess) return 8;
      if (sd) break;
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 200) == 0) ++timeouts;
    }
    receiver.join();
    if (!sd || in != out) return 9;
    closeAll(n, lc, s, r);
    return timeouts == 0 ? 0 : 20 + std::min(timeouts, 50);
  });
  if (rc == 77) GTEST_SKIP() << "no IPv4 loopback";
  EXPECT_EQ(rc, 0);
}

TEST(SocketNet, NoMatchingInterfaceFailsInit) {
  pid_t pid = fork();
  if (pid == 0) {
    setenv("TIDE_SOCKET_IFNAME", "=no-such-if0", 1);
    _exit(kSocketNet.init(nullptr) == tideSystemError ? 0 : 1);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

}  // namespace
}  // namespace tide
