// TCP transport: framing and RecvReduce on a socketpair (in process), and
// connect() + data exchange between forked ranks on 127.0.0.1, including
// rejected connections and a dying peer. Every wait is bounded.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/auth.h"
#include "core/socket.h"
#include "transports/tcp/tcp_connection.h"
#include "transports/tcp/tcp_transport.h"

namespace tide {
namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void sumInt32(void* dst, const void* a, const void* b, size_t count) {
  auto* d = static_cast<int32_t*>(dst);
  auto* x = static_cast<const int32_t*>(a);
  auto* y = static_cast<const int32_t*>(b);
  for (size_t i = 0; i < count; ++i) d[i] = x[i] + y[i];
}

// Deterministic content of message `tag`.
void fillPattern(void* buf, size_t bytes, uint32_t tag) {
  auto* p = static_cast<uint8_t*>(buf);
  for (size_t i = 0; i < bytes; ++i)
    p[i] = static_cast<uint8_t>((i * 131 + tag * 7 + (i >> 12)) & 255);
}

bool checkPattern(const void* buf, size_t bytes, uint32_t tag) {
  auto* p = static_cast<const uint8_t*>(buf);
  for (size_t i = 0; i < bytes; ++i) {
    if (p[i] != static_cast<uint8_t>((i * 131 + tag * 7 + (i >> 12)) & 255)) return false;
  }
  return true;
}

// Progresses conns until done() or an error; polls when nothing moves.
Status drive(const std::vector<Connection*>& conns, const std::function<bool()>& done,
             double seconds) {
  Deadline deadline = Deadline::after(seconds);
  while (!done()) {
    bool moved = false;
    for (Connection* c : conns) TIDE_TRY(c->progress(&moved));
    if (moved) continue;
    if (deadline.expired()) return timeoutError("test: no completion within %.0f s", seconds);
    std::vector<pollfd> fds;
    for (Connection* c : conns) fds.push_back(pollfd{c->pollFd(), POLLIN, 0});
    poll(fds.data(), fds.size(), 1);
  }
  return Status::Ok();
}

// ---- In-process: TcpConnection over a socketpair ---------------------------------

struct Pair {
  int raw = -1;  // the other end, written/read by hand
  std::unique_ptr<TcpConnection> conn;
  explicit Pair(size_t bounce = kTcpBounceBytes) {
    int sv[2];
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    raw = sv[1];
    conn = std::make_unique<TcpConnection>(Socket(sv[0]), 7, 0, bounce);
  }
  ~Pair() {
    if (raw >= 0) close(raw);
  }
  void writeRaw(const void* p, size_t n) { ASSERT_EQ(write(raw, p, n), static_cast<ssize_t>(n)); }
  void writeHeader(uint32_t seq, uint64_t bytes, uint32_t magic = kTcpFrameMagic) {
    TcpFrameHeader h{magic, seq, bytes};
    writeRaw(&h, sizeof(h));
  }
};

TEST(TcpConnection, TicketsAndZeroBytes) {
  Pair p;
  uint64_t t = 0;
  char a = 'x';
  ASSERT_TRUE(p.conn->postSend(nullptr, 0, &t).ok());
  EXPECT_EQ(t, 1u);
  EXPECT_EQ(p.conn->sendsDone(), 1u);  // nothing queued: done at once
  ASSERT_TRUE(p.conn->postSend(&a, 1, &t).ok());
  ASSERT_TRUE(p.conn->postSend(nullptr, 0, &t).ok());
  EXPECT_EQ(t, 3u);
  EXPECT_EQ(p.conn->sendsDone(), 1u);  // ordered behind the 1-byte send
  EXPECT_TRUE(p.conn->busy());
  bool moved = false;
  ASSERT_TRUE(p.conn->progress(&moved).ok());
  EXPECT_TRUE(moved);
  EXPECT_EQ(p.conn->sendsDone(), 3u);
  EXPECT_FALSE(p.conn->busy());
  // Exactly one frame went out: header + 1 byte.
  uint8_t buf[64];
  EXPECT_EQ(read(p.raw, buf, sizeof(buf)), 17);
  TcpFrameHeader h;
  std::memcpy(&h, buf, sizeof(h));
  EXPECT_EQ(h.magic, kTcpFrameMagic);
  EXPECT_EQ(h.seq, 0u);
  EXPECT_EQ(h.bytes, 1u);
  EXPECT_EQ(buf[16], 'x');
}

TEST(TcpConnection, ReceivesSplitFrames) {
  Pair p;
  std::vector<uint8_t> msg(1000), got(1000, 0);
  fillPattern(msg.data(), msg.size(), 5);
  uint64_t t = 0;
  ASSERT_TRUE(p.conn->postRecv(got.data(), got.size(), nullptr, &t).ok());
  ASSERT_TRUE(p.conn->postRecv(nullptr, 0, nullptr, &t).ok());
  TcpFrameHeader h{kTcpFrameMagic, 0, 1000};
  std::vector<uint8_t> wire(sizeof(h) + msg.size());
  std::memcpy(wire.data(), &h, sizeof(h));
  std::memcpy(wire.data() + sizeof(h), msg.data(), msg.size());
  bool moved = false;
  for (size_t off = 0; off < wire.size(); off += 7) {
    EXPECT_EQ(p.conn->recvsDone(), 0u);
    p.writeRaw(wire.data() + off, std::min<size_t>(7, wire.size() - off));
    ASSERT_TRUE(p.conn->progress(&moved).ok());
  }
  EXPECT_EQ(p.conn->recvsDone(), 2u);
  EXPECT_TRUE(checkPattern(got.data(), got.size(), 5));
}

// Pieces of 3 bytes and an odd bounce size split int32 elements everywhere.
TEST(TcpConnection, RecvReduceSplitsElements) {
  for (size_t bounce : {size_t{1001}, kTcpBounceBytes}) {
    Pair p(bounce);
    const size_t count = 5000;
    std::vector<int32_t> src(count), incoming(count), dst(count, -1);
    for (size_t i = 0; i < count; ++i) {
      src[i] = static_cast<int32_t>(i * 3);
      incoming[i] = static_cast<int32_t>(1000000 - i * 7);
    }
    RecvReduce rr{sumInt32, src.data(), sizeof(int32_t)};
    uint64_t t = 0;
    ASSERT_TRUE(p.conn->postRecv(dst.data(), count * 4, &rr, &t).ok());
    p.writeHeader(0, count * 4);
    const uint8_t* bytes = reinterpret_cast<const uint8_t*>(incoming.data());
    bool moved = false;
    for (size_t off = 0; off < count * 4; off += 3) {
      p.writeRaw(bytes + off, std::min<size_t>(3, count * 4 - off));
      ASSERT_TRUE(p.conn->progress(&moved).ok());  // drain: tiny writes fill AF_UNIX fast
    }
    ASSERT_TRUE(drive(
                    {p.conn.get()}, [&] { return p.conn->recvsDone() == 1; }, 10)
                    .ok());
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(dst[i], src[i] + incoming[i]) << i;
  }
}

TEST(TcpConnection, RecvReduceInPlace) {
  Pair p;
  std::vector<int32_t> buf(100, 5), in(100, 2);
  RecvReduce rr{sumInt32, buf.data(), 4};
  uint64_t t = 0;
  ASSERT_TRUE(p.conn->postRecv(buf.data(), 400, &rr, &t).ok());
  p.writeHeader(0, 400);
  p.writeRaw(in.data(), 400);
  ASSERT_TRUE(drive(
                  {p.conn.get()}, [&] { return p.conn->recvsDone() == 1; }, 10)
                  .ok());
  for (int32_t v : buf) ASSERT_EQ(v, 7);
  // A size that is not a whole number of elements is refused.
  EXPECT_EQ(p.conn->postRecv(buf.data(), 6, &rr, &t).code(), tideInvalidArgument);
}

TEST(TcpConnection, SizeMismatchIsAnErrorNotAnOverflow) {
  Pair p;
  std::vector<uint8_t> buf(64 + 32, 0xEE);  // 64 posted + guard
  uint64_t t = 0;
  ASSERT_TRUE(p.conn->postRecv(buf.data(), 64, nullptr, &t).ok());
  p.writeHeader(0, 4096);
  std::vector<uint8_t> big(4096, 0x11);
  p.writeRaw(big.data(), big.size());
  bool moved = false;
  Status s = p.conn->progress(&moved);
  EXPECT_EQ(s.code(), tideInvalidUsage);
  EXPECT_NE(s.message().find("rank 7"), std::string::npos) << s.message();
  for (size_t i = 64; i < buf.size(); ++i) ASSERT_EQ(buf[i], 0xEE);
  // Sticky.
  EXPECT_EQ(p.conn->progress(&moved).code(), tideInvalidUsage);
  EXPECT_EQ(p.conn->postSend(buf.data(), 1, &t).code(), tideInvalidUsage);
}

TEST(TcpConnection, BadMagicAndSequence) {
  for (bool badMagic : {true, false}) {
    Pair p;
    uint8_t buf[8];
    uint64_t t = 0;
    ASSERT_TRUE(p.conn->postRecv(buf, 8, nullptr, &t).ok());
    p.writeHeader(badMagic ? 0 : 3, 8, badMagic ? 0xdeadbeef : kTcpFrameMagic);
    bool moved = false;
    Status s = p.conn->progress(&moved);
    EXPECT_EQ(s.code(), tideRemoteError);
    EXPECT_NE(s.message().find(badMagic ? "magic" : "sequence"), std::string::npos) << s.message();
  }
}

TEST(TcpConnection, ClosedPeerIsRemoteError) {
  Pair p;
  uint8_t buf[8];
  uint64_t t = 0;
  ASSERT_TRUE(p.conn->postRecv(buf, 8, nullptr, &t).ok());
  p.writeHeader(0, 8);
  close(p.raw);
  p.raw = -1;
  Status s = drive(
      {p.conn.get()}, [] { return false; }, 5);
  EXPECT_EQ(s.code(), tideRemoteError);
  EXPECT_NE(s.message().find("rank 7"), std::string::npos) << s.message();
}

// ---- Forked ranks on 127.0.0.1 ---------------------------------------------------

// SetupContext of one forked rank: allGather goes through the test process,
// which gathers one length-prefixed block per rank and sends back all of them.
class RankCtx final : public SetupContext {
 public:
  RankCtx(int rank, int nranks, int hubFd) : rank_(rank), n_(nranks), hub_(hubFd), peers_(nranks) {
    for (int r = 0; r < nranks; ++r) peers_[r].rank = r;
    std::memset(secret_, 0x5a, sizeof(secret_));
  }
  int rank() const override { return rank_; }
  int nranks() const override { return n_; }
  const std::vector<PeerInfo>& peers() const override { return peers_; }
  Status allGather(const void* mine, size_t bytes, void* all) override {
    uint64_t len = bytes;
    Deadline d = Deadline::after(60);
    TIDE_TRY(hub_.sendAll(&len, sizeof(len), d, nullptr));
    TIDE_TRY(hub_.sendAll(mine, bytes, d, nullptr));
    TIDE_TRY(hub_.recvAll(all, bytes * n_, d, nullptr));
    if (afterGather) afterGather(all);
    return Status::Ok();
  }
  Status barrier() override {
    std::vector<char> all(n_);
    char c = 0;
    return allGather(&c, 1, all.data());
  }
  const uint8_t* secret() const override { return secret_; }
  std::string resourcePrefix() const override { return "tide-test-1"; }
  uint64_t commHash() const override { return 0x7e57; }
  std::string localAddress() const override { return "127.0.0.1"; }
  void installDoorbell(Doorbell*) override {}
  Doorbell* doorbell() const override { return nullptr; }
  const std::atomic<bool>& abortFlag() const override { return abort_; }
  int timeoutSeconds() const override { return timeout; }

  // Full mesh: every other rank.
  Status connectAll(std::vector<std::unique_ptr<Connection>>* conns) {
    std::vector<int> others;
    for (int r = 0; r < n_; ++r) {
      if (r != rank_) others.push_back(r);
    }
    return TcpTransport().connect(*this, others, conns);
  }
  // Index of peer r in connectAll's output, channel c.
  size_t slot(int r, int c) const { return (r < rank_ ? r : r - 1) * kNumChannels + c; }

  uint8_t secret_[kSecretBytes];
  int timeout = 30;
  std::function<void(const void* all)> afterGather;
  std::atomic<bool> abort_{false};

 private:
  int rank_, n_;
  Socket hub_;
  std::vector<PeerInfo> peers_;
};

using RankBody = std::function<std::string(RankCtx&)>;

// Runs body in n forked ranks; returns "" when every rank returned "" and
// exited within the time limit, else a description. Children are killed at
// the limit, so a hang fails the test instead of blocking it.
std::string runRanks(int n, const RankBody& body, double limitSeconds = 60) {
  std::vector<Socket> hub(n);
  std::vector<pid_t> pids(n, -1);
  for (int r = 0; r < n; ++r) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return "socketpair failed";
    fflush(nullptr);
    pid_t pid = fork();
    if (pid == 0) {
      for (int q = 0; q < r; ++q) hub[q].close();
      close(sv[0]);
      signal(SIGPIPE, SIG_IGN);
      RankCtx ctx(r, n, sv[1]);
      std::string err = body(ctx);
      if (!err.empty()) fprintf(stderr, "[rank %d] %s\n", r, err.c_str());
      fflush(nullptr);
      _exit(err.empty() ? 0 : 1);
    }
    close(sv[1]);
    hub[r] = Socket(sv[0]);
    pids[r] = pid;
  }
  Deadline deadline = Deadline::after(limitSeconds);
  // Serve allGather rounds until some rank stops taking part.
  for (bool more = true; more;) {
    std::string all;
    size_t bytes = 0;
    for (int r = 0; r < n && more; ++r) {
      uint64_t len = 0;
      more = hub[r].recvAll(&len, sizeof(len), deadline, nullptr).ok() && (r == 0 || len == bytes);
      std::string block(more ? len : 0, '\0');
      more = more && hub[r].recvAll(block.data(), len, deadline, nullptr).ok();
      bytes = len;
      all += block;
    }
    for (int r = 0; r < n && more; ++r) {
      more = hub[r].sendAll(all.data(), all.size(), deadline, nullptr).ok();
    }
  }
  for (Socket& s : hub) s.close();
  std::string result;
  for (int r = 0; r < n; ++r) {
    int st = 0;
    while (waitpid(pids[r], &st, WNOHANG) == 0) {
      if (deadline.expired()) {
        kill(pids[r], SIGKILL);
        waitpid(pids[r], &st, 0);
        result += "rank " + std::to_string(r) + " hung; ";
        break;
      }
      usleep(5000);
    }
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) result += "rank " + std::to_string(r) + " failed; ";
  }
  return result;
}

#define RANK_CHECK(cond)                                                                  \
  do {                                                                                    \
    if (!(cond))                                                                          \
      return std::string("check failed: ") + #cond + " line " + std::to_string(__LINE__); \
  } while (0)
#define RANK_OK(expr)                                                              \
  do {                                                                             \
    Status s_ = (expr);                                                            \
    if (!s_.ok()) return "line " + std::to_string(__LINE__) + ": " + s_.message(); \
  } while (0)

// Progresses every connection until none is busy.
Status driveAll(const std::vector<std::unique_ptr<Connection>>& v, double seconds) {
  std::vector<Connection*> conns;
  for (const auto& c : v) conns.push_back(c.get());
  auto idle = [&] {
    for (Connection* c : conns) {
      if (c->busy()) return false;
    }
    return true;
  };
  return drive(conns, idle, seconds);
}

// Tag of message i from rank `from` to rank `to` on channel ch.
uint32_t tagOf(int from, int to, int ch, int i) {
  return from * 1000003u + to * 1009u + ch * 101u + i;
}

std::string connectWithoutPeers(RankCtx& ctx) {
  std::vector<std::unique_ptr<Connection>> conns;
  RANK_OK(TcpTransport().connect(ctx, {}, &conns));
  RANK_CHECK(conns.empty());
  RANK_OK(ctx.barrier());
  return "";
}

TEST(TcpRanks, ConnectWithoutPeersIsStillCollective) {
  EXPECT_EQ(runRanks(2, connectWithoutPeers), "");
}

// 0 B, 1 B, 4097 B and 64 MiB in both directions at once on both channels
// (one 64 MiB pair is enough: channel 1 uses 65537 B instead).
std::string exchangeSizes(RankCtx& ctx) {
  std::vector<std::unique_ptr<Connection>> conns;
  RANK_OK(ctx.connectAll(&conns));
  RANK_CHECK(conns.size() == 2);
  int me = ctx.rank(), peer = 1 - me;
  std::vector<std::vector<uint8_t>> out, in;
  for (int c = 0; c < kNumChannels; ++c) {
    const size_t sizes[] = {0, 1, 4097, c == 0 ? size_t{64} << 20 : 65537};
    Connection* k = conns[ctx.slot(peer, c)].get();
    for (int i = 0; i < 4; ++i) {
      out.emplace_back(sizes[i]);
      fillPattern(out.back().data(), sizes[i], tagOf(me, peer, c, i));
      in.emplace_back(sizes[i]);
      uint64_t ts = 0, tr = 0;
      RANK_OK(k->postSend(out.back().data(), sizes[i], &ts));
      RANK_OK(k->postRecv(in.back().data(), sizes[i], nullptr, &tr));
      RANK_CHECK(ts == static_cast<uint64_t>(i + 1) && tr == ts);
    }
  }
  RANK_OK(driveAll(conns, 60));
  for (int c = 0, j = 0; c < kNumChannels; ++c) {
    Connection* k = conns[ctx.slot(peer, c)].get();
    RANK_CHECK(k->sendsDone() == 4 && k->recvsDone() == 4);
    for (int i = 0; i < 4; ++i, ++j) {
      RANK_CHECK(checkPattern(in[j].data(), in[j].size(), tagOf(peer, me, c, i)));
    }
  }
  return "";
}

TEST(TcpRanks, ExchangeSizes) { EXPECT_EQ(runRanks(2, exchangeSizes), ""); }

// Three ranks, full mesh, 300 outstanding posts each way per connection.
std::string manyOutstanding(RankCtx& ctx) {
  std::vector<std::unique_ptr<Connection>> conns;
  RANK_OK(ctx.connectAll(&conns));
  const int kMsgs = 300;
  int me = ctx.rank();
  auto sizeOf = [](int from, int to, int c, int i) {
    if (i % 5 == 0) return size_t{0};
    return static_cast<size_t>(std::minstd_rand(tagOf(from, to, c, i))() % 20000);
  };
  std::vector<std::vector<uint8_t>> out, in;
  std::vector<uint32_t> inTags;
  for (int peer = 0; peer < 3; ++peer) {
    for (int c = 0; c < kNumChannels && peer != me; ++c) {
      Connection* k = conns[ctx.slot(peer, c)].get();
      for (int i = 0; i < kMsgs; ++i) {
        out.emplace_back(sizeOf(me, peer, c, i));
        fillPattern(out.back().data(), out.back().size(), tagOf(me, peer, c, i));
        in.emplace_back(sizeOf(peer, me, c, i));
        inTags.push_back(tagOf(peer, me, c, i));
        uint64_t t = 0;
        RANK_OK(k->postSend(out.back().data(), out.back().size(), &t));
        RANK_OK(k->postRecv(in.back().data(), in.back().size(), nullptr, &t));
      }
    }
  }
  RANK_OK(driveAll(conns, 60));
  for (auto& k : conns) RANK_CHECK(k->sendsDone() == kMsgs && k->recvsDone() == kMsgs);
  for (size_t j = 0; j < in.size(); ++j) {
    RANK_CHECK(checkPattern(in[j].data(), in[j].size(), inTags[j]));
  }
  return "";
}

TEST(TcpRanks, ManyOutstandingPostsThreeRanks) { EXPECT_EQ(runRanks(3, manyOutstanding), ""); }

// Both ranks send their vector and receive-reduce the other's into acc.
std::string recvReduceSum(RankCtx& ctx) {
  std::vector<std::unique_ptr<Connection>> conns;
  RANK_OK(ctx.connectAll(&conns));
  const size_t count = (3u << 20) / 4 + 3;  // several bounce buffers
  std::vector<int32_t> mine(count), acc(count, 0);
  for (size_t i = 0; i < count; ++i) mine[i] = static_cast<int32_t>(i * (ctx.rank() + 2));
  Connection* k = conns[0].get();
  RecvReduce rr{sumInt32, mine.data(), sizeof(int32_t)};
  uint64_t t = 0;
  RANK_OK(k->postSend(mine.data(), count * 4, &t));
  RANK_OK(k->postRecv(acc.data(), count * 4, &rr, &t));
  RANK_OK(driveAll(conns, 60));
  for (size_t i = 0; i < count; ++i) RANK_CHECK(acc[i] == static_cast<int32_t>(i * 5));
  return "";
}

TEST(TcpRanks, RecvReduceInt32Sum) { EXPECT_EQ(runRanks(2, recvReduceSum), ""); }

// One-direction throughput of 64 MiB messages (printed, not asserted).
std::string throughput(RankCtx& ctx) {
  std::vector<std::unique_ptr<Connection>> conns;
  RANK_OK(ctx.connectAll(&conns));
  const size_t bytes = size_t{64} << 20;
  const int iters = 8;
  std::vector<uint8_t> buf(bytes, 1);
  Connection* k = conns[0].get();
  uint64_t t = 0;
  for (int round = 0; round < 2; ++round) {  // round 0 warms up
    RANK_OK(ctx.barrier());
    auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i) {
      if (ctx.rank() == 0) {
        RANK_OK(k->postSend(buf.data(), bytes, &t));
      } else {
        RANK_OK(k->postRecv(buf.data(), bytes, nullptr, &t));
      }
    }
    RANK_OK(driveAll(conns, 60));
    double s = secondsSince(t0);
    if (ctx.rank() == 1 && round == 1) {
      fprintf(stderr, "tcp loopback, 64 MiB messages, one direction: %.2f GB/s\n",
              iters * static_cast<double>(bytes) / s / 1e9);
    }
  }
  return "";
}

TEST(TcpRanks, Throughput64MiB) { EXPECT_EQ(runRanks(2, throughput, 120), ""); }

// A connector with another secret is refused; the acceptor keeps waiting and
// times out instead of accepting it.
std::string wrongSecret(RankCtx& ctx) {
  ctx.timeout = 2;
  if (ctx.rank() == 1) ctx.secret_[0] ^= 1;
  std::vector<std::unique_ptr<Connection>> conns;
  Status s = ctx.connectAll(&conns);
  RANK_CHECK(conns.empty());
  if (ctx.rank() == 0) {
    RANK_CHECK(s.code() == tideTimeout);
  } else {
    RANK_CHECK(s.code() == tideRemoteError);
    RANK_CHECK(s.message().find("rank 0") != std::string::npos);
  }
  return "";
}

// Rank 1 never connects; raising the abort flag ends rank 0's wait quickly.
std::string abortWhileAccepting(RankCtx& ctx) {
  std::vector<std::unique_ptr<Connection>> conns;
  if (ctx.rank() == 1) return TcpTransport().connect(ctx, {}, &conns).ok() ? "" : "connect failed";
  std::thread raiser([&] {
    usleep(300 * 1000);
    ctx.abort_ = true;
  });
  auto t0 = Clock::now();
  Status s = ctx.connectAll(&conns);
  raiser.join();
  RANK_CHECK(s.code() == tideRemoteError && conns.empty());
  RANK_CHECK(secondsSince(t0) < 5);
  return "";
}

TEST(TcpRanks, AbortEndsSetup) { EXPECT_EQ(runRanks(2, abortWhileAccepting), ""); }

TEST(TcpRanks, WrongSecretIsRejected) { EXPECT_EQ(runRanks(2, wrongSecret), ""); }

// Before its real connections, rank 1 opens three stray ones to rank 0: a
// full-size hello with a bad proof, one that hangs up, one that stays silent.
void openStrays(const void* all, std::vector<Socket>* strays) {
  const char* addr = static_cast<const char*>(all) + 8;  // rank 0's record: after magic, flag
  SockAddr a;
  if (!parseHostPort(addr, &a).ok()) return;
  for (int i = 0; i < 3; ++i) {
    Socket s;
    if (!Socket::connect(a, Deadline::after(5), nullptr, &s).ok()) return;
    uint8_t nonce[16];
    if (!s.recvAll(nonce, 16, Deadline::after(5), nullptr).ok()) return;
    if (i == 0) {
      uint8_t junk[72];
      std::memset(junk, 0x42, sizeof(junk));
      (void)s.sendAll(junk, sizeof(junk), Deadline::after(5), nullptr);
    }
    if (i == 1) s.close();
    strays->push_back(std::move(s));
  }
}

std::string strayConnections(RankCtx& ctx) {
  std::vector<Socket> strays;
  if (ctx.rank() == 1) ctx.afterGather = [&](const void* all) { openStrays(all, &strays); };
  std::vector<std::unique_ptr<Connection>> conns;
  RANK_OK(ctx.connectAll(&conns));
  ctx.afterGather = nullptr;
  RANK_CHECK(ctx.rank() == 0 || strays.size() == 3);
  uint32_t v = 0x1234 + ctx.rank(), w = 0;
  uint64_t t;
  Connection* k = conns[ctx.slot(1 - ctx.rank(), kP2pChannel)].get();
  RANK_OK(k->postSend(&v, 4, &t));
  RANK_OK(k->postRecv(&w, 4, nullptr, &t));
  RANK_OK(driveAll(conns, 10));
  RANK_CHECK(w == 0x1234u + (1 - ctx.rank()));
  return "";
}

TEST(TcpRanks, StrayConnectionsAreIgnored) { EXPECT_EQ(runRanks(2, strayConnections), ""); }

// A peer that exits turns into tideRemoteError naming it, on receive and on
// send, well within the limit.
std::string peerDeath(RankCtx& ctx) {
  std::vector<std::unique_ptr<Connection>> conns;
  RANK_OK(ctx.connectAll(&conns));
  if (ctx.rank() == 1) _exit(0);
  std::vector<uint8_t> in(1 << 20), out(size_t{64} << 20);
  uint64_t t;
  RANK_OK(conns[0]->postRecv(in.data(), in.size(), nullptr, &t));
  RANK_OK(conns[1]->postSend(out.data(), out.size(), &t));
  auto t0 = Clock::now();
  for (int c = 0; c < 2; ++c) {
    Connection* k = conns[c].get();
    Status s = drive(
        {k}, [&] { return !k->busy(); }, 20);
    RANK_CHECK(s.code() == tideRemoteError);
    RANK_CHECK(s.message().find("rank 1") != std::string::npos);
  }
  RANK_CHECK(secondsSince(t0) < 10);
  return "";
}

TEST(TcpRanks, PeerDeathIsAnError) { EXPECT_EQ(runRanks(2, peerDeath), ""); }

}  // namespace
}  // namespace tide
