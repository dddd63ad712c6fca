// Small-collective lane (core/lane.h, transports/shm/lane.cc), through the
// public API with ranks as threads of this process and, for a dead peer, as
// forked processes: results of every lane collective against a direct
// computation (bit-identical across ranks), Avg, in-place calls, issue order
// behind host-stream work, mismatches, timeout, abort and a dead peer.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "core/registry.h"
#include "tide/tide.h"

namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Ranks whose body freed their communicator (tideCommAbort).
bool gFreed[8];

// Runs body(comm, rank, n) on n thread ranks of one fresh communicator.
void onRanks(int n, const std::function<void(tideComm_t, int, int)>& body) {
  tideUniqueId id;
  ASSERT_EQ(tideGetUniqueId(&id), tideSuccess);
  std::vector<tideComm_t> comms(static_cast<size_t>(n), nullptr);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] { EXPECT_EQ(tideCommInitRank(&comms[r], n, id, r), tideSuccess); });
  }
  for (auto& t : threads) t.join();
  threads.clear();
  for (int r = 0; r < n; ++r) ASSERT_NE(comms[r], nullptr);
  for (bool& f : gFreed) f = false;
  for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { body(comms[r], r, n); });
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    if (!gFreed[r]) tideCommDestroy(comms[r]);
  }
}

float input(int rank, size_t i) { return static_cast<float>((rank + 1) * 0.5 + (i % 97) * 0.25); }

TEST(Lane, Registered) { EXPECT_NE(tide::laneFactory(), nullptr); }

TEST(Lane, AllReduceSizesAndRanks) {
  for (int n : {2, 3, 4}) {
    std::vector<std::vector<float>> results(static_cast<size_t>(n));
    onRanks(n, [&](tideComm_t comm, int rank, int nranks) {
      for (size_t count : {1, 2, 7, 10, 11, 100, 1000, 4096, 16384}) {
        std::vector<float> in(count), out(count, -1.f);
        for (size_t i = 0; i < count; ++i) in[i] = input(rank, i);
        ASSERT_EQ(tideAllReduce(in.data(), out.data(), count, tideFloat32, tideSum, comm, nullptr),
                  tideSuccess);
        for (size_t i = 0; i < count; ++i) {
          float want = 0;
          for (int r = 0; r < nranks; ++r) want += input(r, i);
          ASSERT_EQ(out[i], want) << "n " << nranks << " count " << count << " i " << i;
        }
        // In place.
        ASSERT_EQ(tideAllReduce(in.data(), in.data(), count, tideFloat32, tideMax, comm, nullptr),
                  tideSuccess);
        for (size_t i = 0; i < count; ++i) ASSERT_EQ(in[i], input(nranks - 1, i));
        if (count == 1000) results[rank] = out;
      }
    });
    for (int r = 1; r < n; ++r) EXPECT_EQ(memcmp(results[r].data(), results[0].data(), 4000), 0);
  }
}

TEST(Lane, AvgMatchesDefinition) {
  onRanks(3, [](tideComm_t comm, int rank, int n) {
    std::vector<float> f(33), fo(33);
    std::vector<int32_t> v(33), vo(33);
    for (int i = 0; i < 33; ++i) {
      f[i] = input(rank, i);
      v[i] = rank * 10 + i;
    }
    ASSERT_EQ(tideAllReduce(f.data(), fo.data(), 33, tideFloat32, tideAvg, comm, nullptr),
              tideSuccess);
    ASSERT_EQ(tideAllReduce(v.data(), vo.data(), 33, tideInt32, tideAvg, comm, nullptr),
              tideSuccess);
    for (int i = 0; i < 33; ++i) {
      float want = 0;
      for (int r = 0; r < n; ++r) want += input(r, i) * (1.0f / n);
      EXPECT_NEAR(fo[i], want, 1e-5);
      EXPECT_EQ(vo[i], (0 + 10 + 20 + 3 * i) / 3);
    }
  });
}

TEST(Lane, OtherCollectives) {
  onRanks(3, [](tideComm_t comm, int rank, int n) {
    const size_t c = 50;
    std::vector<int32_t> in(c * n), out(c * n, -1);
    for (size_t i = 0; i < c * n; ++i) in[i] = static_cast<int32_t>(rank * 1000 + i);
    // Broadcast from root 1.
    ASSERT_EQ(tideBroadcast(in.data(), out.data(), c, tideInt32, 1, comm, nullptr), tideSuccess);
    for (size_t i = 0; i < c; ++i) ASSERT_EQ(out[i], static_cast<int32_t>(1000 + i));
    // Reduce to root 2.
    std::fill(out.begin(), out.end(), -1);
    ASSERT_EQ(tideReduce(in.data(), out.data(), c, tideInt32, tideSum, 2, comm, nullptr),
              tideSuccess);
    if (rank == 2) {
      for (size_t i = 0; i < c; ++i) ASSERT_EQ(out[i], static_cast<int32_t>(3000 + 3 * i));
    }
    // AllGather.
    ASSERT_EQ(tideAllGather(in.data(), out.data(), c, tideInt32, comm, nullptr), tideSuccess);
    for (int r = 0; r < n; ++r) {
      for (size_t i = 0; i < c; ++i) ASSERT_EQ(out[r * c + i], static_cast<int32_t>(r * 1000 + i));
    }
    // ReduceScatter.
    ASSERT_EQ(tideReduceScatter(in.data(), out.data(), c, tideInt32, tideSum, comm, nullptr),
              tideSuccess);
    for (size_t i = 0; i < c; ++i)
      ASSERT_EQ(out[i], static_cast<int32_t>(3000 + 3 * (rank * c + i)));
  });
}

TEST(Lane, WaitsForHostStreamWork) {
  onRanks(2, [](tideComm_t comm, int rank, int) {
    tideStream_t s;
    ASSERT_EQ(tideStreamCreate(&s), tideSuccess);
    std::vector<float> a(1 << 20, 1.f + rank), b(1 << 20), c(8, 1.f), d(8);
    for (int k = 0; k < 3; ++k) {
      ASSERT_EQ(tideAllReduce(a.data(), b.data(), a.size(), tideFloat32, tideSum, comm, s),
                tideSuccess);
      ASSERT_EQ(tideAllReduce(c.data(), d.data(), 8, tideFloat32, tideSum, comm, nullptr),
                tideSuccess);
      EXPECT_EQ(d[7], 2.f);
    }
    ASSERT_EQ(tideStreamSynchronize(s), tideSuccess);
    EXPECT_EQ(b[12345], 3.f);
    tideStreamDestroy(s);
  });
}

TEST(Lane, MismatchedCountIsInvalidUsageOnEveryRank) {
  onRanks(3, [](tideComm_t comm, int rank, int n) {
    std::vector<float> in(256, 1.f), out(256);
    size_t count = rank == n - 1 ? 128 : 64;
    tideResult_t rc =
        tideAllReduce(in.data(), out.data(), count, tideFloat32, tideSum, comm, nullptr);
    EXPECT_EQ(rc, tideInvalidUsage);
    EXPECT_NE(std::string(tideGetLastError(comm)).find("mismatched operation"), std::string::npos)
        << tideGetLastError(comm);
    for (int i = 128; i < 256; ++i) ASSERT_EQ(out[i], 0.f) << "written out of bounds";
  });
}

TEST(Lane, MissingPeerTimesOut) {
  setenv("TIDE_TIMEOUT", "1", 1);
  onRanks(2, [](tideComm_t comm, int rank, int) {
    if (rank == 1) return;
    float x = 1, y = 0;
    auto t0 = Clock::now();
    EXPECT_EQ(tideAllReduce(&x, &y, 1, tideFloat32, tideSum, comm, nullptr), tideTimeout);
    EXPECT_LT(secondsSince(t0), 3.0);
    EXPECT_NE(std::string(tideGetLastError(comm)).find("rank(s) 1"), std::string::npos)
        << tideGetLastError(comm);
  });
  unsetenv("TIDE_TIMEOUT");
}

TEST(Lane, AbortUnblocksAWaitingRank) {
  onRanks(2, [](tideComm_t comm, int rank, int) {
    if (rank == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      return;
    }
    std::thread aborter([comm] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      tideCommAbort(comm);
    });
    gFreed[rank] = true;
    float x = 1, y = 0;
    auto t0 = Clock::now();
    EXPECT_NE(tideAllReduce(&x, &y, 1, tideFloat32, tideSum, comm, nullptr), tideSuccess);
    EXPECT_LT(secondsSince(t0), 1.5);
    aborter.join();
  });
}

// Rank 1 (a child process) exits without joining; rank 0 must say so
// quickly although TIDE_TIMEOUT is long.
TEST(Lane, DeadPeerIsNamed) {
  setenv("TIDE_TIMEOUT", "60", 1);
  tideUniqueId id;
  ASSERT_EQ(tideGetUniqueId(&id), tideSuccess);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    tideComm_t c;
    if (tideCommInitRank(&c, 2, id, 1) != tideSuccess) _exit(2);
    usleep(100000);
    _exit(0);
  }
  tideComm_t comm;
  ASSERT_EQ(tideCommInitRank(&comm, 2, id, 0), tideSuccess);
  float x = 1, y = 0;
  auto t0 = Clock::now();
  tideResult_t rc = tideAllReduce(&x, &y, 1, tideFloat32, tideSum, comm, nullptr);
  EXPECT_EQ(rc, tideRemoteError);
  EXPECT_LT(secondsSince(t0), 3.0);
  EXPECT_NE(std::string(tideGetLastError(comm)).find("rank 1"), std::string::npos)
      << tideGetLastError(comm);
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  tideCommAbort(comm);
  unsetenv("TIDE_TIMEOUT");
}

}  // namespace
