// The device collective engine's AllGather / ReduceScatter / Broadcast logic
// (src/cuda/device_coll_logic.h) on the CPU, as test_device_coll_logic.cc
// runs its All-Reduce (device_coll_node.h): 1..8 ranks, odd and zero counts,
// chunked as the host side cuts them, in place, replays, every dtype x op
// for ReduceScatter; a mixed sequence of all four kinds on one engine; the
// timeout and abort paths; the chunk arithmetic.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "core/kernels.h"
#include "core/registry.h"
#include "core/types.h"
#include "cuda/device_coll_logic.h"
#include "device_coll_node.h"

namespace tide::cuda::dc::hostnode {
namespace {

const char* kindName(int kind) {
  switch (kind) {
    case kAllGather:
      return "allgather";
    case kReduceScatter:
      return "reducescatter";
    case kBroadcast:
      return "broadcast";
    default:
      return "allreduce";
  }
}

// One collective call of any kind on every rank of `node`, cut into chunks
// as the host side (DeviceAllReduce) cuts it, each chunk's Args built once
// and run `replays` times with fresh inputs; checked bit for bit (a NaN
// matches any NaN) against a serial reference. `*calls` counts kernel calls
// (chunks x replays) and must match every rank's device counter. AG and
// Broadcast run on bytes (elemSize 1), as their kernels do. Returns the
// number of wrong (rank, replay) results.
struct CollSpec {
  int kind = kAllReduce;
  tideDataType_t dt = tideFloat32;
  RedOp op = RedOp::Sum;
  uint64_t count = 0;  // AG: per rank (send), RS: per rank (recv)
  bool inPlace = false;
  int root = 0;
  bool twoShot = false;  // All-Reduce
  bool direct = false;   // All-Reduce
  int nblocks = 1;
  int replays = 1;
};

int runColl(Node& node, const CollSpec& c, uint64_t seed, uint64_t* calls) {
  const int n = node.n;
  const ReduceFn fn = kernelsFor(MemType::Host)->reduceFn(c.dt, c.op);
  const size_t es = dtypeSize(c.dt);
  const uint64_t cnt = c.count;
  // Per rank: the user's send and recv buffers (in place: one buffer).
  const bool ag = c.kind == kAllGather;
  const bool rs = c.kind == kReduceScatter;
  const size_t sendElems = rs ? cnt * n : cnt;
  const size_t recvElems = ag ? cnt * n : cnt;
  std::vector<std::vector<uint8_t>> sendBuf(n), recvBuf(n);
  std::vector<const char*> sendPtr(n);
  std::vector<char*> recvPtr(n);
  for (int r = 0; r < n; ++r) {
    recvBuf[r].assign(recvElems * es + 1, 0xcd);
    sendBuf[r].assign(sendElems * es + 1, 0xab);
    if (!c.inPlace) {
      recvPtr[r] = reinterpret_cast<char*>(recvBuf[r].data());
      sendPtr[r] = reinterpret_cast<const char*>(sendBuf[r].data());
    } else if (ag) {
      recvPtr[r] = reinterpret_cast<char*>(recvBuf[r].data());
      sendPtr[r] = recvPtr[r] + r * cnt * es;
    } else if (rs) {
      sendPtr[r] = reinterpret_cast<const char*>(sendBuf[r].data());
      recvPtr[r] = const_cast<char*>(sendPtr[r]) + r * cnt * es;
    } else {
      recvPtr[r] = reinterpret_cast<char*>(recvBuf[r].data());
      sendPtr[r] = recvPtr[r];
    }
    // Broadcast: non-roots pass no input when out of place.
    if (c.kind == kBroadcast && !c.inPlace && r != c.root) sendPtr[r] = nullptr;
  }
  // Chunks, as the host side cuts them.
  const bool bytes = ag || c.kind == kBroadcast;
  const int kes = bytes ? 1 : static_cast<int>(es);
  const uint64_t kcount = bytes ? cnt * es : cnt;
  const uint64_t per = chunkElems(c.kind, node.areaBytes, kes, n);
  std::vector<std::vector<Args>> args(n);
  for (uint64_t off = 0; off < kcount; off += per) {
    const uint64_t m = std::min(per, kcount - off);
    for (int r = 0; r < n; ++r) {
      const char* in = sendPtr[r] == nullptr ? nullptr : sendPtr[r] + off * kes;
      Args a = node.args(r, in, m, kes, c.nblocks, recvPtr[r] + off * kes, kLongNs);
      a.kind = c.kind;
      a.root = c.root;
      a.stride = kcount;
      if (c.kind == kAllReduce) {
        a.direct = c.direct ? 1 : 0;
        a.copyIn = (!c.direct || (c.inPlace && !c.twoShot)) ? 1 : 0;
      }
      args[r].push_back(a);
    }
  }
  int wrong = 0;
  for (int rep = 0; rep < c.replays; ++rep) {
    // Fresh inputs; the reference from them.
    std::vector<std::vector<uint8_t>> in(n);
    for (int r = 0; r < n; ++r) {
      in[r].resize(sendElems * es);
      fillRandom(&in[r], seed * 977 + r * 31 + rep * 7919);
      if (sendPtr[r] != nullptr && !in[r].empty()) {
        memcpy(const_cast<char*>(sendPtr[r]), in[r].data(), in[r].size());
      }
    }
    std::vector<std::vector<uint8_t>> want(n);
    for (int r = 0; r < n; ++r) {
      if (ag) {
        for (int q = 0; q < n; ++q) want[r].insert(want[r].end(), in[q].begin(), in[q].end());
      } else if (rs) {
        want[r].assign(in[0].begin() + r * cnt * es, in[0].begin() + (r + 1) * cnt * es);
        for (int q = 1; q < n; ++q)
          fn(want[r].data(), want[r].data(), in[q].data() + r * cnt * es, cnt);
      } else if (c.kind == kBroadcast) {
        want[r] = in[c.root];
      } else {
        want[r] = in[0];
        for (int q = 1; q < n; ++q) fn(want[r].data(), want[r].data(), in[q].data(), cnt);
      }
    }
    std::vector<uint32_t> codes(n, 0);
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        for (const Args& a : args[r]) {
          const uint32_t code = runRank(c.twoShot, a, fn);
          if (codes[r] == 0) codes[r] = code;
        }
      });
    }
    for (auto& t : threads) t.join();
    *calls += args[0].size();
    for (int r = 0; r < n; ++r) {
      const bool tailKept = c.inPlace || recvBuf[r][recvElems * es] == 0xcd;
      if (codes[r] != 0 ||
          !sameResult(c.dt, reinterpret_cast<uint8_t*>(recvPtr[r]), want[r].data(), recvElems) ||
          node.counter(r) != *calls || !tailKept) {
        ++wrong;
        ADD_FAILURE() << kindName(c.kind) << " " << dtypeName(c.dt) << " op "
                      << static_cast<int>(c.op) << " n " << n << " count " << cnt
                      << (c.inPlace ? " in place" : "") << " root " << c.root << " blocks "
                      << c.nblocks << " area " << node.areaBytes << " rank " << r << " replay "
                      << rep << " code " << codes[r] << " counter " << node.counter(r) << " (want "
                      << *calls << ")" << (tailKept ? "" : " wrote past the end");
      }
    }
  }
  return wrong;
}

// Every new kind at 1..8 ranks, odd and zero counts, in place and out of
// place, one and several parts, with areas large enough for one chunk and
// small enough to need many; ReduceScatter over every dtype x op.
TEST(DeviceCollLogic, AllGatherReduceScatterBroadcastEveryRankCount) {
  ASSERT_NE(kernelsFor(MemType::Host), nullptr);
  const std::vector<uint64_t> counts = {1, 37, 0, 1001, 7, 4099};
  int cases = 0;
  for (int n = 1; n <= kMaxRanks; ++n) {
    for (size_t area : {size_t{40000} * 8 * 8, size_t{1000}}) {
      for (int kind : {kAllGather, kReduceScatter, kBroadcast}) {
        Node node(n, area);
        uint64_t calls = 0;
        for (size_t i = 0; i < counts.size(); ++i) {
          CollSpec c;
          c.kind = kind;
          c.dt = std::vector<tideDataType_t>{tideFloat32, tideInt8, tideFloat64,
                                             tideBfloat16}[(n + i) % 4];
          c.op = static_cast<RedOp>((n + i) % 4);
          c.count = counts[i];
          c.inPlace = (i + n) % 2 == 1;
          c.root = static_cast<int>((i * 3 + 1) % n);
          c.nblocks = 1 + static_cast<int>((n + i) % 4);
          ASSERT_EQ(runColl(node, c, n * 100 + i + kind * 10000, &calls), 0);
          ++cases;
        }
      }
    }
  }
  EXPECT_EQ(cases, kMaxRanks * 2 * 3 * 6);
}

TEST(DeviceCollLogic, ReduceScatterEveryDtypeAndOp) {
  int cases = 0;
  for (int t = 0; t < tideNumTypes; ++t) {
    for (int o = 0; o < 4; ++o) {
      for (int n : {2, 3, 5, 8}) {
        Node node(n, 1536);  // 333 elements need several chunks for most sizes
        uint64_t calls = 0;
        CollSpec c;
        c.kind = kReduceScatter;
        c.dt = static_cast<tideDataType_t>(t);
        c.op = static_cast<RedOp>(o);
        c.count = 333;
        c.inPlace = (t + o) % 2 == 0;
        c.nblocks = 1 + (t + n) % 3;
        ASSERT_EQ(runColl(node, c, t * 1000 + o * 10 + n, &calls), 0);
        ++cases;
      }
    }
  }
  EXPECT_EQ(cases, tideNumTypes * 4 * 4);
}

// A captured graph replays the same kernel parameters; the device counter
// alone moves the flags and the area parity on.
TEST(DeviceCollLogic, NewKindsSurviveReplays) {
  for (int kind : {kAllGather, kReduceScatter, kBroadcast}) {
    for (int n : {2, 3, 8}) {
      for (bool inPlace : {false, true}) {
        Node node(n, 2048);
        uint64_t calls = 0;
        CollSpec c;
        c.kind = kind;
        c.dt = tideInt32;
        c.count = 1111;  // several chunks per replay
        c.inPlace = inPlace;
        c.root = n - 1;
        c.nblocks = 3;
        c.replays = 4;
        ASSERT_EQ(runColl(node, c, kind * 100 + n, &calls), 0);
      }
    }
  }
}

// All kinds interleaved on one engine (one call counter, one pair of areas,
// one set of flag slots): All-Reduce one-shot and two-shot, scratch and
// direct, between AG / RS / Broadcast calls of varying sizes, part counts
// and roots, some chunked, some replayed.
TEST(DeviceCollLogic, MixedSequenceOnOneEngine) {
  for (int n : {2, 3, 4, 7, 8}) {
    Node node(n, 4096);
    uint64_t calls = 0;
    std::mt19937_64 rng(n);
    for (int i = 0; i < 40; ++i) {
      CollSpec c;
      c.kind = i % 4;
      c.dt = std::vector<tideDataType_t>{tideFloat32, tideUint8, tideFloat16, tideInt64}[rng() % 4];
      c.op = static_cast<RedOp>(rng() % 4);
      c.count = std::vector<uint64_t>{0, 1, 5, 129, 700, 3001}[rng() % 6];
      if (c.kind == kAllReduce) c.count = std::min<uint64_t>(c.count, 4096 / dtypeSize(c.dt));
      c.inPlace = rng() % 2 == 0;
      c.root = static_cast<int>(rng() % n);
      c.twoShot = rng() % 2 == 0;
      c.direct = rng() % 2 == 0;
      c.nblocks = 1 + static_cast<int>(rng() % 5);
      c.replays = 1 + static_cast<int>(rng() % 2);
      ASSERT_EQ(runColl(node, c, n * 1000 + i, &calls), 0) << "call " << i;
    }
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(reinterpret_cast<uint64_t*>(node.base(r))[kExitWord], 0u);
    }
  }
}

// A missing peer: every new kind's waits end with a timeout code naming it
// (phase 0); abort ends them at once.
TEST(DeviceCollLogic, NewKindsTimeOutAndAbortOnAMissingPeer) {
  const ReduceFn fn = kernelsFor(MemType::Host)->reduceFn(tideFloat32, RedOp::Sum);
  for (int kind : {kAllGather, kReduceScatter, kBroadcast}) {
    Node node(3, 4096);
    std::vector<float> in(3 * 64, 1.0f), out0(3 * 64), out1(3 * 64);
    const uint64_t timeout = 50'000'000;  // 50 ms
    auto argsOf = [&](int r, float* out, uint64_t t) {
      Args a = node.args(r, in.data(), 64, 4, 2, reinterpret_cast<char*>(out), t);
      a.kind = kind;
      a.stride = 64;
      a.root = 2;  // the missing rank
      return a;
    };
    const auto t0 = std::chrono::steady_clock::now();
    uint32_t c1 = 0;
    std::thread t([&] { c1 = runRank(false, argsOf(1, out1.data(), timeout), fn); });
    const uint32_t c0 = runRank(false, argsOf(0, out0.data(), timeout), fn);
    t.join();
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0)
        << kindName(kind) << ": a wait was not bounded";
    for (uint32_t c : {c0, c1}) {
      EXPECT_EQ(errorKind(c), kErrTimeout) << kindName(kind);
      EXPECT_EQ(errorPhase(c), 0);
      EXPECT_EQ(errorPeer(c), 2);
    }
    EXPECT_EQ(node.errorWord[0], c0);
    EXPECT_EQ(node.errorWord[2], 0u);

    // Abort: rank 1 alone with a 20 s bound.
    Node lone(3, 4096);
    std::thread aborter([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      std::atomic_ref<uint32_t>(lone.abortWord).store(1, std::memory_order_release);
    });
    const auto t1 = std::chrono::steady_clock::now();
    Args a = lone.args(1, in.data(), 64, 4, 3, reinterpret_cast<char*>(out1.data()), kLongNs);
    a.kind = kind;
    a.stride = 64;
    const uint32_t c = runRank(false, a, fn);
    aborter.join();
    EXPECT_EQ(errorKind(c), kErrAborted) << kindName(kind);
    EXPECT_EQ(lone.errorWord[1], c);
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count(), 2.0);
  }
}

TEST(DeviceCollLogic, ChunksFitTheArea) {
  for (int n = 1; n <= kMaxRanks; ++n) {
    for (uint64_t area : {4096ull, 4352ull, 1ull << 20}) {
      for (int es : {1, 2, 4, 8}) {
        for (int kind : {kAllReduce, kAllGather, kReduceScatter, kBroadcast}) {
          const uint64_t m = chunkElems(kind, area, es, n);
          ASSERT_GT(m, 0u);
          ASSERT_LE(areaNeed(kind, m, es, n), area) << kind << " " << n << " " << es;
          if (kind == kReduceScatter) {
            ASSERT_EQ(m * es % 16, 0u);
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace tide::cuda::dc::hostnode
