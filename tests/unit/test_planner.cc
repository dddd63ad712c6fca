// The planner's algorithm table (core/issue/planner.h): host and device rows
// in one table, the cost model choosing among the rows of the operation's
// memory kind, TIDE_ALGO forcing either kind, TIDE_DEVICE_ALGO as an alias,
// and the routes of host operations (lane, host row, p2p).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/comm.h"
#include "core/issue/planner.h"
#include "core/registry.h"
#include "cuda/device_algo_choice.h"

namespace tide {
namespace {

// A one-node communicator of n ranks with the default topology.
struct FakeComm {
  explicit FakeComm(int n) {
    c.nranks = n;
    c.rank = 0;
    std::vector<PeerInfo> peers(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) peers[r].rank = r;
    defaultCommTopo(peers, 0, &c.topo);
    c.chunkBytes = 1 << 20;
  }
  tideComm c;
};

CollArgs AllReduce(size_t count, MemType mem) {
  CollArgs a;
  a.type = CollType::AllReduce;
  a.count = count;
  a.dtype = tideFloat32;
  a.elemSize = 4;
  a.mem = mem;
  return a;
}

TEST(Planner, HostAndDeviceRowsInOneTable) {
  int host = 0, device = 0;
  for (const AlgorithmInfo* a : registeredAlgorithms()) {
    (a->mem == MemType::Device ? device : host) += 1;
    if (a->mem == MemType::Device) {
      EXPECT_EQ(strncmp(a->name, "dev_", 4), 0) << a->name;
      EXPECT_NE(a->predictUs, nullptr) << a->name;
      EXPECT_EQ(a->run, nullptr) << a->name;
    } else {
      EXPECT_NE(a->run, nullptr) << a->name;
    }
  }
  EXPECT_GE(host, 6);
  EXPECT_EQ(device, 4);  // dev_oneshot, dev_twoshot, dev_ring, dev_direct
}

TEST(Planner, ChoosesAmongRowsOfTheMemoryKind) {
  unsetenv("TIDE_ALGO");
  unsetenv("TIDE_DEVICE_ALGO");
  FakeComm f(4);
  parseAlgoChoice(&f.c);
  for (size_t count : {size_t{2}, size_t{1} << 10, size_t{1} << 22}) {
    bool forced = true;
    const AlgorithmInfo* h = chooseAlgorithm(AllReduce(count, MemType::Host), &f.c, &forced);
    ASSERT_NE(h, nullptr);
    EXPECT_EQ(h->mem, MemType::Host) << h->name;
    EXPECT_FALSE(forced);
    const AlgorithmInfo* d = chooseAlgorithm(AllReduce(count, MemType::Device), &f.c, &forced);
    ASSERT_NE(d, nullptr);
    EXPECT_EQ(d->mem, MemType::Device) << d->name;
    EXPECT_FALSE(forced);
  }
  // Small device All-Reduce: one-shot (one latency); the model's order holds.
  EXPECT_STREQ(chooseAlgorithm(AllReduce(2, MemType::Device), &f.c)->name, "dev_oneshot");
}

TEST(Planner, TideAlgoForcesEitherKind) {
  setenv("TIDE_ALGO", "allreduce:ring;allreduce:dev_twoshot", 1);
  FakeComm f(3);
  parseAlgoChoice(&f.c);
  bool forced = false;
  EXPECT_STREQ(chooseAlgorithm(AllReduce(2, MemType::Host), &f.c, &forced)->name, "ring");
  EXPECT_TRUE(forced);
  EXPECT_STREQ(chooseAlgorithm(AllReduce(2, MemType::Device), &f.c, &forced)->name, "dev_twoshot");
  EXPECT_TRUE(forced);
  unsetenv("TIDE_ALGO");
  setenv("TIDE_DEVICE_ALGO", "ring", 1);  // the documented alias
  parseAlgoChoice(&f.c);
  EXPECT_STREQ(chooseAlgorithm(AllReduce(2, MemType::Device), &f.c, &forced)->name, "dev_ring");
  EXPECT_TRUE(forced);
  EXPECT_EQ(chooseAlgorithm(AllReduce(2, MemType::Host), &f.c, &forced)->mem, MemType::Host);
  EXPECT_FALSE(forced);
  unsetenv("TIDE_DEVICE_ALGO");
}

TEST(Planner, HostRoutes) {
  unsetenv("TIDE_ALGO");
  FakeComm f(2);
  parseAlgoChoice(&f.c);
  OpDesc d;
  d.comm = &f.c;
  d.args = AllReduce(16, MemType::Host);
  ASSERT_TRUE(planRoute(&d, true).ok());
  EXPECT_EQ(d.route, Route::kHost);  // no lane on this communicator
  EXPECT_NE(d.algo, nullptr);
  EXPECT_TRUE(d.chained());
  d.args.type = CollType::Send;
  ASSERT_TRUE(planRoute(&d, false).ok());
  EXPECT_EQ(d.route, Route::kP2p);
  EXPECT_EQ(d.algo, nullptr);
  EXPECT_FALSE(d.chained());
  EXPECT_STREQ(routeName(Route::kLane), "lane");
}

// The planner's device rows pick the kernel the engine's model would, from
// the facts every rank shares (CommTopo::sameProcess: direct mode, no
// copy-in; CommTopo::deviceOneShotMax: TIDE_P2P_ONESHOT_MAX), so the engine
// runs the planner's row as it is.
TEST(Planner, DeviceRowsFollowTheSharedFacts) {
  unsetenv("TIDE_ALGO");
  unsetenv("TIDE_DEVICE_ALGO");
  uint64_t hash = 0x5eed0000;
  for (int n : {1, 2, 4, 8}) {
    for (bool sameProcess : {false, true}) {
      FakeComm f(n);
      f.c.commHash = ++hash;  // a fresh entry in the planner's choice cache
      f.c.topo.sameProcess = sameProcess;
      parseAlgoChoice(&f.c);
      PathType slowest;
      int perGpu;
      std::vector<int> ranks(static_cast<size_t>(n));
      for (int r = 0; r < n; ++r) ranks[r] = r;
      cuda::deviceTopoFacts(f.c.topo, ranks, &slowest, &perGpu);
      for (size_t count = 1; count <= (size_t{1} << 26); count *= 4) {
        const AlgorithmInfo* d = chooseAlgorithm(AllReduce(count, MemType::Device), &f.c);
        ASSERT_NE(d, nullptr);
        const cuda::DeviceAlgo want =
            cuda::chooseDeviceAllReduce(count * 4, n, slowest, perGpu, /*copyIn=*/!sameProcess);
        EXPECT_EQ(d->deviceKernel, static_cast<int>(want))
            << d->name << " n=" << n << " count=" << count << " sameProcess=" << sameProcess;
      }
    }
  }
  // TIDE_P2P_ONESHOT_MAX (the smallest of the ranks'): one-shot up to it,
  // two-shot above, unless the ring is cheaper.
  FakeComm f(4);
  f.c.commHash = ++hash;
  f.c.topo.deviceOneShotMax = 4096;
  parseAlgoChoice(&f.c);
  EXPECT_STREQ(chooseAlgorithm(AllReduce(1024, MemType::Device), &f.c)->name, "dev_oneshot");
  const char* above = chooseAlgorithm(AllReduce(1025, MemType::Device), &f.c)->name;
  EXPECT_TRUE(strcmp(above, "dev_twoshot") == 0 || strcmp(above, "dev_ring") == 0) << above;
}

// The codec seam: a call carries its codec in CollArgs, its wire bytes come
// from it, and only rows that declare the codec are offered the call.
TEST(Planner, RowsServeOnlyTheirCodecs) {
  unsetenv("TIDE_ALGO");
  FakeComm f(4);
  f.c.commHash = 0xc0dec;
  parseAlgoChoice(&f.c);
  CollArgs a = AllReduce(1000, MemType::Host);
  EXPECT_EQ(a.wireBytes(a.count), 4000u);
  ASSERT_NE(chooseAlgorithm(a, &f.c), nullptr);
  Codec unknown;
  unknown.id = 30;  // no row declares it
  a.codec = unknown;
  EXPECT_EQ(chooseAlgorithm(a, &f.c), nullptr);
  for (const AlgorithmInfo* row : registeredAlgorithms()) {
    // Plain rows serve uncompressed calls only; the compressed rows
    // (algorithms/compression/, "cmp_*") only compressed ones.
    const bool compressed = strncmp(row->name, "cmp_", 4) == 0;
    EXPECT_EQ(row->servesCodec(Codec{}), !compressed) << row->name;
    EXPECT_FALSE(row->servesCodec(unknown)) << row->name;
  }
}

}  // namespace
}  // namespace tide
