// Host streams: a 64 MiB float32 AllReduce enqueued on a stream returns at
// once and runs while the caller computes; tideStreamQuery reports
// tideInProgress, then tideSuccess; a Broadcast enqueued behind it sees its
// result (stream order); a callback queued behind both runs once both are
// done, with tideSuccess; Synchronize and Destroy succeed. Two processes (this
// executable re-runs itself with --worker=stream).
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "rank_harness.h"

namespace tide_test {
namespace {

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// About `ms` milliseconds of arithmetic that the compiler cannot drop.
double BusyCompute(double ms) {
  const auto t0 = Clock::now();
  volatile double acc = 0;
  while (MsSince(t0) < ms) {
    for (int i = 1; i < 20000; ++i) acc = acc + std::sqrt(static_cast<double>(i));
  }
  return acc;
}

// What a stream callback saw when its stream's thread called it.
struct CallbackSeen {
  std::atomic<int> calls{0};
  tideResult_t status = tideInternalError;
  std::string message = "unset";
  float first = -1.0f;  // recv[0] when called: the AllReduce was done
  const float* watch = nullptr;
};

void RecordCallback(tideStream_t, tideResult_t status, const char* message, void* data) {
  auto* seen = static_cast<CallbackSeen*>(data);
  seen->status = status;
  seen->message = message;
  seen->first = *seen->watch;
  seen->calls.fetch_add(1, std::memory_order_release);
}

int StreamChecks(ThreadRank& ctx) {
  const int r = ctx.rank, n = ctx.nranks;
  const size_t count = (size_t{64} << 20) / sizeof(float);
  std::vector<float> send(count), recv(count, -1.0f), bcast(count, -1.0f);
  for (size_t i = 0; i < count; ++i) send[i] = static_cast<float>(i % 7 + r);

  tideStream_t stream = nullptr;
  CHECK_RC(tideStreamCreate(&stream));
  const auto t0 = Clock::now();
  CHECK_RC(tideAllReduce(send.data(), recv.data(), count, tideFloat32, tideSum, ctx.comm, stream));
  const double call_ms = MsSince(t0);
  // Stream order: this Broadcast reads what the AllReduce wrote.
  CHECK_RC(tideBroadcast(recv.data(), bcast.data(), count, tideFloat32, 0, ctx.comm, stream));
  const double call2_ms = MsSince(t0);
  // Called once both are done, with their (lack of) error.
  CallbackSeen seen;
  seen.watch = bcast.data();
  CHECK_RC(tideStreamAddCallback(stream, RecordCallback, &seen));

  int in_progress = 0, queries = 0;
  tideResult_t q = tideInProgress;
  const auto busy0 = Clock::now();
  while (MsSince(busy0) < 50) {  // caller keeps computing and polls now and then
    BusyCompute(1);
    q = tideStreamQuery(stream);
    ++queries;
    if (q == tideInProgress) ++in_progress;
  }
  const auto wait0 = Clock::now();
  while ((q = tideStreamQuery(stream)) == tideInProgress && MsSince(wait0) < 120000) {
    BusyCompute(1);
    ++queries;
    ++in_progress;
  }
  const double done_ms = MsSince(t0);
  ctx.Logf("rank %d: enqueue %.2f ms + %.2f ms, done after %.1f ms, %d of %d queries in progress\n",
           r, call_ms, call2_ms - call_ms, done_ms, in_progress, queries);
  int code = 0;
  if (q != tideSuccess) {
    ctx.Logf("rank %d: tideStreamQuery ended with %s: %s\n", r, tideGetErrorString(q),
             tideGetLastError(ctx.comm));
    code = 1;
  }
  if (call2_ms > done_ms / 2) {
    ctx.Logf("rank %d: enqueueing took %.1f ms of the %.1f ms the work took: it blocked\n", r,
             call2_ms, done_ms);
    code = 1;
  }
  if (in_progress == 0) {
    ctx.Logf(
        "rank %d: tideStreamQuery never returned tideInProgress: the enqueue did not "
        "return before the 64 MiB AllReduce finished\n",
        r);
    code = 1;
  }
  tideResult_t sync = tideStreamSynchronize(stream);
  if (sync != tideSuccess) {
    ctx.Logf("rank %d: tideStreamSynchronize: %s\n", r, tideGetErrorString(sync));
    code = 1;
  }
  const float want0 = static_cast<float>(n * (n - 1) / 2);
  if (seen.calls.load(std::memory_order_acquire) != 1 || seen.status != tideSuccess ||
      !seen.message.empty() || seen.first != want0) {
    ctx.Logf("rank %d: callback: %d call(s), status %s, message \"%s\", bcast[0] %g (want %g)\n", r,
             seen.calls.load(), tideGetErrorString(seen.status), seen.message.c_str(), seen.first,
             want0);
    code = 1;
  }
  if (tideStreamAddCallback(nullptr, RecordCallback, &seen) != tideInvalidArgument ||
      tideStreamAddCallback(stream, nullptr, &seen) != tideInvalidArgument) {
    ctx.Logf("rank %d: tideStreamAddCallback accepted a NULL stream or callback\n", r);
    code = 1;
  }
  for (size_t i = 0; code == 0 && i < count; ++i) {
    const float want = static_cast<float>(n * (i % 7)) + static_cast<float>(n * (n - 1) / 2);
    if (recv[i] != want || bcast[i] != want) {
      ctx.Logf("rank %d: index %zu: AllReduce %g, Broadcast %g, expected %g\n", r, i, recv[i],
               bcast[i], want);
      code = 1;
    }
  }
  tideResult_t drc = tideStreamDestroy(stream);
  if (drc != tideSuccess) {
    ctx.Logf("rank %d: tideStreamDestroy: %s\n", r, tideGetErrorString(drc));
    code = 1;
  }
  // An idle stream reports success and can be destroyed at once.
  tideStream_t idle = nullptr;
  CHECK_RC(tideStreamCreate(&idle));
  if (tideStreamQuery(idle) != tideSuccess) {
    ctx.Logf("rank %d: a new stream is not idle\n", r);
    code = 1;
  }
  CHECK_RC(tideStreamSynchronize(idle));
  CHECK_RC(tideStreamDestroy(idle));
  return code;
}

TEST(Stream, AsyncAllReduce64MiB) {
  ProcessRunOptions o;
  o.exe = SelfExe();
  o.args = {"--worker=stream"};
  o.nranks = 2;
  o.timeout_ms = 150000;
  o.env.emplace_back("TIDE_TIMEOUT", "120");
  RunResult r = RunProcesses(o);
  EXPECT_TRUE(r.AllOk()) << r.Describe();
  for (const auto& rr : r.ranks) printf("%s", rr.output.c_str());
}

}  // namespace
}  // namespace tide_test

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "--worker=stream") == 0) {
    return tide_test::RunEnvRank(tide_test::StreamChecks);
  }
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
