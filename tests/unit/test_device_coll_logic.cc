// The device All-Reduce engine's algorithm logic (src/cuda/device_coll_logic.h)
// on the CPU: the very step functions the CUDA kernels run, with one
// std::thread per rank, host memory for the scratch areas, std::atomic_ref
// for the flags and the host reduction kernels for the element math
// (device_coll_node.h). Checked bit for bit against a serial fold in rank
// order: every dtype x op, n = 1..8, one-shot and two-shot, scratch and
// direct mode, odd and zero counts, in place and out of place, the two input
// areas reused over several calls; then the slice arithmetic, and the
// timeout and abort paths (error word contents, bounded return).
// AllGather / ReduceScatter / Broadcast, and a mixed sequence of all four
// kinds on one engine: test_device_coll_kinds.cc.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
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

// Several collective calls on one node (areas reused by parity); each call's
// Args are built once and run `replays` times, as a captured CUDA graph
// replays the same kernel parameters (the inputs change between replays);
// returns the number of wrong results.
int runCase(tideDataType_t dt, RedOp op, int n, bool twoShot, bool direct, uint64_t seed,
            int replays = 1) {
  const KernelTable* host = kernelsFor(MemType::Host);
  const ReduceFn fn = host->reduceFn(dt, op);
  const int es = static_cast<int>(dtypeSize(dt));
  const std::vector<uint64_t> counts = {1, 37, 0, 1001, 7, 4099};
  Node node(n, 4099 * es);
  int wrong = 0;
  uint64_t calls = 0;
  for (size_t c = 0; c < counts.size(); ++c) {
    const uint64_t count = counts[c];
    const bool inPlace = (c % 2) == 1;
    const int nblocks = 1 + static_cast<int>((seed + c) % 3);
    std::vector<std::vector<uint8_t>> in(n, std::vector<uint8_t>(count * es));
    std::vector<std::vector<uint8_t>> out(n, std::vector<uint8_t>(count * es + 1));
    // Direct mode reads the user buffers, except one-shot in place; for in
    // place the output is the input buffer itself.
    std::vector<Args> args;
    for (int r = 0; r < n; ++r) {
      char* outBuf = reinterpret_cast<char*>(inPlace ? in[r].data() : out[r].data());
      Args a = node.args(r, in[r].data(), count, es, nblocks, outBuf, kLongNs);
      a.direct = direct ? 1 : 0;
      a.copyIn = (!direct || (inPlace && !twoShot)) ? 1 : 0;
      args.push_back(a);
    }
    for (int rep = 0; rep < replays; ++rep) {
      for (int r = 0; r < n; ++r) fillRandom(&in[r], seed * 131 + c * 17 + r + rep * 7919);
      std::vector<uint8_t> want = in[0];
      for (int r = 1; r < n; ++r) fn(want.data(), want.data(), in[r].data(), count);
      std::vector<std::thread> threads;
      std::vector<uint32_t> codes(n, 0);
      for (int r = 0; r < n; ++r) {
        threads.emplace_back(
            [&codes, r, a = args[r], fn, twoShot] { codes[r] = runRank(twoShot, a, fn); });
      }
      for (auto& t : threads) t.join();
      ++calls;
      for (int r = 0; r < n; ++r) {
        const uint8_t* got = inPlace ? in[r].data() : out[r].data();
        if (codes[r] != 0 || !sameResult(dt, got, want.data(), count) || node.counter(r) != calls) {
          ++wrong;
          ADD_FAILURE() << dtypeName(dt) << " op " << static_cast<int>(op) << " n " << n
                        << (twoShot ? " two-shot" : " one-shot") << (direct ? " direct" : "")
                        << " count " << count << (inPlace ? " in place" : "") << " rank " << r
                        << " replay " << rep << " code " << codes[r] << " counter "
                        << node.counter(r) << " (want " << calls << ")";
        }
      }
    }
  }
  return wrong;
}

TEST(DeviceCollLogic, EveryDtypeOpRanksAndAlgorithm) {
  ASSERT_NE(kernelsFor(MemType::Host), nullptr);
  int cases = 0;
  for (int t = 0; t < tideNumTypes; ++t) {
    for (int o = 0; o < 4; ++o) {
      for (int n = 1; n <= kMaxRanks; ++n) {
        for (int mode = 0; mode < 4; ++mode) {
          const bool two = (mode & 1) != 0;
          const bool direct = (mode & 2) != 0;
          const uint64_t seed = static_cast<uint64_t>(((t * 4 + o) * 9 + n) * 4 + mode);
          ASSERT_EQ(
              runCase(static_cast<tideDataType_t>(t), static_cast<RedOp>(o), n, two, direct, seed),
              0);
          ++cases;
        }
      }
    }
  }
  EXPECT_EQ(cases, tideNumTypes * 4 * kMaxRanks * 4);
}

// Graph replays: the same kernel parameters run again and again, with no
// host-side sequence number; the device counter picks the flag values and
// the input area's parity, so results stay right across many replays.
TEST(DeviceCollLogic, ReplaysOfTheSameArgsAdvanceTheCounter) {
  int cases = 0;
  for (int n : {2, 3, 4, 8}) {
    for (int mode = 0; mode < 4; ++mode) {
      const bool two = (mode & 1) != 0;
      const bool direct = (mode & 2) != 0;
      const tideDataType_t dt = n == 3 ? tideInt32 : tideFloat32;
      ASSERT_EQ(runCase(dt, RedOp::Sum, n, two, direct, 1000 + n * 4 + mode, 5), 0);
      ++cases;
    }
  }
  EXPECT_EQ(cases, 16);
}

// The exit count returns to zero after every call, and the counter ends at
// the number of calls whatever the number of parts.
TEST(DeviceCollLogic, CounterWordsAfterCalls) {
  const ReduceFn fn = kernelsFor(MemType::Host)->reduceFn(tideFloat32, RedOp::Sum);
  Node node(2, 4096);
  std::vector<float> in0(300, 1.0f), in1(300, 2.0f), out0(300), out1(300);
  for (int call = 1; call <= 4; ++call) {
    const int nb = call;  // 1..4 parts
    uint32_t c1 = 0;
    std::thread t([&] {
      c1 = runRank(
          call % 2 == 0,
          node.args(1, in1.data(), 300, 4, nb, reinterpret_cast<char*>(out1.data()), kLongNs), fn);
    });
    const uint32_t c0 = runRank(
        call % 2 == 0,
        node.args(0, in0.data(), 300, 4, nb, reinterpret_cast<char*>(out0.data()), kLongNs), fn);
    t.join();
    ASSERT_EQ(c0, 0u);
    ASSERT_EQ(c1, 0u);
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(node.counter(r), static_cast<uint64_t>(call));
      EXPECT_EQ(reinterpret_cast<uint64_t*>(node.base(r))[kExitWord], 0u);
    }
    EXPECT_EQ(out0[299], 3.0f);
    EXPECT_EQ(out1[0], 3.0f);
  }
}

TEST(DeviceCollLogic, SlicesTileTheRangeAligned) {
  std::mt19937_64 rng(7);
  for (int iter = 0; iter < 20000; ++iter) {
    const uint64_t count = rng() % 5000;
    const int n = 1 + static_cast<int>(rng() % kMaxRanks);
    const int nb = 1 + static_cast<int>(rng() % kMaxBlocks);
    const int es = std::vector<int>{1, 2, 4, 8}[rng() % 4];
    const uint64_t unit = unitOf(es);
    uint64_t next = 0;
    for (int p = 0; p < n; ++p) {
      const Range s = sliceOf(count, n, p, unit);
      ASSERT_LE(s.lo, s.hi);
      ASSERT_EQ(s.lo, next) << "slices must tile [0, count)";
      for (int b = 0; b < nb; ++b) {
        const Range r = pieceOf(s, nb, b, unit);
        ASSERT_EQ(r.lo, next);
        ASSERT_LE(r.hi, s.hi);
        if (r.hi > r.lo) {
          ASSERT_EQ(r.lo * es % 16, 0u) << "part start not 16-byte aligned";
        }
        next = r.hi;
      }
      ASSERT_EQ(next, s.hi);
    }
    ASSERT_EQ(next, count);
  }
}

TEST(DeviceCollLogic, MissingPeerTimesOutWithCode) {
  const KernelTable* host = kernelsFor(MemType::Host);
  const ReduceFn fn = host->reduceFn(tideFloat32, RedOp::Sum);
  for (bool two : {false, true}) {
    // Rank 2 of 3 never runs: ranks 0 and 1 must give up in phase 0.
    Node node(3, 1024);
    std::vector<float> out0(64), out1(64), in(64, 1.0f);
    const uint64_t timeout = 50'000'000;  // 50 ms
    const auto t0 = std::chrono::steady_clock::now();
    uint32_t c0 = 0, c1 = 0;
    std::thread t([&] {
      c1 = runRank(two,
                   node.args(1, in.data(), 64, 4, 2, reinterpret_cast<char*>(out1.data()), timeout),
                   fn);
    });
    c0 = runRank(
        two, node.args(0, in.data(), 64, 4, 2, reinterpret_cast<char*>(out0.data()), timeout), fn);
    t.join();
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(secs, 5.0) << "a wait was not bounded";
    for (uint32_t c : {c0, c1}) {
      EXPECT_EQ(errorKind(c), kErrTimeout);
      EXPECT_EQ(errorPhase(c), 0);
      EXPECT_EQ(errorPeer(c), 2);
      EXPECT_EQ(errorPart(c), 0);
    }
    EXPECT_EQ(node.errorWord[0], c0);
    EXPECT_EQ(node.errorWord[1], c1);
    EXPECT_EQ(node.errorWord[2], 0u);
  }
}

TEST(DeviceCollLogic, TwoShotPeerStuckAfterInputTimesOutInPhaseOne) {
  const ReduceFn fn = kernelsFor(MemType::Host)->reduceFn(tideInt32, RedOp::Max);
  Node node(3, 1024);
  std::vector<int32_t> out0(100), out1(100), in(100, 3);
  const uint64_t timeout = 50'000'000;
  // Rank 2 signals "input ready" for its only part, then stops.
  std::vector<uint8_t> tmp;
  HostPlatform p2{{}, fn, 4, &tmp};
  std::vector<int32_t> out2(100);
  signalPeers(
      p2,
      bindCall(node.args(2, in.data(), 100, 4, 1, reinterpret_cast<char*>(out2.data()), timeout),
               1),
      0, 0);
  uint32_t c1 = 0;
  std::thread t([&] {
    c1 = runRank(true,
                 node.args(1, in.data(), 100, 4, 1, reinterpret_cast<char*>(out1.data()), timeout),
                 fn);
  });
  const uint32_t c0 = runRank(
      true, node.args(0, in.data(), 100, 4, 1, reinterpret_cast<char*>(out0.data()), timeout), fn);
  t.join();
  for (uint32_t c : {c0, c1}) {
    EXPECT_EQ(errorKind(c), kErrTimeout);
    EXPECT_EQ(errorPhase(c), 1);
    EXPECT_EQ(errorPeer(c), 2);
  }
}

TEST(DeviceCollLogic, AbortWordStopsWaitsAtOnce) {
  const ReduceFn fn = kernelsFor(MemType::Host)->reduceFn(tideFloat64, RedOp::Min);
  Node node(4, 4096);
  std::vector<double> out(8), in(8, 1.0);
  std::atomic_ref<uint32_t>(node.abortWord).store(0);
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::atomic_ref<uint32_t>(node.abortWord).store(1, std::memory_order_release);
  });
  const auto t0 = std::chrono::steady_clock::now();
  // Rank 1 alone, peers absent, 20 s timeout: only the abort can end it.
  const uint32_t c = runRank(
      false, node.args(1, in.data(), 8, 8, 3, reinterpret_cast<char*>(out.data()), kLongNs), fn);
  aborter.join();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(errorKind(c), kErrAborted);
  EXPECT_EQ(errorPhase(c), 0);
  EXPECT_EQ(node.errorWord[1], c);
  EXPECT_LT(secs, 2.0);
}

TEST(DeviceCollLogic, ErrorCodeRoundTrips) {
  const uint32_t c = encodeError(kErrTimeout, 1, 7, 63);
  EXPECT_EQ(errorKind(c), kErrTimeout);
  EXPECT_EQ(errorPhase(c), 1);
  EXPECT_EQ(errorPeer(c), 7);
  EXPECT_EQ(errorPart(c), 63);
}

}  // namespace
}  // namespace tide::cuda::dc::hostnode
