// The device All-Reduce engine's algorithm logic (src/cuda/device_coll_logic.h)
// on the CPU: the very step functions the CUDA kernels run, with one
// std::thread per rank, host memory for the scratch areas, std::atomic_ref
// for the flags and the host reduction kernels for the element math. Checked
// bit for bit against a serial fold in rank order: every dtype x op, n = 1..8,
// one-shot and two-shot, scratch and direct mode, odd and zero counts, in
// place and out of place, the two input areas reused over several calls; then the slice arithmetic,
// and the timeout and abort paths (error word contents, bounded return).
// Then AllGather / ReduceScatter / Broadcast the same way (1..8 ranks, odd and
// zero counts, chunked, in place, replays, every dtype x op for RS) and a
// mixed sequence of all four kinds on one engine.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "../gpu/nan_elem.h"
#include "core/kernels.h"
#include "core/registry.h"
#include "core/types.h"
#include "cuda/device_coll.h"
#include "cuda/device_coll_logic.h"
#include "device_logic_host.h"

namespace tide::cuda::dc {
namespace {

// One part of one rank on the CPU: a single "thread" per block.
struct HostPlatform : testhost::HostWaits {
  ReduceFn fn;
  int elemSize;
  std::vector<uint8_t>* tmp;

  uint64_t exitAdd(uint64_t* w) const {
    return std::atomic_ref<uint64_t>(*w).fetch_add(1, std::memory_order_acq_rel);
  }
  void reduce(char* out, char* out2, char* const* ins, int n, Range r) const {
    const size_t len = r.hi - r.lo;
    const size_t off = r.lo * elemSize;
    if (len == 0) return;  // empty slice: buffers may be null
    tmp->resize(len * elemSize);
    memcpy(tmp->data(), ins[0] + off, len * elemSize);
    for (int k = 1; k < n; ++k) fn(tmp->data(), tmp->data(), ins[k] + off, len);
    memcpy(out + off, tmp->data(), len * elemSize);
    if (out2 != nullptr) memcpy(out2 + off, tmp->data(), len * elemSize);
  }
  void copy(char* dst, const char* src, Range r) const {
    if (r.hi == r.lo) return;
    memcpy(dst + r.lo * elemSize, src + r.lo * elemSize, (r.hi - r.lo) * elemSize);
  }
};

// The node: every rank's scratch (flag area + two input areas) in host memory.
struct Node {
  int n;
  size_t areaBytes;
  std::vector<std::vector<uint64_t>> scratch;  // 8-byte aligned storage
  uint32_t abortWord = 0;
  std::vector<uint32_t> errorWord;

  Node(int ranks, size_t area) : n(ranks), areaBytes((area + 15) / 16 * 16), errorWord(ranks, 0) {
    for (int r = 0; r < n; ++r) scratch.emplace_back(scratchBytes(areaBytes) / 8 + 2, 0);
  }
  char* base(int r) { return reinterpret_cast<char*>(scratch[r].data()); }
  // Calls rank r completed (its device-side counter).
  uint64_t counter(int r) { return reinterpret_cast<uint64_t*>(base(r))[kSeqWord]; }
  // What the host side passes to a kernel: nothing depends on the call's
  // sequence number (scratch mode: the kernel copies `input` in).
  Args args(int rank, const void* input, uint64_t count, int elemSize, int nblocks, char* out,
            uint64_t timeoutNs) {
    Args a{};
    a.rank = rank;
    a.nranks = n;
    a.nblocks = nblocks;
    a.elemSize = elemSize;
    a.count = count;
    a.timeoutNs = timeoutNs;
    a.copyIn = 1;
    a.areaBytes = areaBytes;
    a.input = static_cast<const char*>(input);
    for (int q = 0; q < n; ++q) a.base[q] = base(q);
    a.out = out;
    a.abortWord = &abortWord;
    a.errorWord = &errorWord[rank];
    return a;
  }
};

constexpr uint64_t kLongNs = 20'000'000'000ull;  // 20 s: never hit by a healthy run

// Runs the parts of one rank in order (the same order on every rank), each
// from counter read to counter advance, as the kernel's blocks do.
uint32_t runRank(bool twoShot, const Args& a, ReduceFn fn) {
  std::vector<uint8_t> tmp;
  HostPlatform p{{}, fn, a.elemSize, &tmp};
  uint32_t first = 0;
  for (int b = 0; b < a.nblocks; ++b) {
    const uint32_t code = runPart(p, a, b, twoShot);
    if (first == 0) first = code;
  }
  return first;
}

// Byte-equal, except that a NaN matches any NaN: random inputs hold NaNs, and
// the host kernels' vector and scalar paths (which one runs depends on where a
// slice starts and how the library was compiled) may return different NaN
// payloads.
bool sameResult(tideDataType_t dt, const uint8_t* got, const uint8_t* want, uint64_t count) {
  const size_t es = dtypeSize(dt);
  for (uint64_t i = 0; i < count; ++i) {
    const uint8_t* g = got + i * es;
    const uint8_t* w = want + i * es;
    if (memcmp(g, w, es) == 0) continue;
    if (tide_test::isNan(g, dt) && tide_test::isNan(w, dt)) continue;
    return false;
  }
  return true;
}

void fillRandom(std::vector<uint8_t>* v, uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (auto& x : *v) x = static_cast<uint8_t>(rng());
}

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

// ---- AllGather / ReduceScatter / Broadcast (and All-Reduce in a mix) ----

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
}  // namespace tide::cuda::dc
