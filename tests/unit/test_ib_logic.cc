// Verbs transport logic without a device: striping over QPs, CTS credits,
// immediate/completion tracking and the connection state machine (the HCA
// filter and the MR cache: test_net_common.cc). A loopback "wire" plays the
// RDMA writes (memcpy) and delivers immediates per QP in order but
// interleaved across QPs at random, as RC QPs may.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "transports/ib/ib_logic.h"

namespace tide {
namespace {

TEST(IbStripes, CoverEveryByteOnceWithOneImmPerQp) {
  for (int nqps : {1, 2, 3, 4, 16}) {
    for (size_t bytes : {size_t{0}, size_t{1}, size_t{127}, size_t{128}, size_t{4097},
                         size_t{1} << 20, (size_t{5} << 20) + 3}) {
      std::vector<IbWr> wrs;
      ASSERT_TRUE(planStripes(bytes, nqps, 256 << 10, &wrs).ok());
      std::vector<int> imms(nqps, 0);
      std::vector<uint64_t> immBytes(nqps, 0), qpBytes(nqps, 0);
      size_t next = 0;
      for (const IbWr& w : wrs) {
        ASSERT_EQ(w.offset, next) << "contiguous, in order";
        next += w.len;
        EXPECT_LE(w.len, size_t{256} << 10);
        qpBytes[w.qp] += w.len;
        if (w.withImm) {
          ++imms[w.qp];
          immBytes[w.qp] += w.imm;
        }
        if (w.qp > 0 && w.len > 0) {
          EXPECT_EQ(w.offset % kIbStripeAlign, 0u);
        }
      }
      EXPECT_EQ(next, bytes);
      for (int q = 0; q < nqps; ++q) {
        EXPECT_EQ(imms[q], 1) << "bytes " << bytes << " qp " << q;
        EXPECT_EQ(immBytes[q], qpBytes[q]);
      }
    }
  }
  std::vector<IbWr> wrs;
  EXPECT_FALSE(planStripes(10, 0, 1024, &wrs).ok());
  EXPECT_FALSE(planStripes(10, kIbMaxQps + 1, 1024, &wrs).ok());
}

TEST(IbCredits, ProducerStopsAtSlotsConsumerSeesInOrder) {
  std::vector<CtsEntry> fifo(kIbSlots);
  memset(fifo.data(), 0, fifo.size() * sizeof(CtsEntry));
  CtsProducer prod;
  CtsConsumer cons(fifo.data());
  CtsEntry e;
  EXPECT_FALSE(cons.peek(&e));
  for (int i = 0; i < kIbSlots; ++i) {
    ASSERT_TRUE(prod.canPost());
    int slot;
    CtsEntry w;
    prod.post(0x1000 + i, 7, 100 + i, i, &slot, &w);
    EXPECT_EQ(slot, i);
    fifo[slot] = w;  // the "RDMA write"
  }
  EXPECT_FALSE(prod.canPost()) << "all credits in use";
  for (int i = 0; i < kIbSlots; ++i) {
    ASSERT_TRUE(cons.peek(&e));
    EXPECT_EQ(e.addr, 0x1000u + i);
    EXPECT_EQ(e.size, 100u + i);
    EXPECT_EQ(e.tag, i);
    cons.pop();
  }
  EXPECT_FALSE(cons.peek(&e)) << "slot 0 still holds the old sequence number";
  prod.complete();
  ASSERT_TRUE(prod.canPost());
  int slot;
  CtsEntry w;
  EXPECT_EQ(prod.post(1, 2, 3, 9, &slot, &w), uint64_t(kIbSlots));
  EXPECT_EQ(slot, 0);
  fifo[slot] = w;
  ASSERT_TRUE(cons.peek(&e));
  EXPECT_EQ(e.addr, 1u);
}

TEST(IbImm, CompletesInOrderWhenAllQpsReported) {
  ImmTracker t(3);
  uint64_t bytes;
  ASSERT_TRUE(t.onImm(1, 10).ok());
  ASSERT_TRUE(t.onImm(1, 20).ok());  // message 1 on QP 1 before message 0 is complete
  EXPECT_FALSE(t.popComplete(&bytes));
  ASSERT_TRUE(t.onImm(0, 5).ok());
  ASSERT_TRUE(t.onImm(2, 0).ok());
  ASSERT_TRUE(t.popComplete(&bytes));
  EXPECT_EQ(bytes, 15u);
  EXPECT_FALSE(t.popComplete(&bytes));
  ASSERT_TRUE(t.onImm(2, 1).ok());
  ASSERT_TRUE(t.onImm(0, 2).ok());
  ASSERT_TRUE(t.popComplete(&bytes));
  EXPECT_EQ(bytes, 23u);
  EXPECT_FALSE(t.onImm(5, 1).ok());
  // More immediates than credits on one QP is a protocol error.
  ImmTracker u(2);
  for (int i = 0; i < kIbSlots; ++i) ASSERT_TRUE(u.onImm(0, 1).ok());
  EXPECT_FALSE(u.onImm(0, 1).ok());
}

TEST(IbSend, TrackerCountsSignaledCompletions) {
  SendTracker s;
  s.add(0, 2);
  s.add(1, 1);
  s.add(2, 0);
  EXPECT_FALSE(s.done(0));
  ASSERT_TRUE(s.onCompletion(1).ok());
  EXPECT_TRUE(s.done(1));
  EXPECT_EQ(s.doneBelow(), 0u);
  ASSERT_TRUE(s.onCompletion(0).ok());
  ASSERT_TRUE(s.onCompletion(0).ok());
  EXPECT_EQ(s.doneBelow(), 3u);
  EXPECT_FALSE(s.onCompletion(0).ok());
  EXPECT_FALSE(s.onCompletion(7).ok());
}

TEST(IbFsm, HandshakeOrdersAndErrors) {
  IbConnFsm a;
  ASSERT_TRUE(a.apply(IbConnEvent::Create).ok());
  ASSERT_TRUE(a.apply(IbConnEvent::ToInit).ok());
  ASSERT_TRUE(a.apply(IbConnEvent::SendHandle).ok());
  EXPECT_EQ(a.state(), IbConnState::HandleSent);
  ASSERT_TRUE(a.apply(IbConnEvent::GotHandle).ok());
  ASSERT_TRUE(a.apply(IbConnEvent::ToRtr).ok());
  ASSERT_TRUE(a.apply(IbConnEvent::ToRts).ok());
  EXPECT_TRUE(a.ready());
  ASSERT_TRUE(a.apply(IbConnEvent::Close).ok());
  ASSERT_TRUE(a.apply(IbConnEvent::Closed).ok());
  EXPECT_EQ(a.state(), IbConnState::Closed);

  IbConnFsm b;  // peer handle first
  ASSERT_TRUE(b.apply(IbConnEvent::Create).ok());
  ASSERT_TRUE(b.apply(IbConnEvent::GotHandle).ok());
  ASSERT_TRUE(b.apply(IbConnEvent::ToInit).ok());
  ASSERT_TRUE(b.apply(IbConnEvent::SendHandle).ok());
  EXPECT_EQ(b.state(), IbConnState::HandleKnown);

  IbConnFsm c;  // RTR before the peer's handle is known
  ASSERT_TRUE(c.apply(IbConnEvent::Create).ok());
  ASSERT_TRUE(c.apply(IbConnEvent::ToInit).ok());
  Status s = c.apply(IbConnEvent::ToRtr);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("init"), std::string::npos) << s.message();
  EXPECT_EQ(c.state(), IbConnState::Error);
  EXPECT_FALSE(c.apply(IbConnEvent::ToRts).ok());
  ASSERT_TRUE(c.apply(IbConnEvent::Close).ok()) << "an errored connection can still close";

  IbConnFsm d;
  ASSERT_TRUE(d.apply(IbConnEvent::Create).ok());
  ASSERT_TRUE(d.apply(IbConnEvent::GotHandle).ok());
  EXPECT_FALSE(d.apply(IbConnEvent::GotHandle).ok()) << "duplicate handle";
}

// ---- The whole protocol over a loopback wire ---------------------------------------

// Sender and receiver logic wired together in memory: the receiver posts
// CTS entries into the sender's FIFO, the sender stripes each message into
// writes (memcpy into the receive buffer) and immediates, which arrive per QP
// in order but interleaved across QPs at random.
TEST(IbProtocol, LoopbackManyMessagesRandomQpInterleaving) {
  constexpr int kQps = 3;
  constexpr int kMsgs = 300;
  std::mt19937 rng(42);
  std::vector<CtsEntry> fifo(kIbSlots);
  memset(fifo.data(), 0, fifo.size() * sizeof(CtsEntry));
  CtsProducer prod;
  CtsConsumer cons(fifo.data());
  ImmTracker imms(kQps);
  SendTracker sends;
  std::vector<std::vector<uint8_t>> src(kMsgs), dst(kMsgs);
  for (int m = 0; m < kMsgs; ++m) {
    size_t n = (m % 7 == 0) ? 0 : (rng() % (300 << 10));
    src[m].resize(n);
    for (size_t i = 0; i < n; ++i) src[m][i] = static_cast<uint8_t>(rng());
    dst[m].assign(n + 64, 0xEE);
  }
  std::vector<std::vector<std::pair<uint64_t, uint32_t>>> wire(kQps);  // (msg, imm) per QP
  std::vector<std::vector<uint64_t>> sendCqe(kQps);                    // signaled completions
  int posted = 0, sent = 0, received = 0;
  while (received < kMsgs) {
    int action = rng() % 4;
    if (action == 0 && posted < kMsgs && prod.canPost()) {
      int slot;
      CtsEntry e;
      prod.post(reinterpret_cast<uintptr_t>(dst[posted].data()), 1,
                static_cast<uint32_t>(dst[posted].size()), posted, &slot, &e);
      fifo[slot] = e;
      ++posted;
    } else if (action == 1 && sent < kMsgs) {
      CtsEntry e;
      if (!cons.peek(&e)) continue;
      ASSERT_LE(src[sent].size(), e.size);
      std::vector<IbWr> wrs;
      ASSERT_TRUE(planStripes(src[sent].size(), kQps, 64 << 10, &wrs).ok());
      for (const IbWr& w : wrs) {
        // An empty message has a null data(): memcpy's arguments must not be null.
        if (w.len != 0) {
          memcpy(reinterpret_cast<uint8_t*>(e.addr) + w.offset, src[sent].data() + w.offset, w.len);
        }
        if (w.withImm) {
          wire[w.qp].push_back({static_cast<uint64_t>(sent), w.imm});
          sendCqe[w.qp].push_back(sent);
        }
      }
      sends.add(sent, kQps);
      cons.pop();
      ++sent;
    } else if (action == 2) {
      int q = rng() % kQps;
      if (wire[q].empty()) continue;
      ASSERT_TRUE(imms.onImm(q, wire[q].front().second).ok());
      wire[q].erase(wire[q].begin());
      uint64_t bytes;
      while (imms.popComplete(&bytes)) {
        ASSERT_EQ(bytes, src[received].size()) << "message " << received;
        if (bytes != 0) {  // an empty vector's data() is null: no memcmp
          ASSERT_EQ(memcmp(dst[received].data(), src[received].data(), bytes), 0);
        }
        ASSERT_EQ(dst[received][bytes], 0xEE) << "no write past the message";
        prod.complete();
        ++received;
      }
    } else {
      int q = rng() % kQps;
      if (sendCqe[q].empty()) continue;
      ASSERT_TRUE(sends.onCompletion(sendCqe[q].front()).ok());
      sendCqe[q].erase(sendCqe[q].begin());
    }
  }
  for (int q = 0; q < kQps; ++q) {
    for (uint64_t m : sendCqe[q]) ASSERT_TRUE(sends.onCompletion(m).ok());
  }
  EXPECT_EQ(sends.doneBelow(), uint64_t(kMsgs));
  EXPECT_EQ(prod.outstanding(), 0u);
}

}  // namespace
}  // namespace tide
