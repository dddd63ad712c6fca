// Per-call overhead microbenchmarks (Google Benchmark): what one small
// collective costs on top of its data movement.
//
//   build/perf/call_bench
//
//   BM_AllReduce1Rank     a blocking 8 B All-Reduce on a one-rank communicator:
//                         validation, the planner's route choice and issue, with
//                         no peer to wait for: the per-call cost of the core
//   BM_LaneAllReduce      a blocking 8 B All-Reduce over the small-collective lane,
//                         two ranks as threads of this process (real time per call)
//   BM_StreamAllReduce    the same on a host stream: enqueue, then synchronize
//                         (the -z 0 path of all_reduce_perf)
//
// Communicators are created once, before the benchmarks run. Public API only.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <thread>
#include <vector>

#include "tide/tide.h"

namespace {

tideComm_t gOne = nullptr;
tideComm_t gPair[2] = {nullptr, nullptr};
tideStream_t gStreams[2] = {nullptr, nullptr};

bool Setup() {
  tideUniqueId one, pair;
  if (tideGetUniqueId(&one) != tideSuccess || tideGetUniqueId(&pair) != tideSuccess) return false;
  if (tideCommInitRank(&gOne, 1, one, 0) != tideSuccess) return false;
  tideResult_t rc[2] = {tideInternalError, tideInternalError};
  std::thread peer([&] { rc[1] = tideCommInitRank(&gPair[1], 2, pair, 1); });
  rc[0] = tideCommInitRank(&gPair[0], 2, pair, 0);
  peer.join();
  if (rc[0] != tideSuccess || rc[1] != tideSuccess) return false;
  return tideStreamCreate(&gStreams[0]) == tideSuccess &&
         tideStreamCreate(&gStreams[1]) == tideSuccess;
}

void BM_AllReduce1Rank(benchmark::State& state) {
  float in[2] = {1, 2}, out[2];
  for (auto _ : state) {
    if (tideAllReduce(in, out, 2, tideFloat32, tideSum, gOne, nullptr) != tideSuccess) {
      state.SkipWithError("tideAllReduce failed");
      break;
    }
    benchmark::DoNotOptimize(out);
  }
}
BENCHMARK(BM_AllReduce1Rank);

// Two threads, one rank each; every thread runs the same number of calls.
void BM_LaneAllReduce(benchmark::State& state) {
  const tideComm_t comm = gPair[state.thread_index()];
  float in[2] = {1, 2}, out[2];
  for (auto _ : state) {
    if (tideAllReduce(in, out, 2, tideFloat32, tideSum, comm, nullptr) != tideSuccess) {
      state.SkipWithError("tideAllReduce failed");
      break;
    }
    benchmark::DoNotOptimize(out);
  }
}
BENCHMARK(BM_LaneAllReduce)->Threads(2)->UseRealTime();

void BM_StreamAllReduce(benchmark::State& state) {
  const int me = state.thread_index();
  float in[2] = {1, 2}, out[2];
  for (auto _ : state) {
    if (tideAllReduce(in, out, 2, tideFloat32, tideSum, gPair[me], gStreams[me]) != tideSuccess ||
        tideStreamSynchronize(gStreams[me]) != tideSuccess) {
      state.SkipWithError("stream All-Reduce failed");
      break;
    }
    benchmark::DoNotOptimize(out);
  }
}
BENCHMARK(BM_StreamAllReduce)->Threads(2)->UseRealTime();

// Like all_reduce_perf -z 0: a batch of calls queued on the host stream, then
// one synchronize; time per call. Against BM_LaneAllReduce this is the cost
// of the hand-off to the stream's worker thread.
void BM_StreamAllReduceBatch(benchmark::State& state) {
  const int me = state.thread_index();
  const int batch = static_cast<int>(state.range(0));
  float in[2] = {1, 2}, out[2];
  for (auto _ : state) {
    for (int i = 0; i < batch; ++i) {
      if (tideAllReduce(in, out, 2, tideFloat32, tideSum, gPair[me], gStreams[me]) != tideSuccess) {
        state.SkipWithError("stream All-Reduce failed");
        break;
      }
    }
    if (tideStreamSynchronize(gStreams[me]) != tideSuccess) {
      state.SkipWithError("stream synchronize failed");
      break;
    }
    benchmark::DoNotOptimize(out);
  }
  state.SetItemsProcessed(state.iterations() * batch);
}
BENCHMARK(BM_StreamAllReduceBatch)->Arg(50)->Threads(2)->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  if (!Setup()) {
    fprintf(stderr, "call_bench: communicator set-up failed\n");
    return 1;
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  for (tideStream_t s : gStreams) tideStreamDestroy(s);
  for (tideComm_t c : {gOne, gPair[0], gPair[1]}) tideCommDestroy(c);
  return 0;
}
