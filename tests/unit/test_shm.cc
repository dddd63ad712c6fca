// Shared-memory transport, one thread: the slot FIFO and the message pumps
// (pushMessage/pullMessage): wrap-around, reducing receives, size and tag
// checks. Whole connections are in test_shm_transport.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "tests/unit/shm_pair.h"
#include "transports/shm/fifo.h"

namespace tide {
namespace {

using shm::RecvOp;
using shm::SendOp;
using shmtest::FifoMem;
using shmtest::makeData;
using shmtest::sumInt32;

TEST(ShmFifo, FillAndDrain) {
  FifoMem f(4, 64);
  const size_t cap = f.view.capacity();
  ASSERT_EQ(cap, 64u - shm::kSlotHeaderBytes);
  for (int i = 0; i < 4; ++i) {
    void* slot = f.view.writeSlot();
    ASSERT_NE(slot, nullptr);
    std::memset(slot, i, cap);
    f.view.commitWrite(10 + i);
  }
  EXPECT_EQ(f.view.writeSlot(), nullptr);
  for (int i = 0; i < 4; ++i) {
    size_t n = 0;
    const void* slot = f.view.readSlot(&n);
    ASSERT_NE(slot, nullptr);
    EXPECT_EQ(n, static_cast<size_t>(10 + i));
    EXPECT_EQ(static_cast<const unsigned char*>(slot)[cap - 1], i);
    f.view.releaseRead();
  }
  size_t n = 0;
  EXPECT_EQ(f.view.readSlot(&n), nullptr);
  EXPECT_NE(f.view.writeSlot(), nullptr);
}

// Pumps messages of many sizes through a small FIFO, interleaving the two
// sides, so the ring wraps many times and messages straddle the wrap point.
TEST(ShmFifo, MessagesOfAllSizesWrapAround) {
  FifoMem f(3, 64);
  // Around multiples of the 48-byte capacity and of the slot size.
  const std::vector<size_t> sizes = {0,   1,   47,  48, 49,  63,  64,  65, 95,      96, 97,  128,
                                     143, 144, 145, 0,  191, 192, 193, 0,  640 + 7, 5,  1000};
  for (int round = 0; round < 5; ++round) {
    for (size_t s = 0; s < sizes.size(); ++s) {
      auto in = makeData(static_cast<uint32_t>(round * 100 + s), sizes[s]);
      std::vector<unsigned char> out(sizes[s] + 1, 0xEE);
      SendOp sop{reinterpret_cast<const char*>(in.data()), in.size(), 0};
      RecvOp rop;
      rop.buf = reinterpret_cast<char*>(out.data());
      rop.bytes = sizes[s];
      int spins = 0;
      while (!sop.done() || !rop.done()) {
        shm::pushMessage(f.view, sop);
        size_t slots = 0;
        ASSERT_TRUE(shm::pullMessage(f.view, rop, &slots).ok());
        ASSERT_LT(++spins, 1000);
      }
      EXPECT_TRUE(std::equal(in.begin(), in.end(), out.begin())) << "size " << sizes[s];
      EXPECT_EQ(out[sizes[s]], 0xEE) << "wrote past the end";
    }
  }
  size_t n = 0;
  EXPECT_EQ(f.view.readSlot(&n), nullptr);
}

TEST(ShmFifo, PiecesNeverShareASlot) {
  FifoMem f(8, 64);
  SendOp a{"abc", 3, 0};
  SendOp b{"defgh", 5, 0};
  EXPECT_EQ(shm::pushMessage(f.view, a), 1u);
  EXPECT_EQ(shm::pushMessage(f.view, b), 1u);
  size_t n = 0;
  ASSERT_NE(f.view.readSlot(&n), nullptr);
  EXPECT_EQ(n, 3u);
}

// elements straddle slots and the pump must carry partial elements.
void sumTriple(void* dst, const void* a, const void* b, size_t count) {
  sumInt32(dst, a, b, count * 3);
}

void checkReduce(size_t elemSize, ReduceFn fn, size_t count, bool inPlace) {
  FifoMem f(2, 64);
  const size_t ints = count * elemSize / 4;
  std::vector<int32_t> incoming(ints), src(ints), dst(ints, -1);
  for (size_t i = 0; i < ints; ++i) {
    incoming[i] = static_cast<int32_t>(i * 3 + 1);
    src[i] = static_cast<int32_t>(1000 - i);
  }
  if (inPlace) dst = src;
  SendOp sop{reinterpret_cast<const char*>(incoming.data()), ints * 4, 0};
  RecvOp rop;
  rop.buf = reinterpret_cast<char*>(dst.data());
  rop.bytes = ints * 4;
  rop.reduce = true;
  rop.rr = RecvReduce{fn, inPlace ? dst.data() : src.data(), elemSize};
  while (!sop.done() || !rop.done()) {
    shm::pushMessage(f.view, sop);
    size_t slots = 0;
    ASSERT_TRUE(shm::pullMessage(f.view, rop, &slots).ok());
  }
  for (size_t i = 0; i < ints; ++i) {
    ASSERT_EQ(dst[i], static_cast<int32_t>(1000 - i + i * 3 + 1)) << "at " << i;
  }
}

TEST(ShmFifo, RecvReduceWholeElements) {
  checkReduce(4, sumInt32, 1, false);
  checkReduce(4, sumInt32, 16, false);
  checkReduce(4, sumInt32, 1000, false);
  checkReduce(4, sumInt32, 1000, true);
}

TEST(ShmFifo, RecvReduceStraddlingElements) {
  checkReduce(12, sumTriple, 1, false);
  checkReduce(12, sumTriple, 77, false);
  checkReduce(12, sumTriple, 500, true);
}

TEST(ShmFifo, SizeMismatchIsAnError) {
  FifoMem f(4, 64);
  char buf[100] = {};
  SendOp sop{buf, 100, 0};
  shm::pushMessage(f.view, sop);
  RecvOp rop;
  rop.buf = buf;
  rop.bytes = 70;
  size_t slots = 0;
  // The first 48-byte piece fits; the second (48 bytes, 22 expected) does not.
  EXPECT_EQ(shm::pullMessage(f.view, rop, &slots).code(), tideInternalError);
  EXPECT_EQ(rop.off, 48u);
}

// A piece tagged by another call fails the receive before any byte lands;
// a zero tag on either side is not checked.
TEST(ShmFifo, TagMismatchIsInvalidUsage) {
  FifoMem f(4, 64);
  char data[100];
  std::memset(data, 0x5a, sizeof(data));
  SendOp sop{data, 100, 0, 1};
  sop.tag = 0x1234;
  shm::pushMessage(f.view, sop);
  std::vector<char> buf(100, 0x11);
  RecvOp rop;
  rop.buf = buf.data();
  rop.bytes = 100;
  rop.seq = 1;
  rop.tag = 0x4321;
  rop.peer = 3;
  size_t slots = 0;
  Status st = shm::pullMessage(f.view, rop, &slots);
  EXPECT_EQ(st.code(), tideInvalidUsage);
  EXPECT_NE(st.message().find("mismatched operation: message 1 from rank 3"), std::string::npos)
      << st.message();
  EXPECT_EQ(slots, 0u);
  EXPECT_TRUE(std::all_of(buf.begin(), buf.end(), [](char c) { return c == 0x11; }));
  rop.tag = 0;  // unchecked receive
  ASSERT_TRUE(shm::pullMessage(f.view, rop, &slots).ok());
  EXPECT_TRUE(rop.done());
  EXPECT_EQ(buf[99], 0x5a);
  // Small messages keep data and flag in one cache line.
  SendOp small{data, 48, 0, 2};
  small.tag = 7;
  EXPECT_EQ(shm::pushMessage(f.view, small), 1u);
}

}  // namespace
}  // namespace tide
