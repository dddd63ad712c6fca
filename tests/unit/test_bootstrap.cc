// Bootstrap, unique ids and config parsing, with ranks as threads.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap_util.h"
#include "core/boot/bootstrap.h"
#include "core/config.h"
#include "core/status.h"
#include "core/unique_id.h"

namespace tide {
namespace {

TEST(UniqueId, RoundTrip) {
  UniqueIdData a;
  ASSERT_TRUE(resolveAddress("127.0.0.1", 1234, &a.root).ok());
  a.authenticated = true;
  a.secret[3] = 7;
  tideUniqueId raw;
  encodeUniqueId(a, &raw);
  UniqueIdData b;
  ASSERT_TRUE(decodeUniqueId(raw, &b).ok());
  EXPECT_EQ(b.root.str(), "127.0.0.1:1234");
  EXPECT_TRUE(b.authenticated);
  EXPECT_EQ(b.secret[3], 7);
  raw.internal[0] ^= 1;
  EXPECT_EQ(decodeUniqueId(raw, &b).code(), tideInvalidArgument);
}

TEST(Bootstrap, AllGatherAndBarrierAcrossThreads) {
  for (int n : {1, 2, 3, 5}) {
    UniqueIdData id = startRoot(true);
    std::vector<std::thread> ts;
    std::vector<int> ok(n, 0);
    for (int r = 0; r < n; ++r) {
      ts.emplace_back([&, r] {
        std::unique_ptr<Bootstrap> b;
        std::atomic<bool> abortFlag{false};
        if (!Bootstrap::create(id, r, n, 20, &abortFlag, &b).ok()) return;
        // Blocks larger than a socket buffer exercise the non-blocking ring.
        const size_t bytes = 1 << 20;
        std::vector<char> all(bytes * n);
        memset(all.data() + r * bytes, 'a' + r, bytes);
        if (!b->allGather(all.data(), bytes).ok()) return;
        for (int q = 0; q < n; ++q) {
          if (all[q * bytes] != 'a' + q || all[q * bytes + bytes - 1] != 'a' + q) return;
        }
        if (!b->barrier().ok()) return;
        ok[r] = 1;
      });
    }
    for (auto& t : ts) t.join();
    for (int r = 0; r < n; ++r) EXPECT_EQ(ok[r], 1) << "n=" << n << " rank " << r;
  }
}

// Ranks that disagree on the block size, or on allGather versus barrier,
// get an error naming the field on both sides at once: no hang, and no
// payload byte is read into a block of the wrong size.
TEST(Bootstrap, MismatchedExchangesFailOnBothRanks) {
  for (int variant = 0; variant < 2; ++variant) {
    UniqueIdData id = startRoot(true);
    Status st[2];
    std::vector<std::thread> ts;
    for (int r = 0; r < 2; ++r) {
      ts.emplace_back([&, r] {
        std::unique_ptr<Bootstrap> b;
        std::atomic<bool> abortFlag{false};
        st[r] = Bootstrap::create(id, r, 2, 10, &abortFlag, &b);
        if (!st[r].ok()) return;
        std::vector<char> all(2 * 8, 0);
        if (variant == 0) {
          st[r] = b->allGather(all.data(), r == 0 ? 4 : 8);
        } else {
          st[r] = r == 0 ? b->barrier() : b->allGather(all.data(), 1);
        }
      });
    }
    for (auto& t : ts) t.join();
    for (int r = 0; r < 2; ++r) {
      SCOPED_TRACE("variant " + std::to_string(variant) + " rank " + std::to_string(r));
      EXPECT_EQ(st[r].code(), tideRemoteError) << st[r].message();
      EXPECT_NE(st[r].message().find(variant == 0 ? "length" : "frame type"), std::string::npos)
          << st[r].message();
      EXPECT_NE(st[r].message().find("from rank " + std::to_string(1 - r)), std::string::npos)
          << st[r].message();
    }
  }
}

// TIDE_SOCKET_IFNAME picks the interface a rank's bootstrap listener binds
// to (the address the root's table carries); no matching interface is an
// error naming the knob.
TEST(Bootstrap, ListenerBindsToTheSocketIfnameInterface) {
  struct Env {
    explicit Env(const char* v) { setenv("TIDE_SOCKET_IFNAME", v, 1); }
    ~Env() { unsetenv("TIDE_SOCKET_IFNAME"); }
  };
  std::atomic<bool> abortFlag{false};
  std::unique_ptr<Bootstrap> b;
  {
    Env e("=no-such-if0");
    UniqueIdData id = startRoot(true);
    Status s = Bootstrap::create(id, 0, 1, 5, &abortFlag, &b);
    EXPECT_EQ(s.code(), tideInvalidArgument);
    EXPECT_NE(s.message().find("TIDE_SOCKET_IFNAME"), std::string::npos) << s.message();
  }
  {
    Env e("=lo");
    UniqueIdData id = startRoot(true);
    ASSERT_TRUE(Bootstrap::create(id, 0, 1, 5, &abortFlag, &b).ok());
    EXPECT_EQ(b->localAddress(), "127.0.0.1");
    EXPECT_EQ(b->rankAddress(0).hostStr(), "127.0.0.1");
  }
  // Another up IPv4 interface, if this host has one: the listener moves there
  // although the root is reached over loopback.
  SockAddr other;
  {
    Env e("^lo");
    if (!interfaceAddress(AF_INET, &other).ok() || other.family() != AF_INET)
      GTEST_SKIP() << "no up IPv4 interface besides lo";
    UniqueIdData id = startRoot(true);
    ASSERT_TRUE(Bootstrap::create(id, 0, 1, 5, &abortFlag, &b).ok());
    EXPECT_EQ(b->localAddress(), other.hostStr());
    EXPECT_EQ(b->rankAddress(0).hostStr(), other.hostStr());
  }
}

TEST(Bootstrap, WrongSecretIsRefused) {
  UniqueIdData id = startRoot(true);
  UniqueIdData wrong = id;
  wrong.secret[0] ^= 0xff;
  std::unique_ptr<Bootstrap> b;
  std::atomic<bool> abortFlag{false};
  // The root drops the impostor; with a short timeout it sees no table.
  Status s = Bootstrap::create(wrong, 0, 1, 2, &abortFlag, &b);
  EXPECT_FALSE(s.ok());
  // The real rank still gets in afterwards.
  EXPECT_TRUE(Bootstrap::create(id, 0, 1, 10, &abortFlag, &b).ok());
}

TEST(Config, ParseSize) {
  uint64_t v = 0;
  EXPECT_TRUE(parseSize("64K", &v));
  EXPECT_EQ(v, 64u << 10);
  EXPECT_TRUE(parseSize("2M", &v));
  EXPECT_EQ(v, 2u << 20);
  EXPECT_TRUE(parseSize("123", &v));
  EXPECT_EQ(v, 123u);
  EXPECT_FALSE(parseSize("12Q", &v));
  EXPECT_FALSE(parseSize("", &v));
}

TEST(Status, FramesAreAppended) {
  auto f = []() -> Status {
    TIDE_TRY(invalidArgument("bad %d", 3));
    return Status::Ok();
  };
  Status s = f();
  EXPECT_EQ(s.code(), tideInvalidArgument);
  EXPECT_NE(s.message().find("bad 3"), std::string::npos);
  EXPECT_NE(s.message().find("test_bootstrap.cc"), std::string::npos);
}

}  // namespace
}  // namespace tide
