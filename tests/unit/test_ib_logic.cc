// Verbs transport logic without a device: TIDE_IB_HCA parsing, striping over
// QPs, CTS credits, immediate/completion tracking, the connection state
// machine and the MR cache. A loopback "wire" plays the RDMA writes (memcpy)
// and delivers immediates per QP in order but interleaved across QPs at
// random, as RC QPs may.
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
#include "transports/ib/mr_cache.h"

namespace tide {
namespace {

TEST(IbHca, PrefixPortExcludeExact) {
  HcaFilter all = HcaFilter::parse("");
  EXPECT_TRUE(all.matches("mlx5_0", 1));
  HcaFilter pre = HcaFilter::parse("mlx5");
  EXPECT_TRUE(pre.matches("mlx5_0", 1));
  EXPECT_TRUE(pre.matches("mlx5_10", 2));
  EXPECT_FALSE(pre.matches("bnxt_re0", 1));
  HcaFilter ports = HcaFilter::parse("mlx5_0:1, mlx5_1:2");
  EXPECT_TRUE(ports.matches("mlx5_0", 1));
  EXPECT_FALSE(ports.matches("mlx5_0", 2));
  EXPECT_TRUE(ports.matches("mlx5_1", 2));
  EXPECT_FALSE(ports.matches("mlx5_1", 1));
  HcaFilter ex = HcaFilter::parse("^mlx5_1");
  EXPECT_TRUE(ex.matches("mlx5_0", 1));
  EXPECT_FALSE(ex.matches("mlx5_1", 1));
  EXPECT_FALSE(ex.matches("mlx5_10", 1));  // prefix: mlx5_10 starts with mlx5_1
  HcaFilter exact = HcaFilter::parse("=mlx5_1");
  EXPECT_TRUE(exact.matches("mlx5_1", 1));
  EXPECT_FALSE(exact.matches("mlx5_10", 1));
  HcaFilter exEx = HcaFilter::parse("^=mlx5_1:1");
  EXPECT_TRUE(exEx.matches("mlx5_10", 1));
  EXPECT_TRUE(exEx.matches("mlx5_1", 2));
  EXPECT_FALSE(exEx.matches("mlx5_1", 1));
}

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

// ---- MR cache ---------------------------------------------------------------------------

struct FakeMr {
  std::map<void*, std::pair<uintptr_t, size_t>> live;
  int regs = 0, deregs = 0, failNext = 0;
  MrCache::RegisterFn reg() {
    return [this](uintptr_t base, size_t len, void** h) -> Status {
      if (failNext > 0) {
        --failNext;
        return systemError("fake: out of pinnable memory");
      }
      *h = reinterpret_cast<void*>(static_cast<uintptr_t>(++regs));
      live[*h] = {base, len};
      return Status::Ok();
    };
  }
  MrCache::DeregisterFn dereg() {
    return [this](void* h) {
      ASSERT_EQ(live.count(h), 1u);
      live.erase(h);
      ++deregs;
    };
  }
};

TEST(IbMrCache, HitsMissesPageWideningAndRefcounts) {
  FakeMr f;
  MrCache cache(f.reg(), f.dereg(), 8, 0);
  const MrCache::Entry *a, *b, *c;
  ASSERT_TRUE(cache.acquire(reinterpret_cast<void*>(0x10010), 100, &a).ok());
  EXPECT_EQ(a->base, 0x10000u);
  EXPECT_EQ(a->len, 4096u);
  ASSERT_TRUE(cache.acquire(reinterpret_cast<void*>(0x10800), 2048, &b).ok());
  EXPECT_EQ(a, b) << "covered by the same page";
  EXPECT_EQ(a->refs, 2);
  ASSERT_TRUE(cache.acquire(reinterpret_cast<void*>(0x10800), 4096, &c).ok());
  EXPECT_NE(c, a) << "crosses the page: new registration (the referenced one stays)";
  EXPECT_EQ(cache.stats().hits, 1u);
  EXPECT_EQ(cache.stats().misses, 2u);
  cache.release(a);
  cache.release(b);
  EXPECT_EQ(f.deregs, 0) << "unreferenced entries stay cached";
  cache.release(c);
  EXPECT_EQ(cache.entries(), 2u);
  // A larger range over both unreferenced entries merges them.
  const MrCache::Entry* d;
  ASSERT_TRUE(cache.acquire(reinterpret_cast<void*>(0x10000), 3 * 4096, &d).ok());
  EXPECT_EQ(cache.entries(), 1u);
  EXPECT_EQ(cache.stats().merges, 2u);
  EXPECT_EQ(d->base, 0x10000u);
  EXPECT_EQ(d->len, 3 * 4096u);
  cache.release(d);
  EXPECT_EQ(f.live.size(), 1u);
}

TEST(IbMrCache, BoundedLruEvictionAndInvalidate) {
  FakeMr f;
  MrCache cache(f.reg(), f.dereg(), 4, 64 << 10);
  std::vector<const MrCache::Entry*> held;
  for (int i = 0; i < 10; ++i) {
    const MrCache::Entry* e;
    ASSERT_TRUE(cache.acquire(reinterpret_cast<void*>(0x100000 + i * 0x10000), 4096, &e).ok());
    cache.release(e);
    EXPECT_LE(cache.entries(), 4u);
  }
  EXPECT_EQ(cache.stats().evictions, 6u);
  // The most recent four survive: acquiring #9 is a hit, #0 a miss.
  const MrCache::Entry* e;
  uint64_t misses = cache.stats().misses;
  ASSERT_TRUE(cache.acquire(reinterpret_cast<void*>(0x100000 + 9 * 0x10000), 8, &e).ok());
  EXPECT_EQ(cache.stats().misses, misses);
  held.push_back(e);
  // Byte bound: a 60 KiB registration pushes older unreferenced ones out.
  ASSERT_TRUE(cache.acquire(reinterpret_cast<void*>(0x900000), 60 << 10, &e).ok());
  held.push_back(e);
  EXPECT_LE(cache.bytes(), size_t{64} << 10);
  // Referenced entries are never evicted: invalidate defers their deregistration.
  int before = f.deregs;
  cache.invalidate(reinterpret_cast<void*>(0x900000), 60 << 10);
  EXPECT_EQ(f.deregs, before);
  const MrCache::Entry* again;
  ASSERT_TRUE(cache.acquire(reinterpret_cast<void*>(0x900000), 16, &again).ok());
  EXPECT_NE(again, held[1]) << "a stale entry is not handed out again";
  cache.release(held[1]);
  EXPECT_EQ(f.deregs, before + 1) << "stale entry deregistered on last release";
  cache.release(again);
  cache.release(held[0]);
  cache.flush();
  EXPECT_EQ(cache.entries(), 0u);
  EXPECT_TRUE(f.live.empty());
}

TEST(IbMrCache, RegistrationFailureRetriesAfterEviction) {
  FakeMr f;
  MrCache cache(f.reg(), f.dereg(), 16, 0);
  const MrCache::Entry* e;
  ASSERT_TRUE(cache.acquire(reinterpret_cast<void*>(0x200000), 4096, &e).ok());
  cache.release(e);
  f.failNext = 1;
  ASSERT_TRUE(cache.acquire(reinterpret_cast<void*>(0x300000), 4096, &e).ok());
  EXPECT_EQ(cache.entries(), 1u) << "the cached entry was dropped to make room";
  cache.release(e);
  f.failNext = 2;
  EXPECT_FALSE(cache.acquire(reinterpret_cast<void*>(0x400000), 4096, &e).ok());
}

TEST(IbMrCache, ConcurrentAcquireRelease) {
  FakeMr f;
  std::mutex mu;  // FakeMr's map is not thread-safe; the cache serializes callbacks anyway
  MrCache cache(f.reg(), f.dereg(), 8, 0);
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t) {
    ts.emplace_back([&cache, t] {
      for (int i = 0; i < 2000; ++i) {
        const MrCache::Entry* e;
        uintptr_t a = 0x1000000 + ((i * 7 + t) % 13) * 0x3000;
        ASSERT_TRUE(cache.acquire(reinterpret_cast<void*>(a), 5000, &e).ok());
        ASSERT_TRUE(e->contains(a, 5000));
        cache.release(e);
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_LE(cache.entries(), 8u);
  (void)mu;
}

}  // namespace
}  // namespace tide
