// codec_bench: single-core throughput of the host codec kernels
// (algorithms/compression/codec_kernels.h) against the single-core copy
// bandwidth of this host, measured in the same run.
//
//   codec_bench [-s BYTES] [-r REPS] [-b BLOCK] [--impl best|scalar|both]
//     BYTES of float32 input (default 64M), REPS timed runs of each kernel
//     (default 7), int block size BLOCK (default 256).
//
// Copy is measured as perf/stream_probe measures it: c[i] = a[i] over float32
// arrays of BYTES, counted as 2 x BYTES moved (read + write), best of REPS
// passes. Each codec kernel is timed over the same BYTES of float32 data
// (gradient-like values), one call per run, and reported as float32 bytes per
// second (4 n / time, for encoders the input, for decoders the fp32
// accumulator or output), the median of REPS runs after one warm-up, and as a
// ratio to the copy bandwidth. Issue 17's target: the fast quantize and
// dequantize-accumulate kernels at >= 0.5x copy.
//
// Exits 0 (1 on bad arguments, 2 when memory cannot be allocated).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "algorithms/compression/codec_kernels.h"
#include "common/parse.h"

namespace {

using tide::codec::Codec;
using tide::codec::Impl;

struct Buf {
  void* p = nullptr;
  explicit Buf(size_t bytes) {
    p = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096 + 4096);
    if (p != nullptr) std::memset(p, 0, (bytes + 4095) / 4096 * 4096 + 4096);  // fault in
  }
  ~Buf() { std::free(p); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  float* f() const { return static_cast<float*>(p); }
  uint16_t* u16() const { return static_cast<uint16_t*>(p); }
};

// stream_probe's copy kernel, verbatim in effect.
void copyKernel(const float* __restrict a, float* __restrict c, size_t n) {
  for (size_t i = 0; i < n; ++i) c[i] = a[i];
}

double seconds(const std::function<void()>& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::vector<double> timeRuns(int reps, const std::function<void()>& fn) {
  fn();  // warm-up
  std::vector<double> t;
  t.reserve(static_cast<size_t>(reps));
  for (int r = 0; r < reps; ++r) t.push_back(seconds(fn));
  std::sort(t.begin(), t.end());
  return t;
}

double median(const std::vector<double>& t) {
  const size_t m = t.size() / 2;
  return t.size() % 2 == 1 ? t[m] : (t[m - 1] + t[m]) / 2;
}

const char* implName(Impl i) { return i == Impl::kAvx2 ? "avx2" : "scalar"; }

}  // namespace

int main(int argc, char** argv) {
  size_t bytes = 64u << 20;
  size_t reps = 7;
  size_t block = tide::codec::kDefaultBlock;
  std::string which = "both";
  for (int i = 1; i < argc; i += 2) {  // every option takes a value
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    bool ok = v != nullptr;
    if (a == "-s") {
      ok = ok && tide_perf::ParseSize(v, &bytes) && bytes >= 4096;
    } else if (a == "-r") {
      ok = ok && tide_perf::ParseSize(v, &reps) && reps >= 1 && reps <= 1000;
    } else if (a == "-b") {
      ok = ok && tide_perf::ParseSize(v, &block) && tide::codec::validBlock(block);
    } else if (a == "--impl") {
      ok = ok && (std::strcmp(v, "best") == 0 || std::strcmp(v, "scalar") == 0 ||
                  std::strcmp(v, "both") == 0);
      if (ok) which = v;
    } else {
      std::printf("Usage: %s [-s BYTES] [-r REPS] [-b BLOCK] [--impl best|scalar|both]\n", argv[0]);
      return a == "-h" || a == "--help" ? 0 : 1;
    }
    if (!ok) {
      std::fprintf(stderr, "codec_bench: bad or missing value for %s\n", a.c_str());
      return 1;
    }
  }
  const size_t n = bytes / sizeof(float);
  const int nreps = static_cast<int>(reps);
  Buf x(n * 4), c(n * 4), acc(n * 4), res(n * 4),
      wire(std::max(tide::codec::wireBytes(Codec::kInt8, n, block), 2 * n));
  if (x.p == nullptr || c.p == nullptr || acc.p == nullptr || res.p == nullptr ||
      wire.p == nullptr) {
    std::fprintf(stderr, "codec_bench: cannot allocate the buffers\n");
    return 2;
  }
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 1e-3f);
  for (size_t i = 0; i < n; ++i) x.f()[i] = nd(rng);

  const std::vector<double> ct = timeRuns(nreps, [&] { copyKernel(x.f(), c.f(), n); });
  const double copyBest = 2.0 * static_cast<double>(n * 4) / ct.front() / 1e9;
  const double copyMed = 2.0 * static_cast<double>(n * 4) / median(ct) / 1e9;
  std::printf(
      "# codec_bench: %zu B of float32 (%zu elements), block %zu, median of %d runs, 1 core\n"
      "# copy (stream_probe method, 2 x size moved): best %.2f GB/s, median %.2f GB/s\n"
      "# rate = 4 n bytes of float32 / time; ratio = rate / copy best; target >= 0.50 for "
      "the fast quantize and dequant-acc\n",
      bytes, n, block, nreps, copyBest, copyMed);
  std::printf("# %-22s %-7s %10s %10s %7s\n", "kernel", "impl", "time_ms", "GB/s", "ratio");

  std::vector<Impl> impls;
  if (which != "scalar") impls.push_back(tide::codec::bestImpl());
  if (which != "best" && tide::codec::bestImpl() != Impl::kScalar) impls.push_back(Impl::kScalar);
  if (which == "scalar") impls = {Impl::kScalar};

  const tide::codec::Rounding nearest{};
  const tide::codec::Rounding sr{true, 1, 0};
  struct Row {
    const char* name;
    std::function<void(Impl)> fn;
  };
  const Row rows[] = {
      {"int8 quantize",
       [&](Impl i) { tide::codec::quantize(Codec::kInt8, x.f(), n, block, nearest, wire.p, i); }},
      {"int8 quantize sr",
       [&](Impl i) { tide::codec::quantize(Codec::kInt8, x.f(), n, block, sr, wire.p, i); }},
      {"int8 quantize+feedback",
       [&](Impl i) {
         tide::codec::encodeFeedback(Codec::kInt8, x.f(), res.f(), n, block, nearest, wire.p, i);
       }},
      {"int8 dequant-acc",
       [&](Impl i) { tide::codec::dequantizeAcc(Codec::kInt8, wire.p, n, block, acc.f(), i); }},
      {"int4 quantize",
       [&](Impl i) { tide::codec::quantize(Codec::kInt4, x.f(), n, block, nearest, wire.p, i); }},
      {"int4 dequant-acc",
       [&](Impl i) { tide::codec::dequantizeAcc(Codec::kInt4, wire.p, n, block, acc.f(), i); }},
      {"fp16 encode", [&](Impl i) { tide::codec::encodeFp16(x.f(), wire.u16(), n, i); }},
      {"fp16 decode-acc", [&](Impl i) { tide::codec::decodeAccFp16(wire.u16(), acc.f(), n, i); }},
      {"bf16 encode", [&](Impl i) { tide::codec::encodeBf16(x.f(), wire.u16(), n, i); }},
      {"bf16 decode-acc", [&](Impl i) { tide::codec::decodeAccBf16(wire.u16(), acc.f(), n, i); }},
  };
  for (const Row& row : rows) {
    for (const Impl impl : impls) {
      // Decoders read what the matching encoder wrote (valid, finite codes).
      if (std::strstr(row.name, "int4") != nullptr) {
        tide::codec::quantize(Codec::kInt4, x.f(), n, block, nearest, wire.p, impl);
      } else if (std::strstr(row.name, "int8") != nullptr) {
        tide::codec::quantize(Codec::kInt8, x.f(), n, block, nearest, wire.p, impl);
      } else if (std::strstr(row.name, "fp16") != nullptr) {
        tide::codec::encodeFp16(x.f(), wire.u16(), n, impl);
      } else {
        tide::codec::encodeBf16(x.f(), wire.u16(), n, impl);
      }
      std::memset(acc.p, 0, n * 4);
      std::memset(res.p, 0, n * 4);
      const double t = median(timeRuns(nreps, [&] { row.fn(impl); }));
      const double gbs = static_cast<double>(n * 4) / t / 1e9;
      std::printf("  %-22s %-7s %10.2f %10.2f %7.2f\n", row.name, implName(impl), t * 1e3, gbs,
                  gbs / copyBest);
      std::fflush(stdout);
    }
  }
  // Top-k 1% (exact and sampled) for reference: selection cost, not bandwidth.
  const size_t k = n / 100;
  std::vector<tide::codec::TopkPair> pairs(k);
  tide::codec::TopkScratch scratch;
  for (const auto m : {tide::codec::TopkMethod::kSampled, tide::codec::TopkMethod::kExact}) {
    const double t = median(timeRuns(
        std::min(nreps, 3), [&] { tide::codec::topk(x.f(), n, k, pairs.data(), scratch, m); }));
    const double gbs = static_cast<double>(n * 4) / t / 1e9;
    std::printf("  %-22s %-7s %10.2f %10.2f %7.2f\n",
                m == tide::codec::TopkMethod::kExact ? "topk 1% exact" : "topk 1% sampled",
                implName(tide::codec::bestImpl()), t * 1e3, gbs, gbs / copyBest);
  }
  return 0;
}
