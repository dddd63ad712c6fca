// The device ring All-Reduce's logic (src/cuda/device_ring_logic.h) on the
// CPU: the very step function the CUDA kernel runs, with one std::thread per
// rank (or per rank and part), host memory for the ring regions,
// std::atomic_ref for head/tail words and the host reduction kernels for the
// element math. Results are checked bit for bit against a serial fold in the
// chunk's ring order (and against the rank-order fold where that is the same
// order), and for equality across ranks: every dtype for Sum, every op (and
// Avg) for float32, 1..8 ranks, counts 0, 1, below the rank count, odd and
// far above K * S (the FIFO wraps many times), several parts, in place,
// replays of the same arguments, shuffled ring orders; then the counters,
// timeouts, abort and rejected arguments (the algorithm choice:
// test_device_algo_choice.cc).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "../gpu/nan_elem.h"
#include "core/kernels.h"
#include "core/registry.h"
#include "core/types.h"
#include "cuda/device_ring_logic.h"
#include "device_logic_host.h"

namespace tide::cuda::ring {
namespace {

// How the reduced value is finished: none, or Avg (Sum, then the host
// table's scale by 1/n for floats or truncating divide for integers).
struct Finish {
  bool avg = false;
  int n = 1;
  tideDataType_t dt = tideFloat32;
  void apply(char* p, uint64_t len) const {
    if (!avg || len == 0) return;
    const KernelTable* host = kernelsFor(MemType::Host);
    const bool isFloat = dt == tideFloat16 || dt == tideFloat32 || dt == tideFloat64 ||
                         dt == tideBfloat16 || dt == tideFloat8e4m3 || dt == tideFloat8e5m2;
    if (isFloat) {
      host->scale(p, p, len, dt, 1.0 / n);
    } else {
      host->divide(p, p, len, dt, static_cast<uint64_t>(n));
    }
  }
};

// One part of one rank on the CPU: a single "thread" per block.
struct HostPlatform : testhost::HostWaits {
  ReduceFn fn;
  int elemSize;
  Finish finish;
  std::vector<char>* tmp;

  void combine(char* out, char* out2, const char* acc, const char* own, uint64_t len,
               bool last) const {
    if (len == 0) return;
    const size_t bytes = len * elemSize;
    tmp->resize(bytes);
    fn(tmp->data(), acc, own, len);
    if (last) finish.apply(tmp->data(), len);
    memcpy(out, tmp->data(), bytes);
    if (out2 != nullptr) memcpy(out2, tmp->data(), bytes);
  }
  void copy(char* out, char* out2, const char* src, uint64_t len) const {
    if (len == 0) return;
    memmove(out, src, len * elemSize);
    if (out2 != nullptr) memcpy(out2, src, len * elemSize);
  }
};

// A part run by `nthreads` threads, as a CUDA block: thread 0 waits and
// signals, share()/barrier() are block barriers, every thread moves the
// elements tid, tid + nthreads, ... (checks that the logic keeps all threads
// of a block in step and shares what only the leader knows).
struct BlockShared {
  explicit BlockShared(int threads) : bar(threads) {}
  std::barrier<> bar;
  uint64_t word = 0;
};

struct BlockPlatform : HostPlatform {
  BlockShared* blk;
  int tid;
  int nthreads;

  bool leader() const { return tid == 0; }
  uint64_t share(uint64_t v) const {
    if (tid == 0) blk->word = v;
    blk->bar.arrive_and_wait();
    const uint64_t r = blk->word;
    blk->bar.arrive_and_wait();
    return r;
  }
  void barrier() const { blk->bar.arrive_and_wait(); }
  void combine(char* out, char* out2, const char* acc, const char* own, uint64_t len,
               bool last) const {
    char e[16];
    for (uint64_t i = tid; i < len; i += nthreads) {
      const size_t off = i * elemSize;
      fn(e, acc + off, own + off, 1);
      if (last) finish.apply(e, 1);
      memcpy(out + off, e, elemSize);
      if (out2 != nullptr) memcpy(out2 + off, e, elemSize);
    }
  }
  void copy(char* out, char* out2, const char* src, uint64_t len) const {
    for (uint64_t i = tid; i < len; i += nthreads) {
      const size_t off = i * elemSize;
      memmove(out + off, src + off, elemSize);
      if (out2 != nullptr) memcpy(out2 + off, src + off, elemSize);
    }
  }
};

// The node: every rank's ring region in host memory (zeroed, as at creation).
struct Node {
  int n;
  uint32_t slots;
  uint32_t slotBytes;
  std::vector<std::vector<uint64_t>> region;
  uint32_t abortWord = 0;
  std::vector<uint32_t> errorWord;

  Node(int ranks, uint32_t k, uint32_t s) : n(ranks), slots(k), slotBytes(s), errorWord(ranks, 0) {
    for (int r = 0; r < n; ++r) region.emplace_back(ringRegionBytes(k, s) / 8, 0);
  }
  char* base(int r) { return reinterpret_cast<char*>(region[r].data()); }
  uint64_t word(int r, size_t w) {
    return std::atomic_ref<uint64_t>(region[r][w]).load(std::memory_order_acquire);
  }
  RingArgs args(int rank, const std::vector<int>& order, const void* input, void* out,
                uint64_t count, int elemSize, int nblocks, uint64_t timeoutNs) {
    RingArgs a{};
    a.rank = rank;
    a.nranks = n;
    a.nblocks = nblocks;
    a.elemSize = elemSize;
    a.count = count;
    a.timeoutNs = timeoutNs;
    a.slots = slots;
    a.slotBytes = slotBytes;
    for (int q = 0; q < n; ++q) {
      a.order[q] = order[q];
      a.base[q] = base(q);
    }
    a.input = static_cast<const char*>(input);
    a.out = static_cast<char*>(out);
    a.abortWord = &abortWord;
    a.errorWord = &errorWord[rank];
    return a;
  }
};

constexpr uint64_t kLongNs = 20'000'000'000ull;  // 20 s: never hit by a healthy run

// Runs all parts of one rank in order 0..nblocks-1 (as resident blocks would,
// one after another) and returns the first error code.
uint32_t runRankSerial(const RingArgs& a, const HostPlatform& proto) {
  std::vector<char> tmp;
  HostPlatform p = proto;
  p.tmp = &tmp;
  uint32_t first = 0;
  for (int b = 0; b < a.nblocks; ++b) {
    const uint32_t code = ringPart(p, a, b);
    if (first == 0) first = code;
  }
  return first;
}

// One call on every rank: a thread per rank (parts in order) or a thread per
// rank and part (parts concurrent). Returns each rank's first error code.
// blockThreads > 1: every part is a block of that many threads (concurrent).
std::vector<uint32_t> runCall(const std::vector<RingArgs>& args, const HostPlatform& proto,
                              bool threadPerPart, int blockThreads) {
  const int n = static_cast<int>(args.size());
  const int nb = args[0].nblocks;
  std::vector<uint32_t> codes(static_cast<size_t>(n) * nb, 0);
  std::vector<std::thread> threads;
  std::vector<std::unique_ptr<BlockShared>> blocks;
  for (int r = 0; r < n && blockThreads > 1; ++r) {
    for (int b = 0; b < nb; ++b) {
      blocks.push_back(std::make_unique<BlockShared>(blockThreads));
      BlockShared* blk = blocks.back().get();
      for (int t = 0; t < blockThreads; ++t) {
        threads.emplace_back([&codes, &args, &proto, blk, r, b, t, nb, blockThreads] {
          BlockPlatform p{proto, blk, t, blockThreads};
          const uint32_t code = ringPart(p, args[r], b);
          if (t == 0) codes[static_cast<size_t>(r) * nb + b] = code;
        });
      }
    }
  }
  for (int r = 0; r < n && blockThreads <= 1; ++r) {
    if (!threadPerPart) {
      threads.emplace_back([&codes, &args, &proto, r, nb] {
        codes[static_cast<size_t>(r) * nb] = runRankSerial(args[r], proto);
      });
      continue;
    }
    for (int b = 0; b < nb; ++b) {
      threads.emplace_back([&codes, &args, &proto, r, b, nb] {
        std::vector<char> tmp;
        HostPlatform p = proto;
        p.tmp = &tmp;
        codes[static_cast<size_t>(r) * nb + b] = ringPart(p, args[r], b);
      });
    }
  }
  for (auto& t : threads) t.join();
  std::vector<uint32_t> first(n, 0);
  for (int r = 0; r < n; ++r) {
    for (int b = 0; b < nb && first[r] == 0; ++b) first[r] = codes[static_cast<size_t>(r) * nb + b];
  }
  return first;
}

// The documented result: chunk c of each part folded in ring order from
// position c, then finished.
std::vector<char> reference(const std::vector<std::vector<char>>& in, const RingArgs& shape,
                            ReduceFn fn, const Finish& fin) {
  const int n = shape.nranks;
  const uint64_t es = static_cast<uint64_t>(shape.elemSize);
  std::vector<char> want(shape.count * es);
  if (n == 1) {
    if (!want.empty()) memcpy(want.data(), in[0].data(), want.size());
    return want;
  }
  for (int b = 0; b < shape.nblocks; ++b) {
    for (int c = 0; c < n; ++c) {
      const Range ch = ringChunk(shape, b, c);
      const uint64_t len = ch.hi - ch.lo;
      if (len == 0) continue;
      char* w = want.data() + ch.lo * es;
      memcpy(w, in[shape.order[c]].data() + ch.lo * es, len * es);
      for (int j = 1; j < n; ++j) fn(w, w, in[shape.order[(c + j) % n]].data() + ch.lo * es, len);
      fin.apply(w, len);
    }
  }
  return want;
}

// Byte-equal, except that a NaN matches any NaN: the host kernels' vector and
// scalar paths (which one runs depends on where a piece starts) may return
// different NaN payloads. (Ranks are compared with each other byte for byte.)
bool sameResult(tideDataType_t dt, const char* got, const char* want, uint64_t count) {
  const size_t es = dtypeSize(dt);
  for (uint64_t i = 0; i < count; ++i) {
    const auto* g = reinterpret_cast<const uint8_t*>(got + i * es);
    const auto* w = reinterpret_cast<const uint8_t*>(want + i * es);
    if (memcmp(g, w, es) == 0) continue;
    if (tide_test::isNan(g, dt) && tide_test::isNan(w, dt)) continue;
    return false;
  }
  return true;
}

std::vector<int> ringOrder(int n, uint64_t seed) {
  std::vector<int> order(n);
  for (int q = 0; q < n; ++q) order[q] = q;
  if (seed % 2 == 1) std::shuffle(order.begin(), order.end(), std::mt19937_64(seed));
  return order;
}

struct CaseSpec {
  tideDataType_t dt = tideFloat32;
  RedOp op = RedOp::Sum;
  bool avg = false;
  int n = 2;
  uint32_t slots = 2;
  uint32_t slotBytes = 64;
  uint64_t seed = 1;
  int replays = 1;
  int blockThreads = 1;  // > 1: parts run as blocks of that many threads
};

// Several calls on one node with the given shape; each call's arguments are
// built once and run `replays` times with fresh inputs (a captured graph
// replays the same parameters). Returns the number of wrong results.
int runCase(const CaseSpec& cs) {
  const KernelTable* host = kernelsFor(MemType::Host);
  const ReduceFn fn = host->reduceFn(cs.dt, cs.op);
  const int es = static_cast<int>(dtypeSize(cs.dt));
  const int n = cs.n;
  const uint64_t wrap = uint64_t{cs.slots} * cs.slotBytes / es * 5 + 7;  // > 5 * K * S bytes
  const std::vector<uint64_t> counts = {0,  1,    static_cast<uint64_t>(n > 1 ? n - 1 : 1),
                                        37, 1001, wrap};
  Node node(n, cs.slots, cs.slotBytes);
  const Finish fin{cs.avg, n, cs.dt};
  const HostPlatform proto{{}, fn, es, fin, nullptr};
  int wrong = 0;
  for (size_t c = 0; c < counts.size(); ++c) {
    const uint64_t count = counts[c];
    const bool inPlace = (c + cs.seed) % 2 == 1;
    const bool threadPerPart = (c + cs.seed) % 3 == 0;
    const int nblocks = 1 + static_cast<int>((cs.seed + c) % 4);
    const std::vector<int> order = ringOrder(n, cs.seed + c);
    std::vector<std::vector<char>> in(n, std::vector<char>(count * es + 16));
    std::vector<std::vector<char>> out(n, std::vector<char>(count * es + 16));
    std::vector<RingArgs> args;
    args.reserve(n);
    for (int r = 0; r < n; ++r) {
      args.push_back(node.args(r, order, in[r].data(), inPlace ? in[r].data() : out[r].data(),
                               count, es, nblocks, kLongNs));
    }
    for (int rep = 0; rep < cs.replays; ++rep) {
      std::mt19937_64 rng(cs.seed * 131 + c * 17 + rep * 7919);
      for (auto& v : in) {
        for (auto& x : v) x = static_cast<char>(rng());
      }
      const std::vector<char> want = reference(in, args[0], fn, fin);
      // Integer Sum is associative: the rank-order fold must agree too.
      std::vector<char> rankOrder;
      if (cs.op == RedOp::Sum && !cs.avg && es <= 8 && cs.dt != tideFloat16 &&
          cs.dt != tideFloat32 && cs.dt != tideFloat64 && cs.dt != tideBfloat16 &&
          cs.dt != tideFloat8e4m3 && cs.dt != tideFloat8e5m2) {
        rankOrder.assign(in[0].begin(), in[0].begin() + count * es);
        for (int r = 1; r < n; ++r) fn(rankOrder.data(), rankOrder.data(), in[r].data(), count);
      }
      const std::vector<uint32_t> codes = runCall(args, proto, threadPerPart, cs.blockThreads);
      for (int r = 0; r < n; ++r) {
        const char* got = inPlace ? in[r].data() : out[r].data();
        const char* first = inPlace ? in[0].data() : out[0].data();
        const bool ok = codes[r] == 0 && sameResult(cs.dt, got, want.data(), count) &&
                        memcmp(got, first, count * es) == 0 &&
                        (rankOrder.empty() || memcmp(got, rankOrder.data(), count * es) == 0);
        if (!ok) {
          ++wrong;
          ADD_FAILURE() << dtypeName(cs.dt) << " op " << static_cast<int>(cs.op)
                        << (cs.avg ? " avg" : "") << " n " << n << " K " << cs.slots << " S "
                        << cs.slotBytes << " parts " << nblocks << " count " << count
                        << (inPlace ? " in place" : "") << " rank " << r << " replay " << rep
                        << " code " << codes[r];
        }
      }
      // Sender and receiver totals agree at the call boundary.
      for (int pos = 0; pos < n && n > 1; ++pos) {
        const int r = order[pos];
        const int nx = order[(pos + 1) % n];
        for (int b = 0; b < nblocks; ++b) {
          const uint64_t sent = node.word(r, sentWord(b));
          if (sent != node.word(nx, recvdWord(b)) || sent != node.word(nx, headWord(b)) ||
              sent != node.word(r, tailWord(b))) {
            ++wrong;
            ADD_FAILURE() << "counters of part " << b << " rank " << r << " -> " << nx;
          }
        }
      }
    }
  }
  return wrong;
}

TEST(DeviceRingLogic, EveryDtypeSumEveryRankCount) {
  ASSERT_NE(kernelsFor(MemType::Host), nullptr);
  int cases = 0;
  for (int t = 0; t < tideNumTypes; ++t) {
    for (int n = 1; n <= kMaxRanks; ++n) {
      CaseSpec cs;
      cs.dt = static_cast<tideDataType_t>(t);
      cs.n = n;
      cs.slots = 2 + static_cast<uint32_t>((t + n) % 3);
      cs.slotBytes = 16u << ((t * 3 + n) % 4);  // 16..128
      cs.seed = static_cast<uint64_t>(t) * 9 + static_cast<uint64_t>(n);
      ASSERT_EQ(runCase(cs), 0);
      ++cases;
    }
  }
  EXPECT_EQ(cases, tideNumTypes * kMaxRanks);
}

TEST(DeviceRingLogic, EveryOpAndAvgFloat32) {
  int cases = 0;
  for (int o = 0; o < 5; ++o) {
    for (int n = 1; n <= kMaxRanks; ++n) {
      CaseSpec cs;
      cs.op = o == 4 ? RedOp::Sum : static_cast<RedOp>(o);
      cs.avg = o == 4;
      cs.n = n;
      cs.slots = 2 + static_cast<uint32_t>(n % 3);
      cs.slotBytes = 32u << (o % 3);
      cs.seed = 100 + static_cast<uint64_t>(o) * 9 + static_cast<uint64_t>(n);
      ASSERT_EQ(runCase(cs), 0);
      ++cases;
    }
  }
  // Integer Avg truncates once, after the whole sum.
  CaseSpec cs;
  cs.dt = tideInt32;
  cs.avg = true;
  cs.n = 5;
  ASSERT_EQ(runCase(cs), 0);
  EXPECT_EQ(cases + 1, 5 * kMaxRanks + 1);
}

// Graph replays: the same RingArgs again and again; the FIFO totals in the
// ring regions carry the sequence, nothing comes from the host.
TEST(DeviceRingLogic, ReplaysOfTheSameArgs) {
  for (int n : {2, 3, 5, 8}) {
    CaseSpec cs;
    cs.dt = n == 3 ? tideBfloat16 : tideFloat32;
    cs.n = n;
    cs.slots = 2;
    cs.slotBytes = 48;
    cs.seed = 200 + n;
    cs.replays = 4;
    ASSERT_EQ(runCase(cs), 0) << n;
  }
}

// Parts as blocks of several threads (leader waits, block barriers, strided
// element work), as the kernel runs them.
TEST(DeviceRingLogic, PartsAsMultiThreadBlocks) {
  int cases = 0;
  for (int n : {2, 3, 5}) {
    for (int o = 0; o < 2; ++o) {
      CaseSpec cs;
      cs.dt = o == 0 ? tideFloat32 : tideBfloat16;
      cs.op = o == 0 ? RedOp::Sum : RedOp::Max;
      cs.n = n;
      cs.slots = 3;  // pieces per call are even: K = 3 shifts slots between calls
      cs.slotBytes = 32;
      cs.seed = 300 + static_cast<uint64_t>(n) * 2 + static_cast<uint64_t>(o);
      cs.replays = 2;
      cs.blockThreads = 3;
      ASSERT_EQ(runCase(cs), 0) << n << " " << o;
      ++cases;
    }
  }
  EXPECT_EQ(cases, 6);
}

TEST(DeviceRingLogic, ChunksTileEachPartAligned) {
  std::mt19937_64 rng(11);
  for (int iter = 0; iter < 5000; ++iter) {
    RingArgs a{};
    a.count = rng() % 5000;
    a.nranks = 1 + static_cast<int>(rng() % kMaxRanks);
    a.nblocks = 1 + static_cast<int>(rng() % kMaxBlocks);
    a.elemSize = std::vector<int>{1, 2, 4, 8}[rng() % 4];
    uint64_t next = 0;
    for (int b = 0; b < a.nblocks; ++b) {
      for (int c = 0; c < a.nranks; ++c) {
        const Range r = ringChunk(a, b, c);
        ASSERT_EQ(r.lo, next);
        ASSERT_LE(r.lo, r.hi);
        if (r.hi > r.lo) {
          ASSERT_EQ(r.lo * a.elemSize % 16, 0u);
        }
        next = r.hi;
      }
    }
    ASSERT_EQ(next, a.count);
  }
}

// Rank 2 of 3 never runs: rank 0 waits for its data, rank 1 for rank 0's
// next piece; both return in time with the peer they waited for.
TEST(DeviceRingLogic, MissingPeerTimesOutWithCode) {
  const ReduceFn fn = kernelsFor(MemType::Host)->reduceFn(tideFloat32, RedOp::Sum);
  Node node(3, 2, 16);
  const std::vector<int> order = {0, 1, 2};
  std::vector<float> in(64, 1.0f), out0(64), out1(64);
  const uint64_t timeout = 50'000'000;  // 50 ms
  const HostPlatform proto{{}, fn, 4, Finish{}, nullptr};
  const auto t0 = std::chrono::steady_clock::now();
  uint32_t c1 = 0;
  std::thread t([&] {
    c1 = runRankSerial(node.args(1, order, in.data(), out1.data(), 64, 4, 1, timeout), proto);
  });
  const uint32_t c0 =
      runRankSerial(node.args(0, order, in.data(), out0.data(), 64, 4, 1, timeout), proto);
  t.join();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(secs, 5.0) << "a wait was not bounded";
  EXPECT_EQ(dc::errorKind(c0), kErrTimeout);
  EXPECT_EQ(dc::errorPhase(c0), kRingPhaseData);
  EXPECT_EQ(dc::errorPeer(c0), 2);
  EXPECT_EQ(dc::errorKind(c1), kErrTimeout);
  EXPECT_EQ(dc::errorPhase(c1), kRingPhaseData);
  EXPECT_EQ(dc::errorPeer(c1), 0);
  EXPECT_EQ(node.errorWord[0], c0);
  EXPECT_EQ(node.errorWord[1], c1);
  EXPECT_EQ(node.errorWord[2], 0u);
}

// The next rank publishes pieces (head) but never consumes any (tail): rank
// 0 fills both slots, then times out waiting for room at rank 1.
TEST(DeviceRingLogic, StuckReceiverTimesOutWaitingForRoom) {
  const ReduceFn fn = kernelsFor(MemType::Host)->reduceFn(tideFloat32, RedOp::Sum);
  Node node(2, 2, 16);
  node.region[0][headWord(0)] = 1000;  // "rank 1 sent everything"
  std::vector<float> in(64, 1.0f), out(64);
  const uint32_t c =
      runRankSerial(node.args(0, {0, 1}, in.data(), out.data(), 64, 4, 1, 50'000'000),
                    HostPlatform{{}, fn, 4, Finish{}, nullptr});
  EXPECT_EQ(dc::errorKind(c), kErrTimeout);
  EXPECT_EQ(dc::errorPhase(c), kRingPhaseSpace);
  EXPECT_EQ(dc::errorPeer(c), 1);
  EXPECT_EQ(node.word(1, headWord(0)), 2u);  // exactly K pieces went out
}

TEST(DeviceRingLogic, AbortWordStopsWaitsAtOnce) {
  const ReduceFn fn = kernelsFor(MemType::Host)->reduceFn(tideFloat64, RedOp::Min);
  Node node(4, 2, 64);
  const std::vector<int> order = {3, 1, 0, 2};  // rank 1's previous is rank 3
  std::vector<double> in(100, 1.0), out(100);
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::atomic_ref<uint32_t>(node.abortWord).store(1, std::memory_order_release);
  });
  const auto t0 = std::chrono::steady_clock::now();
  // Rank 1 alone with a 20 s timeout: only the abort can end its wait.
  const uint32_t c = runRankSerial(node.args(1, order, in.data(), out.data(), 100, 8, 3, kLongNs),
                                   HostPlatform{{}, fn, 8, Finish{}, nullptr});
  aborter.join();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(dc::errorKind(c), kErrAborted);
  EXPECT_EQ(dc::errorPhase(c), kRingPhaseData);
  EXPECT_EQ(dc::errorPeer(c), 3);
  EXPECT_EQ(dc::errorPart(c), 0);
  EXPECT_EQ(node.errorWord[1], c);
  EXPECT_LT(secs, 2.0);
}

TEST(DeviceRingLogic, RejectsBadArgs) {
  const ReduceFn fn = kernelsFor(MemType::Host)->reduceFn(tideInt8, RedOp::Sum);
  Node node(3, 2, 64);
  std::vector<int8_t> in(10), out(10);
  const HostPlatform proto{{}, fn, 1, Finish{}, nullptr};
  auto codeOf = [&](RingArgs a) {
    node.errorWord[0] = 0;
    return runRankSerial(a, proto);
  };
  const RingArgs good = node.args(0, {2, 0, 1}, in.data(), out.data(), 10, 1, 1, 1000);
  EXPECT_TRUE(ringArgsValid(good));
  EXPECT_EQ(ringPos(good), 1);
  RingArgs a = good;
  a.order[2] = 0;  // not a permutation
  EXPECT_EQ(dc::errorKind(codeOf(a)), kErrBadArgs);
  EXPECT_EQ(node.errorWord[0], encodeError(kErrBadArgs, kRingPhaseArgs, 0, 0));
  a = good;
  a.slotBytes = 40;  // not a multiple of 16
  EXPECT_EQ(dc::errorKind(codeOf(a)), kErrBadArgs);
  a = good;
  a.slots = 1;  // K = 1 would deadlock
  EXPECT_EQ(dc::errorKind(codeOf(a)), kErrBadArgs);
  a = good;
  a.elemSize = 3;
  EXPECT_EQ(dc::errorKind(codeOf(a)), kErrBadArgs);
}

}  // namespace
}  // namespace tide::cuda::ring
