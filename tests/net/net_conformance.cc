// Conformance suite for nets (include/tide/net.h): ONE body, run for every
// net (socket, ucx, ib, the example plugin) by meson with --net=<name>.
// Uses the public API only (tideNetGet). Two real processes (fork) per case:
// each listens, the handles cross a pipe, each connects to the other and
// accepts the other, then both run the case as rank 0 / rank 1.
// Exits 77 when the net cannot run here (no device, not built).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "tide/net.h"

namespace {

std::string gNet = "socket";

using Clock = std::chrono::steady_clock;

struct Pair {
  const tideNet_v1_t* net = nullptr;
  void* send = nullptr;
  void* recv = nullptr;
  int rank = 0;
};

#define REQUIRE(cond)                                                                           \
  do {                                                                                          \
    if (!(cond)) {                                                                              \
      fprintf(stderr, "rank %d: %s:%d: check failed: %s\n", p.rank, __FILE__, __LINE__, #cond); \
      return 1;                                                                                 \
    }                                                                                           \
  } while (0)

// Tests `req` until done or error; bounded. Returns the test() result or
// tideTimeout.
tideResult_t waitReq(const tideNet_v1_t* net, void* req, size_t* size, double seconds = 60) {
  auto end = Clock::now() + std::chrono::duration<double>(seconds);
  int spins = 0;
  for (;;) {
    int done = 0;
    tideResult_t r = net->test(req, &done, size);
    if (r != tideSuccess || done) return r;
    if (Clock::now() > end) return tideTimeout;
    if (++spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

// Posts until the net accepts (it may answer "retry later").
tideResult_t postSend(const Pair& p, const void* buf, size_t n, int tag, void** req) {
  for (int i = 0; i < 100000; ++i) {
    tideResult_t r = p.net->isend(p.send, buf, n, tag, nullptr, req);
    if (r != tideSuccess || *req != nullptr) return r;
    std::this_thread::sleep_for(std::chrono::microseconds(10));
  }
  return tideTimeout;
}

tideResult_t postRecv(const Pair& p, void* buf, size_t n, int tag, void** req) {
  for (int i = 0; i < 100000; ++i) {
    tideResult_t r = p.net->irecv(p.recv, 1, &buf, &n, &tag, nullptr, req);
    if (r != tideSuccess || *req != nullptr) return r;
    std::this_thread::sleep_for(std::chrono::microseconds(10));
  }
  return tideTimeout;
}

uint8_t pattern(int rank, size_t msg, size_t i) {
  return static_cast<uint8_t>((i * 131 + msg * 7 + rank * 29) >> 3);
}

// Each of the two processes: get the net, listen, swap handles, connect and
// accept, run the body, close. Returns the body's exit code.
int runSide(int rank, int toPeer, int fromPeer, const std::function<int(Pair&)>& body) {
  Pair p;
  p.rank = rank;
  if (tideNetGet(gNet.c_str(), &p.net) != tideSuccess) return 2;
  uint8_t mine[TIDE_NET_HANDLE_MAXSIZE], theirs[TIDE_NET_HANDLE_MAXSIZE];
  void* lc = nullptr;
  REQUIRE(p.net->listen(0, mine, &lc) == tideSuccess);
  REQUIRE(write(toPeer, mine, sizeof(mine)) == static_cast<ssize_t>(sizeof(mine)));
  REQUIRE(read(fromPeer, theirs, sizeof(theirs)) == static_cast<ssize_t>(sizeof(theirs)));
  auto end = Clock::now() + std::chrono::seconds(30);
  while (p.send == nullptr || p.recv == nullptr) {
    if (p.send == nullptr) REQUIRE(p.net->connect(0, theirs, &p.send) == tideSuccess);
    if (p.recv == nullptr) REQUIRE(p.net->accept(lc, &p.recv) == tideSuccess);
    REQUIRE(Clock::now() < end);
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  REQUIRE(p.net->closeListen(lc) == tideSuccess);
  int rc = body(p);
  if (p.send) p.net->closeSend(p.send);
  if (p.recv) p.net->closeRecv(p.recv);
  return rc;
}

// Forks two processes that run `body` as rank 0 and rank 1; this process
// only waits. (Both ranks must be fresh: a net such as UCX keeps threads and
// sockets that a process forked after its init does not inherit.) Fails the
// test if either side fails or takes longer than `seconds`; with `childDies`
// rank 1 is expected to end by SIGKILL.
void runPair(const std::function<int(Pair&)>& body, int seconds = 120, bool childDies = false) {
  int a[2], b[2];
  ASSERT_EQ(pipe(a), 0);
  ASSERT_EQ(pipe(b), 0);
  fflush(nullptr);
  pid_t pids[2];
  for (int rank = 0; rank < 2; ++rank) {
    pids[rank] = fork();
    ASSERT_GE(pids[rank], 0);
    if (pids[rank] == 0) {
      alarm(seconds);
      _exit(rank == 0 ? runSide(0, a[1], b[0], body) : runSide(1, b[1], a[0], body));
    }
  }
  int status[2] = {0, 0};
  bool reaped[2] = {false, false};
  auto end = Clock::now() + std::chrono::seconds(seconds + 5);
  while (!reaped[0] || !reaped[1]) {
    for (int rank = 0; rank < 2; ++rank) {
      if (!reaped[rank] && waitpid(pids[rank], &status[rank], WNOHANG) == pids[rank]) {
        reaped[rank] = true;
      }
    }
    if (Clock::now() > end) {
      for (int rank = 0; rank < 2; ++rank) {
        if (reaped[rank]) continue;
        kill(pids[rank], SIGKILL);
        waitpid(pids[rank], &status[rank], 0);
        reaped[rank] = true;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (int fd : {a[0], a[1], b[0], b[1]}) close(fd);
  EXPECT_TRUE(WIFEXITED(status[0]) && WEXITSTATUS(status[0]) == 0)
      << "rank 0 failed (status " << status[0] << ")";
  if (childDies) {
    EXPECT_TRUE(WIFSIGNALED(status[1]) && WTERMSIG(status[1]) == SIGKILL) << "status " << status[1];
  } else {
    EXPECT_TRUE(WIFEXITED(status[1]) && WEXITSTATUS(status[1]) == 0)
        << "rank 1 failed (status " << status[1] << ")";
  }
}

// Sends `sizes` to the peer while receiving the same list, both directions
// at once, with up to `window` requests per direction in flight.
int exchange(Pair& p, const std::vector<size_t>& sizes, size_t window) {
  size_t n = sizes.size();
  std::vector<std::vector<uint8_t>> out(n), in(n);
  for (size_t m = 0; m < n; ++m) {
    out[m].resize(sizes[m]);
    in[m].assign(sizes[m] + 1, 0xee);  // one spare byte: must stay untouched
    for (size_t i = 0; i < sizes[m]; ++i) out[m][i] = pattern(p.rank, m, i);
  }
  std::vector<void*> sreq(n, nullptr), rreq(n, nullptr);
  size_t sPosted = 0, rPosted = 0, sDone = 0, rDone = 0;
  auto end = Clock::now() + std::chrono::seconds(90);
  while (sDone < n || rDone < n) {
    if (Clock::now() >= end) {
      fprintf(stderr, "rank %d: stuck: sent %zu/%zu done, received %zu/%zu done of %zu\n", p.rank,
              sDone, sPosted, rDone, rPosted, n);
      return 1;
    }
    while (sPosted < n && sPosted - sDone < window) {
      void* req = nullptr;
      REQUIRE(p.net->isend(p.send, out[sPosted].data(), sizes[sPosted], static_cast<int>(sPosted),
                           nullptr, &req) == tideSuccess);
      if (req == nullptr) break;
      sreq[sPosted++] = req;
    }
    while (rPosted < n && rPosted - rDone < window) {
      void* req = nullptr;
      void* buf = in[rPosted].data();
      size_t cap = sizes[rPosted] + 1;  // larger than the message: size is reported
      int tag = static_cast<int>(rPosted);
      REQUIRE(p.net->irecv(p.recv, 1, &buf, &cap, &tag, nullptr, &req) == tideSuccess);
      if (req == nullptr) break;
      rreq[rPosted++] = req;
    }
    bool moved = false;
    for (size_t m = sDone; m < sPosted; ++m) {
      if (sreq[m] == nullptr) continue;
      int done = 0;
      REQUIRE(p.net->test(sreq[m], &done, nullptr) == tideSuccess);
      if (done) sreq[m] = nullptr, moved = true;
    }
    while (sDone < sPosted && sreq[sDone] == nullptr) ++sDone;
    for (size_t m = rDone; m < rPosted; ++m) {
      if (rreq[m] == nullptr) continue;
      int done = 0;
      size_t got = 0;
      REQUIRE(p.net->test(rreq[m], &done, &got) == tideSuccess);
      if (!done) continue;
      rreq[m] = nullptr;
      moved = true;
      REQUIRE(got == sizes[m]);
      for (size_t i = 0; i < sizes[m]; ++i) {
        if (in[m][i] != pattern(1 - p.rank, m, i)) {
          fprintf(stderr, "rank %d: message %zu byte %zu wrong\n", p.rank, m, i);
          return 1;
        }
      }
      REQUIRE(in[m][sizes[m]] == 0xee);
    }
    while (rDone < rPosted && rreq[rDone] == nullptr) ++rDone;
    if (!moved) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  return 0;
}

class NetConformance : public ::testing::Test {};

TEST_F(NetConformance, ConnectAndProperties) {
  runPair([](Pair& p) {
    int n = 0;
    REQUIRE(p.net->devices(&n) == tideSuccess && n >= 1);
    tideNetProperties_v1_t props{};
    REQUIRE(p.net->getProperties(0, &props) == tideSuccess);
    REQUIRE(props.name != nullptr && props.maxRecvs >= 1 && props.maxSize >= (1u << 20));
    REQUIRE(props.ptrSupport & TIDE_NET_PTR_HOST);
    return 0;
  });
}

TEST_F(NetConformance, BidirectionalStreams) {
  runPair([](Pair& p) {
    std::vector<size_t> sizes;
    for (int i = 0; i < 400; ++i) sizes.push_back((static_cast<size_t>(i) * 7919) % 300000);
    return exchange(p, sizes, 4);
  });
}

TEST_F(NetConformance, ManyOutstandingRequests) {
  runPair([](Pair& p) {
    std::vector<size_t> sizes(256);
    for (size_t i = 0; i < sizes.size(); ++i) sizes[i] = 1 + (i * 97) % 5000;
    return exchange(p, sizes, 256);
  });
}

TEST_F(NetConformance, SizesZeroTo64MiB) {
  runPair([](Pair& p) {
    std::vector<size_t> sizes = {0, 1, 7, 4096, 65537, 1 << 20, (16 << 20) + 3, 64 << 20, 0, 5};
    return exchange(p, sizes, 2);
  });
}

TEST_F(NetConformance, OversizedMessageFailsTheReceive) {
  runPair([](Pair& p) {
    std::vector<uint8_t> buf(4096, 1);
    void* req = nullptr;
    if (p.rank == 0) {
      REQUIRE(postSend(p, buf.data(), buf.size(), 0, &req) == tideSuccess);
      waitReq(p.net, req, nullptr, 10);  // may or may not complete: the peer rejects
      std::this_thread::sleep_for(std::chrono::seconds(2));
      return 0;
    }
    REQUIRE(postRecv(p, buf.data(), 100, 0, &req) == tideSuccess);
    tideResult_t r = waitReq(p.net, req, nullptr, 30);
    REQUIRE(r != tideSuccess && r != tideTimeout);
    return 0;
  });
}

TEST_F(NetConformance, CloseWhileBusy) {
  runPair([](Pair& p) {
    const size_t big = 64 << 20;
    std::vector<uint8_t> out(big, 3), in(big);
    void* s[4] = {};
    void* r[4] = {};
    // The peer may close first: then posting may fail (remote error); fine.
    for (int i = 0; i < 4; ++i) {
      if (postSend(p, out.data(), big, i, &s[i]) != tideSuccess) s[i] = nullptr;
      if (postRecv(p, in.data(), big, i, &r[i]) != tideSuccess) r[i] = nullptr;
    }
    int done = 0;
    if (s[0] != nullptr) p.net->test(s[0], &done, nullptr);  // get things moving
    auto t0 = Clock::now();
    REQUIRE(p.net->closeSend(p.send) == tideSuccess);
    REQUIRE(p.net->closeRecv(p.recv) == tideSuccess);
    p.send = p.recv = nullptr;
    REQUIRE(Clock::now() - t0 < std::chrono::seconds(10));
    return 0;
  });
}

TEST_F(NetConformance, PeerDeathIsReported) {
  runPair(
      [](Pair& p) {
        std::vector<uint8_t> buf(1 << 20);
        void* req = nullptr;
        if (p.rank == 1) {
          // Move one message so the connection is known to work, then die.
          REQUIRE(postSend(p, buf.data(), buf.size(), 0, &req) == tideSuccess);
          REQUIRE(waitReq(p.net, req, nullptr) == tideSuccess);
          std::this_thread::sleep_for(std::chrono::milliseconds(200));
          raise(SIGKILL);
        }
        REQUIRE(postRecv(p, buf.data(), buf.size(), 0, &req) == tideSuccess);
        REQUIRE(waitReq(p.net, req, nullptr) == tideSuccess);
        REQUIRE(postRecv(p, buf.data(), buf.size(), 1, &req) == tideSuccess);
        auto t0 = Clock::now();
        tideResult_t r = waitReq(p.net, req, nullptr, 60);
        REQUIRE(r == tideRemoteError || r == tideSystemError);
        double dt = std::chrono::duration<double>(Clock::now() - t0).count();
        fprintf(stderr, "peer death noticed after %.2f s (%s)\n", dt, tideGetErrorString(r));
        // A send on the broken channel fails too (now or on test).
        void* sreq = nullptr;
        tideResult_t s = tideSuccess;
        for (int i = 0; i < 200 && s == tideSuccess; ++i) {
          s = p.net->isend(p.send, buf.data(), buf.size(), 2, nullptr, &sreq);
          if (s == tideSuccess && sreq != nullptr) s = waitReq(p.net, sreq, nullptr, 30);
        }
        REQUIRE(s != tideSuccess && s != tideTimeout);
        return 0;
      },
      120, true);
}

}  // namespace

// Exit 77 (skip) when the net cannot be used here. The probe runs in a child
// so that the net is initialized after fork in the test processes.
int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--net=", 6) == 0) gNet = argv[i] + 6;
  }
  signal(SIGPIPE, SIG_IGN);
  pid_t pid = fork();
  if (pid == 0) {
    const tideNet_v1_t* net = nullptr;
    tideResult_t r = tideNetGet(gNet.c_str(), &net);
    if (r != tideSuccess) {
      fprintf(stderr, "SKIP: net \"%s\" is not usable here (%s; TIDE_DEBUG=WARN shows why)\n",
              gNet.c_str(), tideGetErrorString(r));
    }
    _exit(r == tideSuccess ? 0 : 77);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return 77;
  return RUN_ALL_TESTS();
}
