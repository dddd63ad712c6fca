// UCX net (transports/ucx) through its tideNet_v1_t table, for real: UCP over
// UCX_TLS=tcp and UCX_TLS=sm,self. Each scenario runs in a forked child with
// its own UCX_TLS (UCP reads it once per process); peer death uses a second
// process that is killed. Every wait is bounded.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "transports/ucx/ucx_internal.h"
#include "transports/ucx/ucx_net.h"

namespace tide {
namespace {

using Clock = std::chrono::steady_clock;
const tideNet_v1_t& net = kUcxNet;

#define CHECK_OK(expr)                                                          \
  do {                                                                          \
    tideResult_t r_ = (expr);                                                   \
    if (r_ != tideSuccess) {                                                    \
      fprintf(stderr, "%s:%d: %s -> %d\n", __FILE__, __LINE__, #expr, (int)r_); \
      return 10;                                                                \
    }                                                                           \
  } while (0)
#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      return 11;                                                               \
    }                                                                          \
  } while (0)

// Runs fn in a child with UCX_TLS=tls; returns its exit code (77: skipped).
int inChild(const char* tls, const std::function<int()>& fn) {
  pid_t pid = fork();
  if (pid == 0) {
    setenv("UCX_TLS", tls, 1);
    alarm(120);
    _exit(fn());
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFSIGNALED(status)) return 100 + WTERMSIG(status);
  return WEXITSTATUS(status);
}

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void fill(void* buf, size_t n, uint32_t tag) {
  auto* p = static_cast<uint8_t*>(buf);
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(i * 131 + tag * 7 + (i >> 12));
}
bool check(const void* buf, size_t n, uint32_t tag) {
  auto* p = static_cast<const uint8_t*>(buf);
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != static_cast<uint8_t>(i * 131 + tag * 7 + (i >> 12))) return false;
  }
  return true;
}

// Connects a send/recv pair inside this process (connect and accept
// interleaved, both non-blocking).
int makePair(void** send, void** recv, void** listen) {
  uint8_t handle[TIDE_NET_HANDLE_MAXSIZE] = {};
  CHECK_OK(net.listen(0, handle, listen));
  *send = *recv = nullptr;
  auto t0 = Clock::now();
  while (!*send || !*recv) {
    if (!*send) CHECK_OK(net.connect(0, handle, send));
    if (!*recv) CHECK_OK(net.accept(*listen, recv));
    CHECK(since(t0) < 20);
  }
  return 0;
}

// Waits for a request; returns its result.
tideResult_t waitReq(void* req, size_t* sizes, double seconds = 30) {
  auto t0 = Clock::now();
  int done = 0;
  while (!done) {
    tideResult_t r = net.test(req, &done, sizes);
    if (r != tideSuccess) return r;
    if (since(t0) > seconds) return tideTimeout;
  }
  return tideSuccess;
}

// Waits for two requests on different comms, testing both (each test()
// progresses only its own comm's worker).
tideResult_t waitBoth(void* a, size_t* sa, void* b, size_t* sb, double seconds = 60) {
  auto t0 = Clock::now();
  int da = 0, db = 0;
  while (!da || !db) {
    if (!da) {
      tideResult_t r = net.test(a, &da, sa);
      if (r != tideSuccess) return r;
    }
    if (!db) {
      tideResult_t r = net.test(b, &db, sb);
      if (r != tideSuccess) return r;
    }
    if (since(t0) > seconds) return tideTimeout;
  }
  return tideSuccess;
}

int init() {
  CHECK_OK(net.init(nullptr));
  int ndev = 0;
  CHECK_OK(net.devices(&ndev));
  CHECK(ndev == 1);
  tideNetProperties_v1_t props;
  CHECK_OK(net.getProperties(0, &props));
  CHECK(props.maxRecvs >= 1 && props.maxSize >= (1u << 20));
  CHECK(strncmp(props.name, "ucx:", 4) == 0);
  return 0;
}

// Sizes 0 B .. 64 MiB, many outstanding, registered and not, grouped receives.
int scenarioStreams() {
  if (int rc = init()) return rc;
  void *s, *r, *l;
  if (int rc = makePair(&s, &r, &l)) return rc;
  std::vector<size_t> sizes = {0, 1, 7, 4096, 65537, 1 << 20, 5 << 20, 64 << 20};
  for (size_t n : sizes) {
    std::vector<uint8_t> a(n + 1), b(n + 1, 0);
    fill(a.data(), n, static_cast<uint32_t>(n));
    void *ma = nullptr, *mb = nullptr;
    if (n >= 4096) {
      CHECK_OK(net.regMr(s, a.data(), n, TIDE_NET_PTR_HOST, &ma));
      CHECK_OK(net.regMr(r, b.data(), n, TIDE_NET_PTR_HOST, &mb));
    }
    void* bufs[1] = {b.data()};
    size_t rsz[1] = {n + 1};  // a larger receive reports the send's size
    int tags[1] = {3};
    void* rr = nullptr;
    void* sr = nullptr;
    CHECK_OK(net.irecv(r, 1, bufs, rsz, tags, &mb, &rr));
    CHECK(rr != nullptr);
    CHECK_OK(net.isend(s, a.data(), n, 3, ma, &sr));
    CHECK(sr != nullptr);
    size_t got = 12345;
    CHECK_OK(waitBoth(sr, nullptr, rr, &got));
    CHECK(got == n);
    CHECK(check(b.data(), n, static_cast<uint32_t>(n)));
    if (ma) CHECK_OK(net.deregMr(s, ma));
    if (mb) CHECK_OK(net.deregMr(r, mb));
  }
  // Many outstanding: 200 sends posted before any receive, then grouped receives of 4.
  constexpr int kMany = 200;
  std::vector<std::vector<uint8_t>> src(kMany), dst(kMany);
  std::vector<void*> sreqs;
  for (int i = 0; i < kMany; ++i) {
    src[i].resize((i * 977) % 20000);
    dst[i].assign(src[i].size(), 0);
    fill(src[i].data(), src[i].size(), i);
    void* q = nullptr;
    CHECK_OK(net.isend(s, src[i].data(), src[i].size(), 9, nullptr, &q));
    CHECK(q != nullptr);
    sreqs.push_back(q);
  }
  for (int i = 0; i < kMany; i += 4) {
    void* bufs[4];
    size_t szs[4];
    int tags[4] = {9, 9, 9, 9};
    for (int k = 0; k < 4; ++k) bufs[k] = dst[i + k].data(), szs[k] = dst[i + k].size();
    void* q = nullptr;
    CHECK_OK(net.irecv(r, 4, bufs, szs, tags, nullptr, &q));
    size_t got[4];
    CHECK_OK(waitBoth(q, got, sreqs[i + 3], nullptr));
    sreqs[i + 3] = nullptr;
    for (int k = 0; k < 4; ++k) {
      if (got[k] != src[i + k].size())
        fprintf(stderr, "msg %d: got %zu want %zu\n", i + k, got[k], src[i + k].size());
      CHECK(got[k] == src[i + k].size());
      CHECK(check(dst[i + k].data(), got[k], i + k));
    }
  }
  for (void* q : sreqs) {
    if (q) CHECK_OK(waitReq(q, nullptr));
  }
  // A send larger than the receive fails the receive (and breaks the comm).
  std::vector<uint8_t> big(100000), small(1000);
  void* q = nullptr;
  void* bufs[1] = {small.data()};
  size_t szs[1] = {small.size()};
  int tags[1] = {1};
  CHECK_OK(net.isend(s, big.data(), big.size(), 1, nullptr, &q));
  void* rq = nullptr;
  CHECK_OK(net.irecv(r, 1, bufs, szs, tags, nullptr, &rq));
  CHECK(waitBoth(rq, nullptr, q, nullptr, 30) == tideInvalidUsage);
  // Close while busy: outstanding requests are cancelled with the comms.
  void* pending = nullptr;
  CHECK(net.irecv(r, 1, bufs, szs, tags, nullptr, &pending) == tideInvalidUsage);  // broken
  CHECK_OK(net.isend(s, big.data(), big.size(), 2, nullptr, &pending));
  CHECK_OK(net.closeSend(s));
  CHECK_OK(net.closeRecv(r));
  CHECK_OK(net.closeListen(l));
  return 0;
}

// The poll fd wakes an idle receiver when a message arrives from another process.
// Both processes initialize the net after the fork: a UCX context does not
// survive fork() (the child lacks UCX's async thread, so tcp wire-up stalls).
int scenarioPollFdAndPeerDeath() {
  uint8_t handle[TIDE_NET_HANDLE_MAXSIZE] = {};
  void* l = nullptr;
  int go[2], hp[2];
  CHECK(pipe(go) == 0 && pipe(hp) == 0);
  pid_t child = fork();
  if (child != 0) {
    if (int rc = init()) return rc;
    CHECK_OK(net.listen(0, handle, &l));
    CHECK(write(hp[1], handle, sizeof(handle)) == sizeof(handle));
  }
  if (child == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (init() != 0) _exit(19);
    if (read(hp[0], handle, sizeof(handle)) != sizeof(handle)) _exit(18);
    // Sender: connect, wait for "go", send one message, then hang (killed).
    void* s = nullptr;
    auto t0 = Clock::now();
    while (!s) {
      if (net.connect(0, handle, &s) != tideSuccess || since(t0) > 20) _exit(20);
    }
    char c;
    if (read(go[0], &c, 1) != 1) _exit(21);
    std::vector<uint8_t> msg(1 << 20);
    fill(msg.data(), msg.size(), 5);
    void* q = nullptr;
    if (net.isend(s, msg.data(), msg.size(), 0, nullptr, &q) != tideSuccess || !q) _exit(22);
    if (waitReq(q, nullptr) != tideSuccess) _exit(23);
    for (;;) pause();
  }
  void* r = nullptr;
  auto t0 = Clock::now();
  while (!r) {
    CHECK_OK(net.accept(l, &r));
    CHECK(since(t0) < 20);
  }
  int fd = -1;
  CHECK_OK(net.getPollFd(r, &fd));
  std::vector<uint8_t> buf(1 << 20);
  void* bufs[1] = {buf.data()};
  size_t szs[1] = {buf.size()};
  int tags[1] = {0};
  void* q = nullptr;
  CHECK_OK(net.irecv(r, 1, bufs, szs, tags, nullptr, &q));
  int done = 0;
  size_t got = 0;
  for (int i = 0; i < 100; ++i) CHECK_OK(net.test(q, &done, &got));  // idle: arms the worker
  CHECK(!done);
  int wakeups = 0;
  if (fd >= 0) {
    // Idle, the fd lets the caller sleep: spurious wake-ups (UCX's own
    // traffic) are allowed, a permanently readable fd is not.
    bool slept = false;
    for (int i = 0; i < 20 && !slept; ++i) {
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, 100) == 0) {
        slept = true;
      } else {
        for (int k = 0; k < 100; ++k) CHECK_OK(net.test(q, &done, &got));
      }
    }
    // Not asserted: UCX's own traffic may keep the fd busy for a while.
    fprintf(stderr, "idle poll fd let the caller sleep: %s\n", slept ? "yes" : "no");
  }
  CHECK(write(go[1], "g", 1) == 1);
  t0 = Clock::now();
  while (!done) {
    if (fd >= 0) {
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, 1000) > 0) ++wakeups;
    }
    CHECK_OK(net.test(q, &done, &got));
    CHECK(since(t0) < 30);
  }
  CHECK(got == buf.size() && check(buf.data(), got, 5));
  CHECK(fd < 0 || wakeups > 0);
  // Peer death: the next receive fails with a remote error, in bounded time.
  CHECK_OK(net.irecv(r, 1, bufs, szs, tags, nullptr, &q));
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  t0 = Clock::now();
  tideResult_t res = waitReq(q, nullptr, 60);
  fprintf(stderr, "peer death noticed after %.2f s: result %d\n", since(t0), (int)res);
  CHECK(res == tideRemoteError);
  void* q2 = nullptr;
  CHECK(net.irecv(r, 1, bufs, szs, tags, nullptr, &q2) == tideRemoteError);
  CHECK_OK(net.closeRecv(r));
  CHECK_OK(net.closeListen(l));
  return 0;
}

// A stray connection (wrong nonce) is dropped; a good one is still accepted.
int scenarioStrayConnector() {
  if (int rc = init()) return rc;
  uint8_t handle[TIDE_NET_HANDLE_MAXSIZE] = {};
  void* l = nullptr;
  CHECK_OK(net.listen(0, handle, &l));
  uint8_t bad[TIDE_NET_HANDLE_MAXSIZE];
  memcpy(bad, handle, sizeof(bad));
  reinterpret_cast<UcxHandle*>(bad)->nonce ^= 1;
  void *sb = nullptr, *s = nullptr, *r = nullptr;
  tideResult_t badResult = tideSuccess;
  auto t0 = Clock::now();
  while (!s || !r || (badResult == tideSuccess && !sb)) {
    if (badResult == tideSuccess && !sb) badResult = net.connect(0, bad, &sb);
    if (!s) CHECK_OK(net.connect(0, handle, &s));
    if (!r) CHECK_OK(net.accept(l, &r));
    CHECK(since(t0) < 20);
  }
  CHECK(sb == nullptr && badResult == tideRemoteError);
  void* extra = nullptr;
  CHECK_OK(net.accept(l, &extra));
  CHECK(extra == nullptr);
  CHECK_OK(net.closeSend(s));
  CHECK_OK(net.closeRecv(r));
  CHECK_OK(net.closeListen(l));
  return 0;
}

// Striping over 4 endpoints with a 64 KiB unit (TIDE_UCX_NSTREAMS,
// TIDE_UCX_STRIPE_UNIT; explicit values apply over sm too): sizes around
// the piece boundaries, receives larger than the message (pieces the sender
// did not use are cancelled), grouped receives, and the two ways a message
// larger than its receive fails (a truncated piece; more pieces than posted).
int scenarioStriping() {
  setenv("TIDE_UCX_NSTREAMS", "4", 1);
  setenv("TIDE_UCX_STRIPE_UNIT", "65536", 1);
  if (int rc = init()) return rc;
  void *s, *r, *l;
  if (int rc = makePair(&s, &r, &l)) return rc;
  CHECK(static_cast<UcxComm*>(s)->nstreams == 4 && static_cast<UcxComm*>(r)->nstreams == 4);
  CHECK(static_cast<UcxComm*>(s)->unit == 65536 && static_cast<UcxComm*>(r)->unit == 65536);
  constexpr size_t U = 65536;
  const size_t sizes[] = {0,         1,     U - 1,     U,          U + 1,   2 * U,
                          3 * U + 5, 4 * U, 4 * U + 1, 10 * U + 3, 17 << 20};
  const size_t slack[] = {0, 1, U, 5 * U};
  uint32_t t = 0;
  for (size_t n : sizes) {
    for (size_t extra : slack) {
      ++t;
      std::vector<uint8_t> a(n + 1), b(n + extra + 1, 0xee);
      fill(a.data(), n, t);
      void* bufs[1] = {b.data()};
      size_t rsz[1] = {n + extra};
      int tags[1] = {7};
      void *rr = nullptr, *sr = nullptr;
      CHECK_OK(net.irecv(r, 1, bufs, rsz, tags, nullptr, &rr));
      CHECK_OK(net.isend(s, a.data(), n, 7, nullptr, &sr));
      size_t got = 12345;
      CHECK_OK(waitBoth(sr, nullptr, rr, &got));
      if (got != n) fprintf(stderr, "size %zu + %zu: got %zu\n", n, extra, got);
      CHECK(got == n);
      CHECK(check(b.data(), n, t));
      CHECK(b[n + extra] == 0xee);
    }
  }
  // Grouped receive of 3 striped messages of different sizes, sends first.
  std::vector<std::vector<uint8_t>> src = {std::vector<uint8_t>(5 * U + 3),
                                           std::vector<uint8_t>(100), std::vector<uint8_t>(2 * U)};
  std::vector<std::vector<uint8_t>> dst(3);
  void* sq[3];
  for (int i = 0; i < 3; ++i) {
    fill(src[i].data(), src[i].size(), 100 + i);
    dst[i].assign(src[i].size() + U, 0);
    CHECK_OK(net.isend(s, src[i].data(), src[i].size(), 8, nullptr, &sq[i]));
  }
  void* bufs3[3] = {dst[0].data(), dst[1].data(), dst[2].data()};
  size_t szs3[3] = {dst[0].size(), dst[1].size(), dst[2].size()};
  int tags3[3] = {8, 8, 8};
  void* rq = nullptr;
  CHECK_OK(net.irecv(r, 3, bufs3, szs3, tags3, nullptr, &rq));
  size_t got3[3] = {};
  CHECK_OK(waitBoth(rq, got3, sq[0], nullptr));
  for (int i = 0; i < 3; ++i) {
    CHECK(got3[i] == src[i].size() && check(dst[i].data(), got3[i], 100 + i));
    if (i > 0) CHECK_OK(waitReq(sq[i], nullptr));
  }
  // More pieces than the receive posted: 2U + 1 bytes into a 2U receive.
  std::vector<uint8_t> big(2 * U + 1), small(2 * U);
  void* bufs[1] = {small.data()};
  size_t szs[1] = {small.size()};
  int tags[1] = {1};
  void *q = nullptr, *rq2 = nullptr;
  CHECK_OK(net.isend(s, big.data(), big.size(), 1, nullptr, &q));
  CHECK_OK(net.irecv(r, 1, bufs, szs, tags, nullptr, &rq2));
  CHECK(waitBoth(rq2, nullptr, q, nullptr, 30) == tideInvalidUsage);
  CHECK_OK(net.closeSend(s));
  CHECK_OK(net.closeRecv(r));
  CHECK_OK(net.closeListen(l));
  // A truncated piece: 4U + 7 bytes into a 4U + 3 receive (both 4 pieces).
  if (int rc = makePair(&s, &r, &l)) return rc;
  std::vector<uint8_t> big2(4 * U + 7), small2(4 * U + 3);
  bufs[0] = small2.data();
  szs[0] = small2.size();
  CHECK_OK(net.isend(s, big2.data(), big2.size(), 1, nullptr, &q));
  CHECK_OK(net.irecv(r, 1, bufs, szs, tags, nullptr, &rq2));
  CHECK(waitBoth(rq2, nullptr, q, nullptr, 30) == tideInvalidUsage);
  CHECK_OK(net.closeSend(s));
  CHECK_OK(net.closeRecv(r));
  CHECK_OK(net.closeListen(l));
  return 0;
}

class UcxNet : public ::testing::TestWithParam<const char*> {};

TEST_P(UcxNet, Streams) { EXPECT_EQ(inChild(GetParam(), scenarioStreams), 0); }
TEST_P(UcxNet, PollFdAndPeerDeath) {
  EXPECT_EQ(inChild(GetParam(), scenarioPollFdAndPeerDeath), 0);
}
TEST_P(UcxNet, Striping) { EXPECT_EQ(inChild(GetParam(), scenarioStriping), 0); }
TEST_P(UcxNet, StrayConnector) { EXPECT_EQ(inChild(GetParam(), scenarioStrayConnector), 0); }

INSTANTIATE_TEST_SUITE_P(Tls, UcxNet, ::testing::Values("tcp", "sm,self"), [](const auto& info) {
  return std::string(info.param[0] == 't' ? "tcp" : "sm_self");
});

}  // namespace
}  // namespace tide
