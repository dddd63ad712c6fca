// GPU suite: the device kernel table (src/cuda) against the host table, for
// every dtype x op (reduce), every floating type (scale) and every integer
// type (divide): aligned, misaligned and in-place buffers, random bit
// patterns; results must match bit for bit (any NaN matches any NaN: NaN
// payloads differ between CPU and GPU arithmetic). Then measures the fp32 Sum
// kernel and bf16 Sum against a device-to-device copy and prints GB/s.
// Exits 77 (skip) when the build has no CUDA kernels or no GPU is usable.
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/registry.h"
#include "core/types.h"
#include "cuda/cuda_loader.h"
#include "nan_elem.h"
#if TIDE_TEST_CUDA_KERNELS
#include "cuda/cuda_kernels.h"

namespace {

using tide::cuda::CuDevPtr;
using tide_test::isNan;

// Index of the first element that differs, or -1.
long firstMismatch(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b, size_t n,
                   tideDataType_t t) {
  const size_t es = tide::dtypeSize(t);
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* x = a.data() + i * es;
    const uint8_t* y = b.data() + i * es;
    if (memcmp(x, y, es) == 0) continue;
    if (isNan(x, t) && isNan(y, t)) continue;
    return static_cast<long>(i);
  }
  return -1;
}

struct Dev {
  CuDevPtr p = 0;
  explicit Dev(size_t bytes) { tide::cuda::driver()->cuMemAlloc(&p, bytes); }
  ~Dev() { tide::cuda::driver()->cuMemFree(p); }
  void* at(size_t off) const { return reinterpret_cast<void*>(p + off); }
};

void copy(void* dst, const void* src, size_t bytes) {
  const auto* api = tide::cuda::driver();
  api->cuMemcpyAsync(reinterpret_cast<CuDevPtr>(dst), reinterpret_cast<CuDevPtr>(src), bytes,
                     nullptr);
  tide::cuda::waitStream(nullptr, 60);
}

int failures = 0;

void check(const char* what, tideDataType_t t, int op, long bad, const std::string& err) {
  if (bad < 0 && err.empty()) return;
  ++failures;
  printf("FAIL %s %s op %d: element %ld differs %s\n", what, tide::dtypeName(t), op, bad,
         err.c_str());
}

double seconds(void (*fn)(void*, const void*, const void*, size_t), void* d, const void* a,
               const void* b, size_t n, int reps) {
  fn(d, a, b, n);  // warm-up
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) fn(d, a, b, n);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
}

}  // namespace
#endif  // TIDE_TEST_CUDA_KERNELS

int main() {
#if !TIDE_TEST_CUDA_KERNELS
  printf("SKIP: built without CUDA kernels (configure with -Dcuda=enabled and nvcc on PATH)\n");
  return 77;
#else
  const auto& probe = tide::cuda::probeGpu();
  if (probe.state != tide::cuda::GpuState::kUsable) {
    printf("SKIP: no GPU (%s: %s)\n", tide::cuda::gpuStateName(probe.state), probe.detail.c_str());
    return 77;
  }
  std::string why;
  if (tide::cuda::ensureContext(&why) < 0) {
    printf("FAIL: %s\n", why.c_str());
    return 1;
  }
  const tide::KernelTable* host = tide::kernelsFor(tide::MemType::Host);
  const tide::KernelTable* dev = tide::cuda::deviceKernelTable();
  if (tide::kernelsFor(tide::MemType::Device) != dev) {
    printf("FAIL: device table not registered although a GPU is usable\n");
    ++failures;
  }
  const size_t n = (1u << 20) + 13;  // odd: exercises the element-wise tail
  const size_t maxBytes = n * 8 + 64;
  Dev da(maxBytes), db(maxBytes), dd(maxBytes);
  std::mt19937_64 rng(42);
  std::vector<uint8_t> a(maxBytes), b(maxBytes), want(maxBytes), got(maxBytes);
  for (auto& x : a) x = static_cast<uint8_t>(rng());
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  copy(da.at(0), a.data(), maxBytes);
  copy(db.at(0), b.data(), maxBytes);
  int cases = 0;
  for (int t = 0; t < tideNumTypes; ++t) {
    const auto dt = static_cast<tideDataType_t>(t);
    const size_t es = tide::dtypeSize(dt);
    for (int o = 0; o < 4; ++o) {
      const auto op = static_cast<tide::RedOp>(o);
      for (size_t off : {size_t{0}, es}) {  // 16-byte aligned, then misaligned
        host->reduceFn(dt, op)(want.data(), a.data() + off, b.data() + off, n);
        dev->reduceFn(dt, op)(dd.at(0), da.at(off), db.at(off), n);
        copy(got.data(), dd.at(0), n * es);
        check("reduce", dt, o, firstMismatch(want, got, n, dt),
              tide::cuda::takeDeviceKernelError());
        ++cases;
      }
      // In place: d = d OP b.
      copy(dd.at(0), da.at(0), n * es);
      dev->reduceFn(dt, op)(dd.at(0), dd.at(0), db.at(0), n);
      host->reduceFn(dt, op)(want.data(), a.data(), b.data(), n);
      copy(got.data(), dd.at(0), n * es);
      check("reduce in place", dt, o, firstMismatch(want, got, n, dt),
            tide::cuda::takeDeviceKernelError());
      ++cases;
    }
    if (tide::dtypeIsFloat(dt)) {
      host->scale(want.data(), a.data(), n, dt, 0.37);
      dev->scale(dd.at(0), da.at(0), n, dt, 0.37);
      copy(got.data(), dd.at(0), n * es);
      check("scale", dt, -1, firstMismatch(want, got, n, dt), tide::cuda::takeDeviceKernelError());
      ++cases;
    } else {
      for (uint64_t div : {uint64_t{3}, uint64_t{0}, uint64_t{1} << 63, uint64_t{129}}) {
        host->divide(want.data(), a.data(), n, dt, div);
        dev->divide(dd.at(0), da.at(0), n, dt, div);
        copy(got.data(), dd.at(0), n * es);
        check("divide", dt, static_cast<int>(div & 0xff), firstMismatch(want, got, n, dt),
              tide::cuda::takeDeviceKernelError());
        ++cases;
      }
    }
  }
  printf("kernel correctness: %d cases, %d failures\n", cases, failures);

  // Bandwidth: bytes moved per second (reduce: 2 reads + 1 write; copy: 1 + 1).
  const size_t big = size_t{256} << 20;
  Dev x(big), y(big), z(big);
  const int reps = 20;
  auto copyFn = +[](void* d, const void* s, const void*, size_t bytes) { copy(d, s, bytes); };
  const double tc = seconds(copyFn, z.at(0), x.at(0), nullptr, big, reps);
  const double copyBw = 2.0 * big / tc / 1e9;
  printf("%-22s %10s %10s %8s\n", "kernel", "GB/s", "copy GB/s", "ratio");
  printf("%-22s %10.1f %10.1f %8.2f\n", "d2d copy", copyBw, copyBw, 1.0);
  for (auto dt : {tideFloat32, tideBfloat16, tideFloat8e4m3}) {
    const size_t cnt = big / tide::dtypeSize(dt);
    const double tr =
        seconds(dev->reduceFn(dt, tide::RedOp::Sum), z.at(0), x.at(0), y.at(0), cnt, reps);
    const double bw = 3.0 * big / tr / 1e9;
    printf("reduce sum %-11s %10.1f %10.1f %8.2f\n", tide::dtypeName(dt), bw, copyBw, bw / copyBw);
  }
  return failures == 0 ? 0 : 1;
#endif
}
