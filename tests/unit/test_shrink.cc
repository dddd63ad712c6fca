// Shrink helpers: the exclusion-list validation, and the bootstrap listener
// that a shrink turns into the survivors' root (reachable from the old table).
#include <gtest/gtest.h>

#include <memory>
#include <thread>
#include <vector>

#include "core/boot/bootstrap.h"
#include "core/comm/shrink.h"
#include "core/unique_id.h"

namespace tide {
namespace {

TEST(Shrink, ExcludeList) {
  int dup[2] = {1, 1};
  int range[1] = {4};
  int neg[1] = {-1};
  int all[4] = {0, 1, 2, 3};
  int ok[2] = {3, 0};
  EXPECT_TRUE(validateExcludeList(nullptr, 0, 4).ok());
  EXPECT_TRUE(validateExcludeList(ok, 2, 4).ok());
  EXPECT_EQ(validateExcludeList(dup, 2, 4).code(), tideInvalidArgument);
  EXPECT_EQ(validateExcludeList(range, 1, 4).code(), tideInvalidArgument);
  EXPECT_EQ(validateExcludeList(neg, 1, 4).code(), tideInvalidArgument);
  EXPECT_EQ(validateExcludeList(all, 4, 4).code(), tideInvalidArgument);
  EXPECT_EQ(validateExcludeList(nullptr, 1, 4).code(), tideInvalidArgument);
  EXPECT_EQ(validateExcludeList(ok, -1, 4).code(), tideInvalidArgument);
}

// Three bootstraps; rank 1's listener becomes the root of a 2-rank job of
// ranks 1 and 2, found through rankAddress(1) of the old table.
TEST(Shrink, ListenerBecomesRoot) {
  UniqueIdData id;
  ASSERT_TRUE(resolveAddress("127.0.0.1", 0, &id.root).ok());
  ASSERT_TRUE(randomBytes(id.secret, kSecretBytes).ok());
  id.authenticated = true;
  ASSERT_TRUE(startBootstrapRoot(&id).ok());
  std::atomic<bool> abort{false};
  std::unique_ptr<Bootstrap> b[3];
  Status st[3];
  std::vector<std::thread> ts;
  for (int r = 0; r < 3; ++r)
    ts.emplace_back([&, r] { st[r] = Bootstrap::create(id, r, 3, 10, &abort, &b[r]); });
  for (auto& t : ts) t.join();
  for (int r = 0; r < 3; ++r) ASSERT_TRUE(st[r].ok()) << st[r].message();
  EXPECT_FALSE(b[0]->rankAddress(3).valid());
  UniqueIdData nid = id;
  nid.root = b[2]->rankAddress(1);  // what rank 2 knows about rank 1
  ASSERT_TRUE(nid.root.valid());
  // The follower may connect before the leader starts the root.
  std::unique_ptr<Bootstrap> n[2];
  std::thread follower([&] { st[1] = Bootstrap::create(nid, 1, 2, 10, &abort, &n[1]); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_TRUE(b[1]->startRootOnListener(nid).ok());
  EXPECT_EQ(b[1]->startRootOnListener(nid).code(), tideInvalidUsage);
  st[0] = Bootstrap::create(nid, 0, 2, 10, &abort, &n[0]);
  follower.join();
  ASSERT_TRUE(st[0].ok()) << st[0].message();
  ASSERT_TRUE(st[1].ok()) << st[1].message();
  int v[2] = {11, 0};
  int w[2] = {0, 22};
  std::thread t1([&] { st[1] = n[1]->allGather(w, sizeof(int)); });
  st[0] = n[0]->allGather(v, sizeof(int));
  t1.join();
  EXPECT_TRUE(st[0].ok() && st[1].ok());
  EXPECT_EQ(v[1], 22);
  EXPECT_EQ(w[0], 11);
}

}  // namespace
}  // namespace tide
