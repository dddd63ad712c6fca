// Mixed launch modes: every rank issues the same sequence of collectives
// (All-Reduce, Broadcast, Reduce, AllGather, ReduceScatter, AlltoAll at 8 B,
// 4 KiB, 64 KiB and 1 MiB, twice over), but chooses for each call from its
// own seeded random sequence whether to issue it on the NULL stream
// (blocking), on one of two host streams, or inside a group of one to three
// calls whose operations again pick the NULL stream or a stream. Whatever
// mix the ranks draw, every call completes (no timeout) and every result is
// exact. Ranks run as processes (this executable re-runs itself with
// --worker=mixed); TIDE_MIXED_SEED varies the draws between runs.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "rank_harness.h"

namespace tide_test {
namespace {

enum Coll { kAllReduce, kBroadcast, kReduce, kAllGather, kReduceScatter, kAlltoAll, kNumColls };
const char* const kCollNames[] = {"allreduce", "broadcast",     "reduce",
                                  "allgather", "reducescatter", "alltoall"};

struct Call {
  Coll coll;
  size_t count;  // the collective's count argument
  int root;
  std::vector<float> send, recv;
};

// Rank r's input element k of call i: small integers, so float sums are exact.
float Input(int r, int i, size_t k) { return static_cast<float>((r + 1) + (i * 7 + k) % 13); }

size_t SendLen(const Call& c, int n) {
  return (c.coll == kReduceScatter || c.coll == kAlltoAll) ? c.count * n : c.count;
}
size_t RecvLen(const Call& c, int n) {
  return (c.coll == kAllGather || c.coll == kAlltoAll) ? c.count * n : c.count;
}

tideResult_t Issue(Call& c, tideComm_t comm, tideStream_t s) {
  const float* sb = c.send.data();
  float* rb = c.recv.data();
  switch (c.coll) {
    case kAllReduce:
      return tideAllReduce(sb, rb, c.count, tideFloat32, tideSum, comm, s);
    case kBroadcast:
      return tideBroadcast(sb, rb, c.count, tideFloat32, c.root, comm, s);
    case kReduce:
      return tideReduce(sb, rb, c.count, tideFloat32, tideSum, c.root, comm, s);
    case kAllGather:
      return tideAllGather(sb, rb, c.count, tideFloat32, comm, s);
    case kReduceScatter:
      return tideReduceScatter(sb, rb, c.count, tideFloat32, tideSum, comm, s);
    default:
      return tideAlltoAll(sb, rb, c.count, tideFloat32, comm, s);
  }
}

// Expected element j of call i's output on rank me (NaN: not written).
bool Check(const Call& c, int i, int me, int n, std::string* why) {
  auto sum = [&](size_t k) {
    float t = 0;
    for (int r = 0; r < n; ++r) t += Input(r, i, k);
    return t;
  };
  for (size_t j = 0; j < RecvLen(c, n); ++j) {
    float want;
    switch (c.coll) {
      case kAllReduce:
        want = sum(j);
        break;
      case kBroadcast:
        want = Input(c.root, i, j);
        break;
      case kReduce:
        if (me != c.root) return true;
        want = sum(j);
        break;
      case kAllGather:
        want = Input(static_cast<int>(j / c.count), i, j % c.count);
        break;
      case kReduceScatter:
        want = sum(me * c.count + j);
        break;
      default:
        want = Input(static_cast<int>(j / c.count), i, me * c.count + j % c.count);
        break;
    }
    if (c.recv[j] != want) {
      char buf[200];
      snprintf(buf, sizeof(buf), "call %d (%s, count %zu, root %d): element %zu is %g, want %g", i,
               kCollNames[c.coll], c.count, c.root, j, c.recv[j], want);
      *why = buf;
      return false;
    }
  }
  return true;
}

int MixedRoutes(ThreadRank& ctx) {
  const int me = ctx.rank, n = ctx.nranks;
  const char* seedEnv = getenv("TIDE_MIXED_SEED");
  const unsigned base = seedEnv != nullptr ? static_cast<unsigned>(strtoul(seedEnv, nullptr, 0))
                                           : static_cast<unsigned>(std::random_device{}());
  std::mt19937 rng(base * 7919u + static_cast<unsigned>(me));
  ctx.Logf("rank %d: seed %u\n", me, base);

  const size_t kBytes[] = {8, 4096, 65536, 1 << 20};
  std::vector<Call> calls;
  for (int round = 0; round < 2; ++round) {
    for (size_t bytes : kBytes) {
      for (int k = 0; k < kNumColls; ++k) {
        Call c;
        c.coll = static_cast<Coll>(k);
        c.count = bytes / sizeof(float);
        c.root = static_cast<int>(calls.size()) % n;
        calls.push_back(std::move(c));
      }
    }
  }
  for (size_t i = 0; i < calls.size(); ++i) {
    Call& c = calls[i];
    c.send.resize(SendLen(c, n));
    for (size_t k = 0; k < c.send.size(); ++k) c.send[k] = Input(me, static_cast<int>(i), k);
    c.recv.assign(RecvLen(c, n), -1.0f);
  }

  tideStream_t streams[2] = {nullptr, nullptr};
  for (tideStream_t& s : streams) CHECK_RC(tideStreamCreate(&s));
  std::string modes;
  for (size_t i = 0; i < calls.size();) {
    const int mode = static_cast<int>(rng() % 3);
    if (mode == 0) {  // blocking
      modes += 'N';
      CHECK_RC(Issue(calls[i++], ctx.comm, nullptr));
    } else if (mode == 1) {  // a host stream
      const int s = static_cast<int>(rng() % 2);
      modes += static_cast<char>('1' + s);
      CHECK_RC(Issue(calls[i++], ctx.comm, streams[s]));
    } else {  // a group of 1-3 calls, each on the NULL stream or a stream
      const size_t len = std::min<size_t>(1 + rng() % 3, calls.size() - i);
      modes += '(';
      CHECK_RC(tideGroupStart());
      for (size_t k = 0; k < len; ++k) {
        const int s = static_cast<int>(rng() % 3);
        modes += s == 0 ? 'N' : static_cast<char>('0' + s);
        tideResult_t rc = Issue(calls[i++], ctx.comm, s == 0 ? nullptr : streams[s - 1]);
        if (rc != tideSuccess) {
          tideGroupEnd();
          CHECK_RC(rc);
        }
      }
      CHECK_RC(tideGroupEnd());
      modes += ')';
    }
  }
  for (tideStream_t s : streams) CHECK_RC(tideStreamSynchronize(s));
  ctx.Logf("rank %d: modes %s\n", me, modes.c_str());
  int code = 0;
  for (size_t i = 0; i < calls.size(); ++i) {
    std::string why;
    if (!Check(calls[i], static_cast<int>(i), me, n, &why)) {
      ctx.Logf("rank %d: %s\n", me, why.c_str());
      code = 1;
      break;
    }
  }
  for (tideStream_t s : streams) CHECK_RC(tideStreamDestroy(s));
  return code;
}

void RunMixed(int nranks, bool tcp) {
  ProcessRunOptions o;
  o.exe = SelfExe();
  o.args = {"--worker=mixed"};
  o.nranks = nranks;
  o.timeout_ms = 120000;
  o.env.emplace_back("TIDE_TIMEOUT", "30");
  if (tcp) o.env.emplace_back("TIDE_SHM_DISABLE", "1");
  // One seed for the run (each rank derives its own draws from it).
  if (getenv("TIDE_MIXED_SEED") == nullptr) {
    o.env.emplace_back("TIDE_MIXED_SEED", std::to_string(std::random_device{}()));
  }
  RunResult r = RunProcesses(o);
  EXPECT_TRUE(r.AllOk()) << r.Describe();
  for (const auto& rr : r.ranks) printf("%s", rr.output.c_str());
}

TEST(MixedRoutes, Shm2) { RunMixed(2, false); }
TEST(MixedRoutes, Shm3) { RunMixed(3, false); }
TEST(MixedRoutes, Shm4) { RunMixed(4, false); }
TEST(MixedRoutes, Tcp2) { RunMixed(2, true); }
TEST(MixedRoutes, Tcp3) { RunMixed(3, true); }
TEST(MixedRoutes, Tcp4) { RunMixed(4, true); }

}  // namespace
}  // namespace tide_test

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "--worker=mixed") == 0) {
    return tide_test::RunEnvRank(tide_test::MixedRoutes);
  }
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
