// The net transport's pieces: net selection (TIDE_NET, TIDE_NET_PLUGIN) and
// NetConnection (chunking, in-flight window, reducing receives, framing
// errors) over the real socket net on loopback.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "transports/net/net_connection.h"
#include "transports/net/net_registry.h"

namespace tide {
namespace {

class EnvGuard {
 public:
  EnvGuard(const char* k, const char* v) : k_(k) {
    const char* old = getenv(k);
    had_ = old != nullptr;
    if (had_) old_ = old;
    if (v)
      setenv(k, v, 1);
    else
      unsetenv(k);
  }
  ~EnvGuard() {
    if (had_)
      setenv(k_, old_.c_str(), 1);
    else
      unsetenv(k_);
  }

 private:
  const char* k_;
  bool had_;
  std::string old_;
};

TEST(NetSelect, DefaultIsSocketWithoutRdma) {
  if (access("/sys/class/infiniband", F_OK) == 0) GTEST_SKIP() << "RDMA device present";
  EnvGuard a("TIDE_NET", nullptr), b("TIDE_NET_PLUGIN", nullptr);
  const tideNet_v1_t* net = nullptr;
  ASSERT_TRUE(selectNet("", &net).ok());
  EXPECT_STREQ(net->name, "socket");
  auto names = registeredNetNames();
  EXPECT_NE(std::find(names.begin(), names.end(), "socket"), names.end());
}

TEST(NetSelect, UnknownNameAndBadPluginFailClearly) {
  const tideNet_v1_t* net = nullptr;
  {
    EnvGuard a("TIDE_NET", "bogus"), b("TIDE_NET_PLUGIN", nullptr);
    Status s = selectNet("", &net);
    EXPECT_EQ(s.code(), tideInvalidArgument);
    EXPECT_NE(s.message().find("socket"), std::string::npos) << s.message();
  }
  {
    EnvGuard a("TIDE_NET", nullptr), b("TIDE_NET_PLUGIN", "/nonexistent/libtide-net-x.so");
    Status s = selectNet("", &net);
    EXPECT_EQ(s.code(), tideSystemError);
    EXPECT_NE(s.message().find("cannot load"), std::string::npos) << s.message();
  }
  {
    EnvGuard a("TIDE_NET", nullptr), b("TIDE_NET_PLUGIN", "nosuchplugin");
    Status s = selectNet("", &net);
    EXPECT_NE(s.message().find("libtide-net-nosuchplugin.so"), std::string::npos) << s.message();
  }
}

// Two NetConnections joined back to back over the socket net.
struct Pipe {
  std::unique_ptr<NetConnection> a, b;
};

Pipe makePipe(size_t chunk, int inflight) {
  const tideNet_v1_t* net = nullptr;
  EnvGuard e("TIDE_NET", "socket");
  Status s = selectNet("", &net);
  EXPECT_TRUE(s.ok()) << s.message();
  uint8_t ha[TIDE_NET_HANDLE_MAXSIZE], hb[TIDE_NET_HANDLE_MAXSIZE];
  void *la, *lb, *sa = nullptr, *sb = nullptr, *ra = nullptr, *rb = nullptr;
  EXPECT_EQ(net->listen(0, ha, &la), tideSuccess);
  EXPECT_EQ(net->listen(0, hb, &lb), tideSuccess);
  for (int i = 0; i < 100000 && !(sa && sb && ra && rb); ++i) {
    if (!sa) {
      EXPECT_EQ(net->connect(0, hb, &sa), tideSuccess);
    }  // a -> b
    if (!sb) {
      EXPECT_EQ(net->connect(0, ha, &sb), tideSuccess);
    }  // b -> a
    if (!ra) {
      EXPECT_EQ(net->accept(la, &ra), tideSuccess);
    }
    if (!rb) {
      EXPECT_EQ(net->accept(lb, &rb), tideSuccess);
    }
    usleep(10);
  }
  net->closeListen(la);
  net->closeListen(lb);
  Pipe p;
  p.a = std::make_unique<NetConnection>(net, sa, ra, 1, 0, chunk, inflight);
  p.b = std::make_unique<NetConnection>(net, sb, rb, 0, 0, chunk, inflight);
  return p;
}

// Progresses both ends until the tickets are done or an error.
Status drive(Pipe& p, uint64_t sendA, uint64_t recvB) {
  for (int i = 0; i < 20000000; ++i) {
    bool moved = false;
    TIDE_TRY(p.a->progress(&moved));
    TIDE_TRY(p.b->progress(&moved));
    if (p.a->sendsDone() >= sendA && p.b->recvsDone() >= recvB) return Status::Ok();
  }
  return timeoutError("drive");
}

void addFloats(void* dst, const void* a, const void* b, size_t n) {
  for (size_t i = 0; i < n; ++i)
    static_cast<float*>(dst)[i] = static_cast<const float*>(a)[i] + static_cast<const float*>(b)[i];
}

TEST(NetConnection, ChunkedStreamsZeroBytesAndReduce) {
  Pipe p = makePipe(4096, 3);
  const size_t n = 100000;  // 400 KB: ~98 chunks through a window of 3
  std::vector<float> src(n), acc(n), out(n, 0), base(n);
  for (size_t i = 0; i < n; ++i) src[i] = static_cast<float>(i % 1000), base[i] = 1.0f;
  uint64_t t1, t2, t3, r1, r2, r3;
  ASSERT_TRUE(p.a->postSend(src.data(), n * 4, &t1).ok());
  ASSERT_TRUE(p.a->postSend(nullptr, 0, &t2).ok());
  ASSERT_TRUE(p.a->postSend(src.data(), n * 4, &t3).ok());
  RecvReduce rr{addFloats, base.data(), sizeof(float)};
  ASSERT_TRUE(p.b->postRecv(out.data(), n * 4, nullptr, &r1).ok());
  ASSERT_TRUE(p.b->postRecv(nullptr, 0, nullptr, &r2).ok());
  ASSERT_TRUE(p.b->postRecv(acc.data(), n * 4, &rr, &r3).ok());
  Status s = drive(p, t3, r3);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(p.b->recvsDone(), 3u);
  EXPECT_EQ(out, src);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(acc[i], src[i] + 1.0f) << i;
  EXPECT_FALSE(p.a->busy());
  EXPECT_FALSE(p.b->busy());
}

TEST(NetConnection, MismatchedSizesAreAnError) {
  Pipe p = makePipe(1 << 20, 4);
  std::vector<uint8_t> buf(10000);
  uint64_t t, r;
  ASSERT_TRUE(p.a->postSend(buf.data(), 6000, &t).ok());
  ASSERT_TRUE(p.b->postRecv(buf.data(), 5000, nullptr, &r).ok());
  Status s = drive(p, t, r);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), tideInvalidUsage) << s.message();
  // Sticky.
  bool moved = false;
  EXPECT_FALSE(p.b->progress(&moved).ok());
}

// Both ends derive the same chunk from the two ends' knob and net maxSize;
// it never exceeds either maxSize (0: no limit) and stays a 4 KiB multiple.
TEST(NetConnection, AgreedChunkFitsBothNets) {
  constexpr size_t M = 1 << 20;
  EXPECT_EQ(NetConnection::agreedChunk(M, 0, M, 0), M);
  EXPECT_EQ(NetConnection::agreedChunk(4 * M, M, 4 * M, 2 * M), M);
  EXPECT_EQ(NetConnection::agreedChunk(4 * M, 2 * M, 4 * M, M), M);
  EXPECT_EQ(NetConnection::agreedChunk(4 * M, 0, 2 * M, 0), 2 * M);  // knobs differ
  EXPECT_EQ(NetConnection::agreedChunk(M, 3 * M, M, 1 << 30), M);
  EXPECT_EQ(NetConnection::agreedChunk(M, 10000, M, 0), 8192u);  // rounded down
  EXPECT_EQ(NetConnection::agreedChunk(100, 0, M, 0), NetConnection::kMinChunk);
  for (size_t a : {size_t{0}, size_t{4096}, size_t{5000}, M, size_t{3} * M}) {
    for (size_t b : {size_t{0}, size_t{8192}, M + 1, size_t{64} * M}) {
      size_t c = NetConnection::agreedChunk(2 * M, a, M / 2, b);
      EXPECT_EQ(c, NetConnection::agreedChunk(M / 2, b, 2 * M, a));
      EXPECT_EQ(c % NetConnection::kMinChunk, 0u);
      EXPECT_TRUE(a == 0 || c <= a) << a;
      EXPECT_TRUE(b == 0 || c <= b) << b;
    }
  }
}

TEST(NetConnection, ChunkTagsDiffer) {
  EXPECT_NE(NetConnection::chunkTag(0, 1), NetConnection::chunkTag(1, 0));
  EXPECT_GE(NetConnection::chunkTag(0x7fff, 0xffff), 0);
}

}  // namespace
}  // namespace tide
