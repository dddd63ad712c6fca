// Shared-memory transport: whole connections between two threads and between
// two processes (fork), built through a two-rank SetupContext over a
// socketpair: exchanges, reducing receives, peer failures, mismatched calls
// and operation tags, and throughput. The FIFO itself is in test_shm.cc.
#include <dirent.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/registry.h"
#include "core/transport.h"
#include "tests/unit/shm_pair.h"

namespace tide {
namespace {

using shmtest::makeData;
using shmtest::pattern;
using shmtest::sumInt32;

using Clock = std::chrono::steady_clock;

// ---- Two ranks over a socketpair -----------------------------------------------

bool fullIo(int fd, void* p, size_t n, bool write) {
  auto* c = static_cast<char*>(p);
  while (n > 0) {
    pollfd pfd{fd, static_cast<short>(write ? POLLOUT : POLLIN), 0};
    if (poll(&pfd, 1, 30000) != 1) return false;
    ssize_t r = write ? ::write(fd, c, n) : ::read(fd, c, n);
    if (r <= 0) return false;
    c += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

class PairContext final : public SetupContext {
 public:
  PairContext(int fd, int rank, std::string prefix)
      : fd_(fd), rank_(rank), prefix_(std::move(prefix)) {}
  Status init() {
    PeerInfo me;
    me.rank = rank_;
    me.pid = static_cast<int>(getpid());
    me.hostHash = 42;
    peers_.resize(2);
    return allGather(&me, sizeof(me), peers_.data());
  }
  int rank() const override { return rank_; }
  int nranks() const override { return 2; }
  const std::vector<PeerInfo>& peers() const override { return peers_; }
  Status allGather(const void* mine, size_t bytes, void* all) override {
    char* out = static_cast<char*>(all);
    std::memcpy(out + rank_ * bytes, mine, bytes);
    if (!fullIo(fd_, const_cast<void*>(mine), bytes, true) ||
        !fullIo(fd_, out + (1 - rank_) * bytes, bytes, false)) {
      return remoteError("test: allGather failed");
    }
    ++collectives;
    return Status::Ok();
  }
  Status barrier() override {
    char a = 0, all[2];
    return allGather(&a, 1, all);
  }
  const uint8_t* secret() const override { return secret_; }
  std::string resourcePrefix() const override { return prefix_; }
  uint64_t commHash() const override { return 0x5eed; }
  std::string localAddress() const override { return "127.0.0.1"; }
  void installDoorbell(Doorbell* bell) override { bell_ = bell; }
  Doorbell* doorbell() const override { return bell_ != nullptr ? bell_ : &own_; }
  const std::atomic<bool>& abortFlag() const override { return abort_; }
  int timeoutSeconds() const override { return 30; }
  const uint32_t* opTag(int channel) const override { return &tags[channel]; }

  int collectives = 0;
  uint32_t tags[kNumChannels] = {};  // operation tags the connections read

 private:
  int fd_;
  int rank_;
  std::string prefix_;
  std::vector<PeerInfo> peers_;
  uint8_t secret_[16] = {};
  Doorbell* bell_ = nullptr;
  mutable Doorbell own_;
  std::atomic<bool> abort_{false};
};

Transport* shmTransport() {
  for (Transport* t : registeredTransports()) {
    if (std::string(t->name()) == "shm") return t;
  }
  return nullptr;
}

std::string newPrefix() {
  static int counter = 0;
  return "tide-shmtest-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
}

int leftovers(const std::string& prefix) {
  int n = 0;
  DIR* d = opendir("/dev/shm");
  if (d == nullptr) return 0;
  while (dirent* e = readdir(d)) {
    if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0) ++n;
  }
  closedir(d);
  return n;
}

using Conns = std::vector<std::unique_ptr<Connection>>;

// Progresses until every connection is idle; sleeps on the context's
// doorbell when nothing moves. Returns "" or a description of the failure.
std::string drive(PairContext& ctx, Conns& conns, double maxSeconds) {
  auto deadline = Clock::now() + std::chrono::duration<double>(maxSeconds);
  auto pass = [&](bool* moved, bool* busy) -> std::string {
    *busy = false;
    for (auto& c : conns) {
      Status st = c->progress(moved);
      if (!st.ok()) return "progress: " + st.message();
      *busy = *busy || c->busy();
    }
    return "";
  };
  for (;;) {
    bool moved = false, busy = false;
    std::string err = pass(&moved, &busy);
    if (!err.empty()) return err;
    if (!busy) return "";
    if (moved) continue;
    if (Clock::now() > deadline) return "timed out";
    Doorbell* bell = ctx.doorbell();
    uint32_t seen = bell->prepareWait();
    err = pass(&moved, &busy);
    if (!err.empty() || moved || !busy) {
      bell->cancelWait();
      if (!err.empty()) return err;
    } else {
      bell->commitWait(seen, 10000);
    }
  }
}

// Each rank sends sizes[] on channel 0 and the reverse on channel 1, while
// receiving the same from the peer; everything is posted up front.
std::string exchange(PairContext& ctx, Conns& conns, const std::vector<size_t>& sizes) {
  const int me = ctx.rank(), peer = 1 - me;
  std::vector<std::vector<unsigned char>> out, in;
  std::vector<uint32_t> inSeeds;
  for (int c = 0; c < kNumChannels; ++c) {
    for (size_t k = 0; k < sizes.size(); ++k) {
      size_t n = sizes[c == 0 ? k : sizes.size() - 1 - k];
      out.push_back(makeData(static_cast<uint32_t>(me * 1000 + c * 100 + k), n));
      in.emplace_back(n, 0);
      inSeeds.push_back(static_cast<uint32_t>(peer * 1000 + c * 100 + k));
      uint64_t ts = 0, tr = 0;
      Connection& conn = *conns[c];
      if (!conn.postSend(out.back().data(), n, &ts).ok()) return "postSend failed";
      if (!conn.postRecv(in.back().data(), n, nullptr, &tr).ok()) return "postRecv failed";
      if (ts != k + 1 || tr != k + 1) return "bad ticket";
    }
  }
  std::string err = drive(ctx, conns, 60);
  if (!err.empty()) return err;
  for (int c = 0; c < kNumChannels; ++c) {
    if (conns[c]->sendsDone() != sizes.size() || conns[c]->recvsDone() != sizes.size()) {
      return "completion counts are wrong";
    }
  }
  for (size_t m = 0; m < in.size(); ++m) {
    for (size_t i = 0; i < in[m].size(); ++i) {
      if (in[m][i] != pattern(inSeeds[m], i)) {
        return "bad byte " + std::to_string(i) + " of message " + std::to_string(m);
      }
    }
  }
  return "";
}

// One side of a test: context, connect, body. Returns "" on success.
template <typename Body>
std::string runRank(int fd, int rank, const std::string& prefix, std::vector<int> peers,
                    Body body) {
  PairContext ctx(fd, rank, prefix);
  if (!ctx.init().ok()) return "init failed";
  Transport* t = shmTransport();
  if (t == nullptr) return "shm transport is not registered";
  Conns conns;
  Status st = t->connect(ctx, peers, &conns);
  if (!st.ok()) return "connect: " + st.message();
  if (conns.size() != peers.size() * kNumChannels) return "wrong number of connections";
  if (!peers.empty() && ctx.doorbell() == nullptr) return "no doorbell installed";
  return body(ctx, conns);
}

// Forks rank 1, which connects over sv[1], runs `body` and exits (status 0
// when body returned ""); closes sv[1] in this process. Returns the child's
// pid, or -1 when fork failed.
template <typename Body>
pid_t forkRank1(int sv[2], const std::string& prefix, Body body) {
  pid_t pid = fork();
  if (pid == 0) {
    close(sv[0]);
    std::string err = runRank(sv[1], 1, prefix, {0}, body);
    if (!err.empty()) std::fprintf(stderr, "child: %s\n", err.c_str());
    _exit(err.empty() ? 0 : 1);
  }
  close(sv[1]);
  return pid;
}

// Runs rank 1 in a child process and rank 0 here.
template <typename Body>
void runProcesses(const std::string& prefix, Body body) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  pid_t pid = forkRank1(sv, prefix, body);
  ASSERT_GE(pid, 0);
  std::string err = runRank(sv[0], 0, prefix, {1}, body);
  close(sv[0]);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_EQ(err, "");
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child failed";
}

const std::vector<size_t> kSizes = {0, 1, 4097, 64u << 20, 0, 3, 1u << 20, 128u << 10, 7};

TEST(ShmTransport, Registered) {
  Transport* t = shmTransport();
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->priority(), 10);
  PeerInfo a, b;
  a.hostHash = b.hostHash = 7;
  unsetenv("TIDE_SHM_DISABLE");
  EXPECT_TRUE(t->canConnect(a, b));
  setenv("TIDE_SHM_DISABLE", "1", 1);
  EXPECT_FALSE(t->canConnect(a, b));
  unsetenv("TIDE_SHM_DISABLE");
  b.hostHash = 8;
  EXPECT_FALSE(t->canConnect(a, b));
}

TEST(ShmTransport, TwoProcesses) {
  std::string prefix = newPrefix();
  runProcesses(prefix, [](PairContext& ctx, Conns& conns) { return exchange(ctx, conns, kSizes); });
  EXPECT_EQ(leftovers(prefix), 0);
}

TEST(ShmTransport, TwoThreadsSmallSlotsAndReduce) {
  setenv("TIDE_SHM_SLOTS", "3", 1);
  setenv("TIDE_SHM_SLOT_SIZE", "100", 1);  // rounded up to 128
  std::string prefix = newPrefix();
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  auto body = [](PairContext& ctx, Conns& conns) -> std::string {
    std::string err = exchange(ctx, conns, {0, 1, 4097, 1u << 20, 0, 129, 384, 385});
    if (!err.empty()) return err;
    // Reducing receive on channel 1: buf = src + incoming, in place.
    const size_t n = 100000;
    std::vector<int32_t> mine(n), acc(n);
    for (size_t i = 0; i < n; ++i) {
      mine[i] = static_cast<int32_t>(i * (ctx.rank() + 1));
      acc[i] = static_cast<int32_t>(7 + i);
    }
    RecvReduce rr{sumInt32, acc.data(), 4};
    uint64_t t = 0;
    if (!conns[1]->postSend(mine.data(), n * 4, &t).ok()) return "postSend failed";
    if (!conns[1]->postRecv(acc.data(), n * 4, &rr, &t).ok()) return "postRecv failed";
    err = drive(ctx, conns, 30);
    if (!err.empty()) return err;
    int peer = 1 - ctx.rank();
    for (size_t i = 0; i < n; ++i) {
      if (acc[i] != static_cast<int32_t>(7 + i + i * (peer + 1))) return "bad reduction";
    }
    return "";
  };
  std::string err1;
  std::thread other([&] { err1 = runRank(sv[1], 1, prefix, {0}, body); });
  std::string err0 = runRank(sv[0], 0, prefix, {1}, body);
  other.join();
  close(sv[0]);
  close(sv[1]);
  unsetenv("TIDE_SHM_SLOTS");
  unsetenv("TIDE_SHM_SLOT_SIZE");
  EXPECT_EQ(err0, "");
  EXPECT_EQ(err1, "");
  EXPECT_EQ(leftovers(prefix), 0);
}

TEST(ShmTransport, NoPeersStillJoinsTheCollectives) {
  std::string prefix = newPrefix();
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  int calls[2] = {0, 0};
  auto run = [&](int rank) {
    PairContext ctx(sv[rank], rank, prefix);
    if (!ctx.init().ok()) return std::string("init");
    Conns conns;
    Status st = shmTransport()->connect(ctx, {}, &conns);
    calls[rank] = ctx.collectives;
    return st.ok() && conns.empty() ? std::string() : "connect: " + st.message();
  };
  std::string err1;
  std::thread other([&] { err1 = run(1); });
  EXPECT_EQ(run(0), "");
  other.join();
  close(sv[0]);
  close(sv[1]);
  EXPECT_EQ(err1, "");
  EXPECT_EQ(calls[0], calls[1]);
  EXPECT_EQ(leftovers(prefix), 0);
}

// One side believes the pair shares a node, the other does not: both fail,
// nothing hangs and nothing is left in /dev/shm.
TEST(ShmTransport, DisagreementFailsOnBothSides) {
  std::string prefix = newPrefix();
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  Status st1;
  std::thread other([&] {
    PairContext ctx(sv[1], 1, prefix);
    if (!ctx.init().ok()) return;
    Conns conns;
    st1 = shmTransport()->connect(ctx, {}, &conns);
  });
  PairContext ctx(sv[0], 0, prefix);
  ASSERT_TRUE(ctx.init().ok());
  Conns conns;
  Status st0 = shmTransport()->connect(ctx, {1}, &conns);
  other.join();
  close(sv[0]);
  close(sv[1]);
  EXPECT_FALSE(st0.ok());
  EXPECT_FALSE(st1.ok());
  EXPECT_EQ(leftovers(prefix), 0);
}

TEST(ShmTransport, DeadPeerIsReported) {
  std::string prefix = newPrefix();
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  pid_t pid = forkRank1(sv, prefix, [](PairContext&, Conns&) { return std::string(); });
  ASSERT_GE(pid, 0);
  std::string err = runRank(sv[0], 0, prefix, {1}, [&](PairContext& ctx, Conns& conns) {
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) return std::string("waitpid");  // reap: no zombie
    std::vector<char> buf(1 << 20);
    uint64_t t = 0;
    if (!conns[0]->postRecv(buf.data(), buf.size(), nullptr, &t).ok()) return std::string("post");
    auto start = Clock::now();
    std::string e = drive(ctx, conns, 10);
    double secs = std::chrono::duration<double>(Clock::now() - start).count();
    if (e.find("rank 1") == std::string::npos) return "expected a peer error, got: " + e;
    if (secs > 5) return std::string("took too long");
    bool moved = false;
    if (conns[0]->progress(&moved).code() != tideRemoteError) return std::string("not sticky");
    return std::string();
  });
  close(sv[0]);
  EXPECT_EQ(err, "");
  EXPECT_EQ(leftovers(prefix), 0);
}

// A SIGKILLed peer that nobody has reaped yet (a zombie: kill(pid, 0) still
// succeeds) is noticed within a second, and the error names it.
TEST(ShmTransport, KilledPeerNoticedWithinOneSecond) {
  std::string prefix = newPrefix();
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  pid_t pid = forkRank1(sv, prefix, [](PairContext&, Conns&) {
    for (;;) pause();  // connected, then waits to be killed
    return std::string();
  });
  ASSERT_GE(pid, 0);
  std::string err = runRank(sv[0], 0, prefix, {1}, [&](PairContext& ctx, Conns& conns) {
    std::vector<char> buf(4096);
    uint64_t t = 0;
    if (!conns[0]->postRecv(buf.data(), buf.size(), nullptr, &t).ok()) return std::string("post");
    // Let the child finish setup (it unlinks its segment last), then kill it.
    for (int i = 0; i < 500 && leftovers(prefix) > 0; ++i) usleep(10000);
    kill(pid, SIGKILL);
    auto start = Clock::now();
    std::string e = drive(ctx, conns, 10);
    double secs = std::chrono::duration<double>(Clock::now() - start).count();
    std::printf("[ shm    ] killed peer noticed after %.3f s: %s\n", secs, e.c_str());
    if (e.find("rank 1") == std::string::npos) return "expected a peer error, got: " + e;
    if (secs > 1.0) return "took " + std::to_string(secs) + " s";
    return std::string();
  });
  int status = 0;
  waitpid(pid, &status, 0);
  close(sv[0]);
  EXPECT_EQ(err, "");
  EXPECT_EQ(leftovers(prefix), 0);
}

// The two ranks post different message sequences: the receiver reports the
// mismatch instead of mixing messages up or writing past its buffer.
TEST(ShmTransport, MismatchedMessagesAreAnError) {
  runProcesses(newPrefix(), [&](PairContext& ctx, Conns& conns) -> std::string {
    uint64_t t = 0;
    std::vector<char> buf(256, 0x11);
    if (ctx.rank() == 1) {
      // Message #1 is empty here, 100 bytes on rank 0.
      if (!conns[0]->postSend(buf.data(), 0, &t).ok()) return std::string("post");
      if (!conns[0]->postSend(buf.data(), 100, &t).ok()) return std::string("post");
      drive(ctx, conns, 2);
      return std::string();
    }
    std::vector<char> in(100 + 64, 0x7f);
    if (!conns[0]->postRecv(in.data(), 100, nullptr, &t).ok()) return std::string("post");
    std::string e = drive(ctx, conns, 5);
    if (e.find("mismatch") == std::string::npos) return "expected a mismatch, got: " + e;
    for (size_t i = 100; i < in.size(); ++i) {
      if (in[i] != 0x7f) return std::string("wrote past the buffer");
    }
    return std::string();
  });
}

// Ranks tag their posts differently (two different collectives): the
// receiver fails with invalid usage, on the FIFO path and the single-copy
// path, and writes nothing.
TEST(ShmTransport, MismatchedTagsAreInvalidUsage) {
  for (size_t bytes : {size_t{1000}, size_t{4} << 20}) {
    runProcesses(newPrefix(), [&](PairContext& ctx, Conns& conns) -> std::string {
      uint64_t t = 0;
      ctx.tags[0] = ctx.rank() == 0 ? 0xabcd0001u : 0xabcd0002u;
      std::vector<char> buf(bytes, 0x11);
      if (ctx.rank() == 1) {
        if (!conns[0]->postSend(buf.data(), bytes, &t).ok()) return std::string("post");
        (void)drive(ctx, conns, 1);  // never acked on the single-copy path
        return std::string();
      }
      if (!conns[0]->postRecv(buf.data(), bytes, nullptr, &t).ok()) return std::string("post");
      bool moved = false;
      auto deadline = Clock::now() + std::chrono::seconds(10);
      Status st;
      while (st.ok() && Clock::now() < deadline) {
        st = conns[0]->progress(&moved);
        usleep(100);
      }
      if (st.code() != tideInvalidUsage) return "expected invalid usage, got: " + st.message();
      if (st.message().find("from rank 1") == std::string::npos) return "no rank: " + st.message();
      for (char c : buf) {
        if (c != 0x11) return std::string("wrote the receive buffer");
      }
      return std::string();
    });
  }
}

// Large messages with single copy turned off go through the FIFO.
TEST(ShmTransport, TwoProcessesWithoutSingleCopy) {
  setenv("TIDE_SHM_CMA", "0", 1);
  std::string prefix = newPrefix();
  runProcesses(prefix, [](PairContext& ctx, Conns& conns) { return exchange(ctx, conns, kSizes); });
  unsetenv("TIDE_SHM_CMA");
  EXPECT_EQ(leftovers(prefix), 0);
}

// One direction, 64 MiB messages; prints the receiver's throughput.
TEST(ShmTransport, ThroughputTwoProcesses) {
  const size_t kBytes = 64u << 20;
  const int kIters = 8;
  runProcesses(newPrefix(), [&](PairContext& ctx, Conns& conns) -> std::string {
    std::vector<char> buf(kBytes, static_cast<char>(ctx.rank() + 1));
    // Rank 0 sends, rank 1 receives, one message at a time.
    auto one = [&]() -> std::string {
      uint64_t t = 0;
      Status st = ctx.rank() == 0 ? conns[0]->postSend(buf.data(), kBytes, &t)
                                  : conns[0]->postRecv(buf.data(), kBytes, nullptr, &t);
      return st.ok() ? drive(ctx, conns, 60) : "post: " + st.message();
    };
    for (int warm = 0; warm < 2; ++warm) {  // first touch and page faults
      std::string err = one();
      if (!err.empty()) return err;
    }
    if (!ctx.barrier().ok()) return "barrier";
    auto start = Clock::now();
    for (int i = 0; i < kIters; ++i) {
      std::string err = one();
      if (!err.empty()) return err;
    }
    double secs = std::chrono::duration<double>(Clock::now() - start).count();
    if (ctx.rank() == 1) {
      std::printf("[ shm    ] one direction, %d x 64 MiB: %.2f GB/s\n", kIters,
                  kIters * static_cast<double>(kBytes) / secs / 1e9);
      std::fflush(stdout);
    }
    return "";
  });
}

}  // namespace
}  // namespace tide
