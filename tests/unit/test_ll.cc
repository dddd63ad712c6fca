// Low-latency shared-memory protocol (transports/shm/fifo.h): the flag
// (slot stamp) and the data share the slot's first cache line, pieces carry
// their message number, and two threads ping-ponging through a pair of FIFOs
// always see complete, correctly ordered data.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "tests/unit/shm_pair.h"
#include "transports/shm/fifo.h"

namespace tide {
namespace {

using shm::FifoView;
using shm::RecvOp;
using shm::SendOp;
using shmtest::FifoMem;

TEST(LowLatency, SmallMessageSharesTheFlagsCacheLine) {
  FifoMem m(4, 256);
  FifoView v = m.newView();
  char* slot = static_cast<char*>(v.writeSlot());
  ASSERT_NE(slot, nullptr);
  // The payload starts right after the 16-byte header, in the same line.
  auto line = [](const void* p) { return reinterpret_cast<uintptr_t>(p) / 64; };
  const char* header = slot - shm::kSlotHeaderBytes;
  EXPECT_EQ(reinterpret_cast<uintptr_t>(header) % 64, 0u);
  EXPECT_EQ(line(header), line(slot + 47));
  EXPECT_EQ(v.capacity(), 256u - shm::kSlotHeaderBytes);
}

TEST(LowLatency, NothingVisibleBeforeCommit) {
  FifoMem m(2, 64);
  FifoView prod = m.newView();
  FifoView cons = m.newView();
  void* slot = prod.writeSlot();
  ASSERT_NE(slot, nullptr);
  std::memset(slot, 0x5a, 8);
  size_t n = 0;
  EXPECT_EQ(cons.readSlot(&n), nullptr);
  prod.commitWrite(8, 42);
  uint32_t seq = 0;
  const void* got = cons.readSlot(&n, &seq);
  ASSERT_NE(got, nullptr);
  EXPECT_EQ(n, 8u);
  EXPECT_EQ(seq, 42u);
  EXPECT_EQ(static_cast<const unsigned char*>(got)[7], 0x5a);
}

// A view made after traffic started resumes from the shared state, on both
// sides.
TEST(LowLatency, ViewsResumeFromSharedState) {
  FifoMem m(3, 64);
  FifoView prod = m.newView();
  FifoView cons = m.newView();
  for (int i = 0; i < 5; ++i) {  // wrap once
    ASSERT_NE(prod.writeSlot(), nullptr);
    prod.commitWrite(1, static_cast<uint32_t>(i));
    size_t n = 0;
    ASSERT_NE(cons.readSlot(&n), nullptr);
    cons.releaseRead();
  }
  ASSERT_NE(prod.writeSlot(), nullptr);
  prod.commitWrite(3, 5);  // one filled, unconsumed slot
  FifoView prod2 = m.newView();
  FifoView cons2 = m.newView();
  ASSERT_NE(prod2.writeSlot(), nullptr);
  prod2.commitWrite(4, 6);
  uint32_t seq = 0;
  size_t n = 0;
  ASSERT_NE(cons2.readSlot(&n, &seq), nullptr);
  EXPECT_EQ(seq, 5u);
  EXPECT_EQ(n, 3u);
  cons2.releaseRead();
  ASSERT_NE(cons2.readSlot(&n, &seq), nullptr);
  EXPECT_EQ(seq, 6u);
  EXPECT_EQ(n, 4u);
}

// A piece of another message is refused before anything is written.
TEST(LowLatency, WrongMessageNumberIsRefused) {
  FifoMem m(4, 64);
  FifoView v = m.newView();
  char data[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  SendOp s{data, 8, 0, 7};
  ASSERT_EQ(shm::pushMessage(v, s), 1u);
  char out[8] = {};
  RecvOp r;
  r.buf = out;
  r.bytes = 8;
  r.seq = 6;
  size_t slots = 0;
  Status st = shm::pullMessage(v, r, &slots);
  EXPECT_EQ(st.code(), tideInternalError);
  EXPECT_NE(st.message().find("#6"), std::string::npos) << st.message();
  EXPECT_EQ(slots, 0u);
  EXPECT_EQ(r.off, 0u);
  EXPECT_EQ(out[0], 0);
}

// Two threads ping-pong messages of 4..200 bytes through two FIFOs; every
// byte and every message number must arrive intact (the stamp's release
// store orders the data before it). Prints the round-trip time.
TEST(LowLatency, PingPongTwoThreads) {
  constexpr uint32_t kSlots = 4;
  constexpr size_t kSlot = 256;
  constexpr int kIters = 20000;
  FifoMem ab(kSlots, kSlot), ba(kSlots, kSlot);
  std::atomic<bool> failed{false};
  auto sizeOf = [](int i) { return static_cast<size_t>(4 + (i * 37) % 197); };
  auto fill = [](int i, size_t n, unsigned char* p) {
    for (size_t k = 0; k < n; ++k) p[k] = static_cast<unsigned char>(i * 13 + k);
  };
  auto check = [](int i, size_t n, const unsigned char* p) {
    for (size_t k = 0; k < n; ++k) {
      if (p[k] != static_cast<unsigned char>(i * 13 + k)) return false;
    }
    return true;
  };
  auto pump = [&](FifoView& out, FifoView& in, int i, bool sendFirst) {
    const size_t n = sizeOf(i);
    unsigned char src[256], dst[256];
    fill(i, n, src);
    SendOp s{reinterpret_cast<const char*>(src), n, 0, static_cast<uint32_t>(i)};
    RecvOp r;
    r.buf = reinterpret_cast<char*>(dst);
    r.bytes = n;
    r.seq = static_cast<uint32_t>(i);
    if (sendFirst) {
      while (!s.done()) shm::pushMessage(out, s);
    }
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!r.done()) {
      size_t slots = 0;
      if (!shm::pullMessage(in, r, &slots).ok() || std::chrono::steady_clock::now() > deadline) {
        failed = true;
        return;
      }
      if (slots == 0) std::this_thread::yield();
    }
    if (!check(i, n, dst)) failed = true;
    if (!sendFirst) {
      while (!s.done()) shm::pushMessage(out, s);
    }
  };
  auto t0 = std::chrono::steady_clock::now();
  std::thread peer([&] {
    FifoView out = ba.newView(), in = ab.newView();
    for (int i = 0; i < kIters && !failed; ++i) pump(out, in, i, false);
  });
  {
    FifoView out = ab.newView(), in = ba.newView();
    for (int i = 0; i < kIters && !failed; ++i) pump(out, in, i, true);
  }
  peer.join();
  double us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_FALSE(failed.load());
  std::printf("[ ll     ] ping-pong round trip, 4-200 B: %.2f us\n", us / kIters);
}

}  // namespace
}  // namespace tide
