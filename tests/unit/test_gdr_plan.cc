// GPUDirect RDMA planning (core/device/device_stream_gdr.h): which Send / Recv ops
// on a CUDA stream post their device buffer directly, per op and per batch.
#include <gtest/gtest.h>

#include <vector>

#include "core/device/device_stream_gdr.h"
#include "cuda/cuda_loader.h"

namespace tide::gdr {
namespace {

constexpr int kDev = TIDE_NET_PTR_HOST | TIDE_NET_PTR_DEVICE;
constexpr int kDmaBuf = TIDE_NET_PTR_HOST | TIDE_NET_PTR_DMABUF;
constexpr int kBoth = kDev | kDmaBuf;

TEST(GdrPlan, DirectForDevicePointToPointToANetPeer) {
  for (CollType t : {CollType::Send, CollType::Recv}) {
    for (int knob : {kKnobAuto, kKnobRequire, 7}) {
      Choice c = chooseOp(t, true, 1, 0, 2, kDev, knob);
      EXPECT_TRUE(c.direct);
      EXPECT_FALSE(c.dmaBuf);
      EXPECT_EQ(c.reason, Reason::kDirect);
    }
  }
  Choice c = chooseOp(CollType::Send, true, 3, 0, 4, kDmaBuf, kKnobAuto);
  EXPECT_TRUE(c.direct);
  EXPECT_TRUE(c.dmaBuf);
  c = chooseOp(CollType::Recv, true, 0, 3, 4, kBoth, kKnobAuto);
  EXPECT_TRUE(c.direct);
  EXPECT_TRUE(c.dmaBuf);  // dma-buf preferred over peer memory
}

TEST(GdrPlan, StagedOtherwise) {
  EXPECT_EQ(chooseOp(CollType::Send, true, 1, 0, 2, kBoth, kKnobOff).reason, Reason::kOff);
  EXPECT_EQ(chooseOp(CollType::AllReduce, true, 1, 0, 2, kBoth, kKnobAuto).reason, Reason::kNotP2p);
  EXPECT_EQ(chooseOp(CollType::Broadcast, true, 1, 0, 2, kBoth, kKnobRequire).reason,
            Reason::kNotP2p);
  EXPECT_EQ(chooseOp(CollType::Recv, false, 1, 0, 2, kBoth, kKnobAuto).reason, Reason::kHostBuffer);
  EXPECT_EQ(chooseOp(CollType::Send, true, 0, 0, 2, kBoth, kKnobAuto).reason, Reason::kSelf);
  EXPECT_EQ(chooseOp(CollType::Send, true, 2, 0, 2, kBoth, kKnobAuto).reason, Reason::kSelf);
  EXPECT_EQ(chooseOp(CollType::Send, true, -1, 0, 2, kBoth, kKnobAuto).reason, Reason::kSelf);
  EXPECT_EQ(chooseOp(CollType::Recv, true, 1, 0, 2, TIDE_NET_PTR_HOST, kKnobAuto).reason,
            Reason::kNoSupport);
  EXPECT_EQ(chooseOp(CollType::Recv, true, 1, 0, 2, 0, kKnobAuto).reason, Reason::kNoSupport);
  EXPECT_FALSE(chooseOp(CollType::Recv, true, 1, 0, 2, 0, kKnobAuto).direct);
  EXPECT_FALSE(chooseOp(CollType::Send, true, 1, 0, 2, kBoth, kKnobOff).direct);
  // Without a driver flush of the NIC's writes, receives stage; sends need none.
  EXPECT_EQ(chooseOp(CollType::Recv, true, 1, 0, 2, kBoth, kKnobAuto, false).reason,
            Reason::kNoFlush);
  EXPECT_FALSE(chooseOp(CollType::Recv, true, 1, 0, 2, kBoth, kKnobAuto, false).direct);
  EXPECT_TRUE(chooseOp(CollType::Send, true, 1, 0, 2, kBoth, kKnobAuto, false).direct);
}

TEST(GdrPlan, WarnOnlyWhenRequiredAndADeviceOpMissesIt) {
  EXPECT_TRUE(worthWarning(Reason::kNoSupport, kKnobRequire));
  EXPECT_TRUE(worthWarning(Reason::kGroup, kKnobRequire));
  EXPECT_TRUE(worthWarning(Reason::kNoFlush, kKnobRequire));
  EXPECT_FALSE(worthWarning(Reason::kNoFlush, kKnobAuto));
  EXPECT_FALSE(worthWarning(Reason::kNoSupport, kKnobAuto));
  EXPECT_FALSE(worthWarning(Reason::kHostBuffer, kKnobRequire));
  EXPECT_FALSE(worthWarning(Reason::kSelf, kKnobRequire));
  EXPECT_FALSE(worthWarning(Reason::kNotP2p, kKnobRequire));
  EXPECT_FALSE(worthWarning(Reason::kDirect, kKnobRequire));
}

P2pOp op(bool isSend, uintptr_t buf, size_t bytes, bool direct) {
  P2pOp o;
  o.isSend = isSend;
  o.buf = buf;
  o.bytes = bytes;
  o.choice = direct ? Choice{true, true, Reason::kDirect} : Choice{false, false, Reason::kSelf};
  return o;
}

TEST(GdrPlan, BatchIsDirectOnlyWhenEveryOpIs) {
  std::vector<P2pOp> all{op(true, 0x1000, 256, true), op(false, 0x9000, 256, true)};
  EXPECT_TRUE(settleBatch(all));
  EXPECT_TRUE(all[0].choice.direct && all[1].choice.direct);

  std::vector<P2pOp> mixed{op(true, 0x1000, 256, true), op(false, 0x9000, 256, false)};
  EXPECT_FALSE(settleBatch(mixed));
  EXPECT_FALSE(mixed[0].choice.direct);
  EXPECT_EQ(mixed[0].choice.reason, Reason::kGroup);
  EXPECT_EQ(mixed[1].choice.reason, Reason::kSelf);  // keeps its own reason

  std::vector<P2pOp> none;
  EXPECT_FALSE(settleBatch(none));
}

TEST(GdrPlan, OverlappingReceiveAndSendStage) {
  // The executor stages a receive that overlaps a send of its batch through
  // host scratch; that cannot be device memory.
  std::vector<P2pOp> overlap{op(true, 0x1000, 256, true), op(false, 0x10ff, 16, true)};
  EXPECT_FALSE(settleBatch(overlap));
  EXPECT_EQ(overlap[1].choice.reason, Reason::kGroup);
  std::vector<P2pOp> touching{op(true, 0x1000, 256, true), op(false, 0x1100, 16, true)};
  EXPECT_TRUE(settleBatch(touching));
  // Two receives or two sends may overlap each other (no staging).
  std::vector<P2pOp> sends{op(true, 0x1000, 256, true), op(true, 0x1000, 256, true)};
  EXPECT_TRUE(settleBatch(sends));
  // Empty transfers never overlap.
  std::vector<P2pOp> empty{op(true, 0x1000, 256, true), op(false, 0x1000, 0, true)};
  EXPECT_TRUE(settleBatch(empty));
}

TEST(GdrDmaBuf, PageAlignedRangeWithinTheAllocation) {
  uint64_t start = 0, len = 0;
  ASSERT_TRUE(cuda::dmaBufRange(0x10010, 100, 0, 0, 4096, &start, &len));
  EXPECT_EQ(start, 0x10000u);
  EXPECT_EQ(len, 4096u);
  ASSERT_TRUE(cuda::dmaBufRange(0x10ff0, 0x20, 0x10000, 0x200000, 4096, &start, &len));
  EXPECT_EQ(start, 0x10000u);
  EXPECT_EQ(len, 0x2000u);  // crosses a page boundary
  ASSERT_TRUE(cuda::dmaBufRange(0x20000, 0x1000, 0x20000, 0x1000, 4096, &start, &len));
  EXPECT_EQ(start, 0x20000u);
  EXPECT_EQ(len, 0x1000u);
  EXPECT_FALSE(cuda::dmaBufRange(0x20000, 0x1001, 0x20000, 0x1000, 4096, &start, &len));
  EXPECT_FALSE(cuda::dmaBufRange(0x1f000, 0x10, 0x20000, 0x1000, 4096, &start, &len));
  EXPECT_FALSE(cuda::dmaBufRange(0x10000, 0, 0, 0, 4096, &start, &len));
  EXPECT_FALSE(cuda::dmaBufRange(~uint64_t{0} - 10, 100, 0, 0, 4096, &start, &len));
  EXPECT_FALSE(cuda::dmaBufRange(0x10000, 10, 0, 0, 3000, &start, &len));  // not a power of 2
}

TEST(GdrDmaBuf, ExportRefusesWithoutAGpuOrForHostMemory) {
  int fd = -1;
  uint64_t off = 0;
  std::vector<char> host(8192);
  EXPECT_EQ(tideNetDmaBufFd(nullptr, 16, &fd, &off), tideInvalidArgument);
  EXPECT_EQ(tideNetDmaBufFd(host.data(), 0, &fd, &off), tideInvalidArgument);
  EXPECT_EQ(tideNetDmaBufFd(host.data(), 16, nullptr, &off), tideInvalidArgument);
  const tideResult_t r = tideNetDmaBufFd(host.data(), host.size(), &fd, &off);
  if (cuda::gpuUsable() && cuda::driver()->cuMemGetHandleForAddressRange != nullptr) {
    EXPECT_EQ(r, tideInvalidArgument);  // host memory
  } else {
    EXPECT_EQ(r, tideSystemError);  // no GPU, or no dma-buf export here
  }
  EXPECT_EQ(fd, -1);
}

}  // namespace
}  // namespace tide::gdr
