// Helpers the nets share: the interface-name filter (core/if_filter.h), the
// interface walk (core/if_addrs.h), the nets' interface choice
// (transports/common/net_devices.h), the TIDE_IB_HCA filter and the
// memory-registration cache (transports/common/hca_filter.h, mr_cache.h).
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/if_addrs.h"
#include "core/if_filter.h"
#include "transports/common/hca_filter.h"
#include "transports/common/mr_cache.h"
#include "transports/common/net_devices.h"

namespace tide {
namespace {

// ---- Interface names and interfaces -----------------------------------------------------

TEST(IfFilter, NcclSyntax) {
  EXPECT_TRUE(interfaceNameMatches("eth", "eth0"));
  EXPECT_FALSE(interfaceNameMatches("eth", "lo"));
  EXPECT_TRUE(interfaceNameMatches("ib,eth", "eth1"));
  EXPECT_FALSE(interfaceNameMatches("ib,eth", "lo"));
  EXPECT_FALSE(interfaceNameMatches("^eth", "eth0"));
  EXPECT_TRUE(interfaceNameMatches("^eth", "lo"));
  EXPECT_FALSE(interfaceNameMatches("^lo,docker", "lo"));
  EXPECT_TRUE(interfaceNameMatches("^lo,docker", "eth0"));
  EXPECT_TRUE(interfaceNameMatches("=eth0", "eth0"));
  EXPECT_FALSE(interfaceNameMatches("=eth0", "eth00"));
  EXPECT_FALSE(interfaceNameMatches("=eth0", "eth01"));
  EXPECT_FALSE(interfaceNameMatches("^=eth0", "eth0"));
  EXPECT_TRUE(interfaceNameMatches("^=eth0", "eth00"));
  EXPECT_TRUE(interfaceNameMatches("^docker,virbr", "veth1"));
  EXPECT_TRUE(interfaceNameMatches("eth,,ib", "ib0"));  // empty items are skipped
  EXPECT_TRUE(interfaceNameMatches("^", "eth0"));       // excludes nothing
  EXPECT_FALSE(interfaceNameMatches("", "eth0"));
}

TEST(IfAddrs, ListsLoopback) {
  std::vector<NetInterface> ifs;
  ASSERT_TRUE(listInterfaces(&ifs).ok());
  bool lo4 = false;
  for (const NetInterface& i : ifs) {
    EXPECT_TRUE(i.family == AF_INET || i.family == AF_INET6) << i.name;
    EXPECT_EQ(i.addr.family(), i.family);
    EXPECT_FALSE(i.name.empty());
    if (i.name == "lo" && i.family == AF_INET) {
      lo4 = true;
      EXPECT_TRUE(i.up());
      EXPECT_TRUE(i.loopback());
      EXPECT_FALSE(i.linkLocal6());
      EXPECT_NE(i.index, 0u);
      EXPECT_EQ(i.addr.hostStr(), "127.0.0.1");
      EXPECT_EQ(i.addr.port(), 0);
    }
  }
  EXPECT_TRUE(lo4);
}

TEST(NetDevices, LoopbackByName) {
  auto v4 = findNetDevices("lo", AF_INET);
  ASSERT_EQ(v4.size(), 1u);
  EXPECT_EQ(v4[0].ifname, "lo");
  EXPECT_EQ(v4[0].addr.hostStr(), "127.0.0.1");
  EXPECT_TRUE(findNetDevices("=no-such-if", AF_UNSPEC).empty());
  // Without a filter loopback is used only when nothing else exists.
  auto any = findNetDevices("", AF_UNSPEC);
  ASSERT_FALSE(any.empty());
  if (any.size() > 1) {
    for (auto& d : any) EXPECT_NE(d.ifname, "lo");
  }
}

// ---- TIDE_IB_HCA (transports/common/hca_filter.h) --------------------------------------

TEST(HcaFilter, PrefixPortExcludeExact) {
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

// ---- MR cache (transports/common/mr_cache.h) -------------------------------------------

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

TEST(MrCache, HitsMissesPageWideningAndRefcounts) {
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

TEST(MrCache, BoundedLruEvictionAndInvalidate) {
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

TEST(MrCache, RegistrationFailureRetriesAfterEviction) {
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

TEST(MrCache, ConcurrentAcquireRelease) {
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
