// Reduction-kernel microbenchmarks (Google Benchmark): the host kernels that
// every reducing collective runs, against memcpy and a plain c = a + b loop
// (the STREAM "add" the kernels are judged by) on the same buffers.
//
//   build/perf/reduce_bench --benchmark_filter=64M
//
// bytes_per_second counts bytes read + written: 3 x size for a + b -> c,
// 2 x size for memcpy. This binary reaches the kernels directly (they are
// internal), unlike the *_perf tools, which use only the public API.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "algorithms/kernels/host_kernels.h"

namespace {

using tide::RedOp;
using tide::kernels::HostIsa;

struct Buffers {
  explicit Buffers(size_t bytes)
      : a(static_cast<char*>(aligned_alloc(64, bytes))),
        b(static_cast<char*>(aligned_alloc(64, bytes))),
        c(static_cast<char*>(aligned_alloc(64, bytes))) {
    // Small integers: exact in every type, no denormals, no NaNs.
    for (size_t i = 0; i < bytes / 4; ++i) {
      reinterpret_cast<float*>(a)[i] = static_cast<float>(i % 7);
      reinterpret_cast<float*>(b)[i] = static_cast<float>(i % 5);
    }
    memset(c, 0, bytes);
  }
  ~Buffers() {
    free(a);
    free(b);
    free(c);
  }
  char* a;
  char* b;
  char* c;
};

void BM_Memcpy(benchmark::State& st) {
  const size_t bytes = static_cast<size_t>(st.range(0));
  Buffers buf(bytes);
  for (auto _ : st) {
    memcpy(buf.c, buf.a, bytes);
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations() * 2 * bytes));
}

// The reference c = a + b (what stream_probe's "add" measures).
void BM_StreamAdd(benchmark::State& st) {
  const size_t n = static_cast<size_t>(st.range(0)) / sizeof(float);
  Buffers buf(n * sizeof(float));
  auto* __restrict a = reinterpret_cast<const float*>(buf.a);
  auto* __restrict b = reinterpret_cast<const float*>(buf.b);
  auto* __restrict c = reinterpret_cast<float*>(buf.c);
  for (auto _ : st) {
    for (size_t i = 0; i < n; ++i) c[i] = a[i] + b[i];
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations() * 3 * n * sizeof(float)));
}

template <tideDataType_t kType, RedOp kOp, HostIsa kIsa>
void BM_Reduce(benchmark::State& st) {
  const size_t bytes = static_cast<size_t>(st.range(0));
  const size_t esize = tide::dtypeSize(kType);
  tide::ReduceFn fn = tide::kernels::hostReduceFn(kType, kOp, kIsa);
  if (fn == nullptr) {
    st.SkipWithError("variant not supported on this CPU");
    return;
  }
  Buffers buf(bytes);
  for (auto _ : st) {
    fn(buf.c, buf.a, buf.b, bytes / esize);
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations() * 3 * bytes));
}

constexpr int64_t kInCache = 256 << 10;
constexpr int64_t kLarge = 64 << 20;

BENCHMARK(BM_Memcpy)->Arg(kInCache)->Arg(kLarge);
BENCHMARK(BM_StreamAdd)->Arg(kInCache)->Arg(kLarge);
BENCHMARK(BM_Reduce<tideFloat32, RedOp::Sum, HostIsa::kBaseline>)->Arg(kInCache)->Arg(kLarge);
BENCHMARK(BM_Reduce<tideFloat32, RedOp::Sum, HostIsa::kAvx2>)->Arg(kInCache)->Arg(kLarge);
BENCHMARK(BM_Reduce<tideFloat16, RedOp::Sum, HostIsa::kAvx2>)->Arg(kInCache)->Arg(kLarge);
BENCHMARK(BM_Reduce<tideBfloat16, RedOp::Sum, HostIsa::kAvx2>)->Arg(kInCache)->Arg(kLarge);
BENCHMARK(BM_Reduce<tideFloat8e4m3, RedOp::Sum, HostIsa::kAvx2>)->Arg(kInCache)->Arg(kLarge);
BENCHMARK(BM_Reduce<tideInt32, RedOp::Max, HostIsa::kAvx2>)->Arg(kInCache)->Arg(kLarge);
BENCHMARK(BM_Reduce<tideFloat64, RedOp::Prod, HostIsa::kAvx2>)->Arg(kInCache)->Arg(kLarge);

}  // namespace

BENCHMARK_MAIN();
