// Bootstrap, unique ids and config parsing, with ranks as threads.
#include <gtest/gtest.h>

#include "bootstrap_util.h"

#include <cstring>
#include <thread>
#include <vector>

#include "core/bootstrap.h"
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
