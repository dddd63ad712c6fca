// The device collective engine's host side on a machine without a GPU
// (src/cuda/device_coll.h): creation is collective, so every rank fails at
// once with the reason (no GPU, TIDE_P2P_DISABLE) instead of waiting for its
// peers; bad rank counts are refused before any exchange.
#include <gtest/gtest.h>

#include <barrier>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "cuda/cuda_loader.h"
#include "cuda/device_coll.h"
#include "cuda/device_coll_logic.h"

namespace tide::cuda::dc {
namespace {

// The engine's creation on a machine without a GPU (or with TIDE_P2P_DISABLE):
// every rank still takes part in the exchange, so all of them fail at once
// with the reason instead of waiting for each other.
void createEverywhere(int n, std::vector<Status>* out) {
  std::vector<uint8_t> table;
  std::barrier sync(n);
  auto gather = [&](int rank, void* all, size_t bytes) {
    sync.arrive_and_wait();
    if (rank == 0) table.assign(bytes * n, 0);
    sync.arrive_and_wait();
    memcpy(table.data() + rank * bytes, static_cast<uint8_t*>(all) + rank * bytes, bytes);
    sync.arrive_and_wait();
    memcpy(all, table.data(), bytes * n);
    sync.arrive_and_wait();
    return Status::Ok();
  };
  out->assign(n, Status::Ok());
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r) {
    ts.emplace_back([&, r] {
      std::unique_ptr<DeviceAllReduce> e;
      (*out)[r] = DeviceAllReduce::create(
          r, n, {}, [&, r](void* all, size_t bytes) { return gather(r, all, bytes); }, &e);
    });
  }
  for (auto& t : ts) t.join();
}

TEST(DeviceAllReduceHost, CreateFailsCleanlyOnEveryRankWithoutGpu) {
  if (gpuUsable()) GTEST_SKIP() << "a GPU is usable here: " << probeGpu().detail;
  std::vector<Status> st;
  const auto t0 = std::chrono::steady_clock::now();
  createEverywhere(3, &st);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  for (const Status& s : st) {
    EXPECT_EQ(s.code(), tideSystemError) << s.message();
    EXPECT_NE(s.message().find("no GPU"), std::string::npos) << s.message();
  }
  setenv("TIDE_P2P_DISABLE", "1", 1);
  createEverywhere(2, &st);
  unsetenv("TIDE_P2P_DISABLE");
  for (const Status& s : st) {
    EXPECT_EQ(s.code(), tideInvalidUsage) << s.message();
    EXPECT_NE(s.message().find("TIDE_P2P_DISABLE"), std::string::npos) << s.message();
  }
}

TEST(DeviceAllReduceHost, RejectsBadRankCounts) {
  std::unique_ptr<DeviceAllReduce> e;
  auto never = [](void*, size_t) { return internalError("must not be called"); };
  EXPECT_EQ(DeviceAllReduce::create(0, kMaxRanks + 1, {}, never, &e).code(), tideInvalidUsage);
  EXPECT_EQ(DeviceAllReduce::create(2, 2, {}, never, &e).code(), tideInvalidUsage);
  EXPECT_EQ(e, nullptr);
}

}  // namespace
}  // namespace tide::cuda::dc
