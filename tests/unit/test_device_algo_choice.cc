// The device All-Reduce's algorithm choice (src/cuda/device_algo_choice.h):
// the alpha-beta model over link classes, the topology facts it is given,
// the TIDE_DEVICE_ALGO text and the forced / one-shot-override picks. Pure
// host code; the engine calls the same functions on every rank.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "core/topology.h"
#include "cuda/device_algo_choice.h"
#include "cuda/device_coll_logic.h"

namespace tide::cuda {
namespace {

const PathType kClasses[] = {PathType::SameGpu, PathType::NVLink, PathType::PciSwitch,
                             PathType::PciHostBridge, PathType::SameNuma};

// The smallest power-of-two size (8 B .. 4 GiB) that picks the ring, or 0.
uint64_t ringFrom(int n, PathType path, int rpg) {
  for (uint64_t b = 8; b <= (uint64_t{4} << 30); b *= 2) {
    if (chooseDeviceAllReduce(b, n, path, rpg) == DeviceAlgo::kRing) return b;
  }
  return 0;
}

TEST(DeviceAlgoChoice, MonotoneInSizeAndDeterministic) {
  for (PathType path : kClasses) {
    for (int n = 1; n <= dc::kMaxRanks; ++n) {
      for (int rpg = 1; rpg <= n; ++rpg) {
        int last = 0;
        for (uint64_t b = 0; b <= (uint64_t{4} << 30); b = b < 8 ? b + 1 : b + b / 3) {
          const DeviceAlgo a = chooseDeviceAllReduce(b, n, path, rpg);
          ASSERT_EQ(a, chooseDeviceAllReduce(b, n, path, rpg));
          ASSERT_GE(static_cast<int>(a), last) << pathName(path) << " n " << n << " rpg " << rpg
                                               << " bytes " << b << " " << deviceAlgoName(a);
          last = static_cast<int>(a);
        }
        EXPECT_EQ(chooseDeviceAllReduce(8, n, path, rpg), DeviceAlgo::kOneShot);
        // Huge messages: the ring, except on one GPU, where its FIFO traffic
        // through the same memory makes one-/two-shot cheaper at every size.
        if (n > 1) {
          const DeviceAlgo big = chooseDeviceAllReduce(uint64_t{1} << 30, n, path, rpg);
          EXPECT_TRUE(path == PathType::SameGpu ? big != DeviceAlgo::kRing
                                                : big == DeviceAlgo::kRing)
              << pathName(path) << " n " << n << " " << deviceAlgoName(big);
        }
      }
    }
  }
}

TEST(DeviceAlgoChoice, PcieSwitchesToRingEarlierThanNvlink) {
  for (int n = 2; n <= dc::kMaxRanks; ++n) {
    const uint64_t nvl = ringFrom(n, PathType::NVLink, 1);
    const uint64_t sw = ringFrom(n, PathType::PciSwitch, 1);
    const uint64_t hb = ringFrom(n, PathType::PciHostBridge, 1);
    ASSERT_GT(nvl, 0u);
    EXPECT_LT(sw, nvl) << n;
    EXPECT_LE(hb, sw) << n;
  }
  // Medium sizes on NVLink with 8 ranks: two-shot.
  EXPECT_EQ(chooseDeviceAllReduce(1 << 20, 8, PathType::NVLink, 1), DeviceAlgo::kTwoShot);
}

// Ranks sharing one GPU (the lent H200's set-up): never the ring, in scratch
// and in direct mode; direct mode (no copy-in) never moves the ring closer.
TEST(DeviceAlgoChoice, OneGpuNeverRingAndDirectModeNoEarlier) {
  for (int n = 2; n <= dc::kMaxRanks; ++n) {
    for (bool copyIn : {true, false}) {
      for (uint64_t b = 1; b <= (uint64_t{4} << 30); b *= 2) {
        EXPECT_NE(chooseDeviceAllReduce(b, n, PathType::SameGpu, n, copyIn), DeviceAlgo::kRing)
            << n << " " << b;
      }
    }
    for (PathType path : {PathType::NVLink, PathType::PciSwitch, PathType::PciHostBridge}) {
      uint64_t scratchFrom = 0, directFrom = 0;
      for (uint64_t b = 8; b <= (uint64_t{4} << 30) && !(scratchFrom && directFrom); b *= 2) {
        if (!scratchFrom && chooseDeviceAllReduce(b, n, path, 1, true) == DeviceAlgo::kRing)
          scratchFrom = b;
        if (!directFrom && chooseDeviceAllReduce(b, n, path, 1, false) == DeviceAlgo::kRing)
          directFrom = b;
      }
      EXPECT_GE(directFrom, scratchFrom) << pathName(path) << " n " << n;
    }
  }
  // pickDeviceAllReduce passes the mode on.
  DeviceChoiceFacts f;
  f.slowest = PathType::PciSwitch;
  for (uint64_t b = 8; b <= (uint64_t{1} << 30); b *= 4) {
    f.direct = true;
    EXPECT_EQ(pickDeviceAllReduce(DeviceAlgo::kAuto, b, 4, f),
              chooseDeviceAllReduce(b, 4, f.slowest, 1, false));
    f.direct = false;
    EXPECT_EQ(pickDeviceAllReduce(DeviceAlgo::kAuto, b, 4, f),
              chooseDeviceAllReduce(b, 4, f.slowest, 1, true));
  }
}

TEST(DeviceAlgoChoice, TopoFacts) {
  CommTopo topo;
  topo.nranks = 4;
  // Ranks 0 and 1 share a GPU; the GPUs talk over NVLink, rank 3 over PCIe.
  topo.path.assign(16, PathType::NVLink);
  for (int r = 0; r < 4; ++r) topo.path[r * 4 + r] = PathType::Self;
  topo.path[0 * 4 + 1] = topo.path[1 * 4 + 0] = PathType::SameGpu;
  PathType slowest;
  int rpg = 0;
  deviceTopoFacts(topo, {0, 1, 2}, &slowest, &rpg);
  EXPECT_EQ(slowest, PathType::NVLink);
  EXPECT_EQ(rpg, 2);
  deviceTopoFacts(topo, {0, 1}, &slowest, &rpg);
  EXPECT_EQ(slowest, PathType::SameGpu);
  topo.path[2 * 4 + 3] = topo.path[3 * 4 + 2] = PathType::PciHostBridge;
  deviceTopoFacts(topo, {0, 1, 2, 3}, &slowest, &rpg);
  EXPECT_EQ(slowest, PathType::PciHostBridge);
  EXPECT_EQ(rpg, 2);
}

TEST(DeviceAlgoChoice, ParseKnobText) {
  DeviceAlgo a = DeviceAlgo::kRing;
  EXPECT_TRUE(parseDeviceAlgo("", &a));
  EXPECT_EQ(a, DeviceAlgo::kAuto);
  EXPECT_TRUE(parseDeviceAlgo("auto", &a));
  EXPECT_EQ(a, DeviceAlgo::kAuto);
  EXPECT_TRUE(parseDeviceAlgo("oneshot", &a));
  EXPECT_EQ(a, DeviceAlgo::kOneShot);
  EXPECT_TRUE(parseDeviceAlgo("Two-Shot", &a));
  EXPECT_EQ(a, DeviceAlgo::kTwoShot);
  EXPECT_TRUE(parseDeviceAlgo("RING", &a));
  EXPECT_EQ(a, DeviceAlgo::kRing);
  a = DeviceAlgo::kOneShot;
  EXPECT_FALSE(parseDeviceAlgo("tree", &a));
  EXPECT_FALSE(parseDeviceAlgo("rings", &a));
  EXPECT_EQ(a, DeviceAlgo::kOneShot);  // untouched on failure
  for (DeviceAlgo x :
       {DeviceAlgo::kAuto, DeviceAlgo::kOneShot, DeviceAlgo::kTwoShot, DeviceAlgo::kRing}) {
    DeviceAlgo back = DeviceAlgo::kAuto;
    ASSERT_TRUE(parseDeviceAlgo(deviceAlgoName(x), &back)) << deviceAlgoName(x);
    EXPECT_EQ(back, x);
  }
}

TEST(DeviceAlgoChoice, PickHonoursForcedAndOneShotOverride) {
  DeviceChoiceFacts f;
  f.slowest = PathType::NVLink;
  for (uint64_t b : {uint64_t{8}, uint64_t{1} << 20, uint64_t{1} << 30}) {
    // Forced: always that kernel, whatever the size.
    for (DeviceAlgo x : {DeviceAlgo::kOneShot, DeviceAlgo::kTwoShot, DeviceAlgo::kRing}) {
      EXPECT_EQ(pickDeviceAllReduce(x, b, 4, f), x);
    }
    // Auto without override: exactly the model.
    EXPECT_EQ(pickDeviceAllReduce(DeviceAlgo::kAuto, b, 4, f),
              chooseDeviceAllReduce(b, 4, f.slowest, f.ranksPerGpu));
  }
  // The override moves the one-/two-shot boundary but never replaces the ring.
  f.oneShotMax = 4096;
  EXPECT_EQ(pickDeviceAllReduce(DeviceAlgo::kAuto, 4096, 4, f), DeviceAlgo::kOneShot);
  EXPECT_EQ(pickDeviceAllReduce(DeviceAlgo::kAuto, 4097, 4, f), DeviceAlgo::kTwoShot);
  EXPECT_EQ(pickDeviceAllReduce(DeviceAlgo::kAuto, uint64_t{1} << 30, 4, f), DeviceAlgo::kRing);
  // Never kAuto, for every class and size.
  f.oneShotMax = ~uint64_t{0};
  for (PathType path : kClasses) {
    f.slowest = path;
    for (uint64_t b = 1; b <= (uint64_t{1} << 32); b *= 4) {
      EXPECT_NE(pickDeviceAllReduce(DeviceAlgo::kAuto, b, 8, f), DeviceAlgo::kAuto);
    }
  }
}

}  // namespace
}  // namespace tide::cuda
