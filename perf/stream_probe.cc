// stream_probe: memory bandwidth of this host, and the memory-bound floor of a
// ring All-Reduce between processes on it (the ceiling perf/compare.sh holds
// Tide's and MPI's bus bandwidth against).
//
//   stream_probe [-b MIN] [-e MAX] [-f FACTOR] [-r REPS] [-t THREADS]
//     Float32 arrays a, b, c of each size from MIN to MAX (default 256K..256M,
//     factor 4). Kernels: copy c[i] = a[i] and add c[i] = a[i] + b[i]. Each timed
//     pass repeats the kernel until >= 64 MiB has moved (so small, cache-resident
//     sizes are timed over milliseconds); the best of REPS passes (default 5) is
//     reported. Bandwidth counts what the kernel names, STREAM-style: copy moves
//     2 x size bytes (read a, write c), add 3 x size; write-allocate reads are not
//     counted. Columns for 1 thread, plus THREADS threads when THREADS > 1
//     (0: one per online CPU); threads split each array in contiguous slices.
//
//   stream_probe --roofline -n RANKS -s BYTES [--bw GB/s] [-t THREADS]
//     Floor time of one ring All-Reduce of BYTES per rank among RANKS processes
//     on this host, when memory bandwidth is the only limit. Without --bw the
//     bandwidth is measured: the copy kernel at 256 MiB per array with
//     min(RANKS, CPUs) threads (or THREADS), i.e. what the ranks can draw from
//     DRAM together.
//
// Roofline model. Let S = BYTES, N = RANKS, c = S / N (one ring chunk). A ring
// All-Reduce is a reduce-scatter (N - 1 steps) then an all-gather (N - 1
// steps). M is the memory traffic one rank causes (bytes read + written):
//  * floor: what no All-Reduce can avoid when S is larger than the caches:
//    each rank reads its input once and writes its output once, M = 2 S. The
//    ring transfers themselves are assumed to stay in cache (small pipelined
//    chunks through staging buffers that are reused while still cached).
//  * staged: every ring transfer also goes through memory: the sender writes
//    each chunk to a shared staging buffer, the receiver reads it back. With a
//    fused reduce (incoming + own input -> out in one pass) each rank
//      reduce-scatter: reads its N input chunks once and N - 1 incoming chunks;
//                      writes N - 1 outgoing chunks and its 1 reduced chunk;
//      all-gather:     reads N - 1 incoming chunks; writes N - 1 outgoing chunks
//                      (its own reduced chunk, then N - 2 forwards) and N - 1
//                      chunks of the output;
//    reads = writes = (3N - 2) c, so M = 2 (3N - 2) S / N. This is the traffic
//    when staging buffers are too large to stay cached (or caches are cold).
// All N ranks share the host's memory, so the floor time is T = N * M / BW,
// with BW the copy bandwidth in bytes moved per second (reads + writes, as the
// probe counts them). The bus-bandwidth ceiling is the nccl-tests busbw that
// time would show: busbw = (S / T) * 2 (N - 1) / N, i.e.
//    floor:  busbw = BW (N - 1) / N^2        staged: BW (N - 1) / (N (3N - 2)).
// Both are meant for sizes whose working set (2 S per rank) exceeds the
// last-level cache; smaller sizes can beat them.
//
// Single process; not a library. Exits 0 on success, 1 on bad arguments, 2
// when memory cannot be allocated.
#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "common/parse.h"

using tide_perf::ParseSize;

namespace {

struct Options {
  size_t min_bytes = 256u << 10;
  size_t max_bytes = 256u << 20;
  size_t factor = 4;
  int reps = 5;
  int threads = 1;
  bool roofline = false;
  int ranks = 0;
  size_t size = 0;
  double bw_gbs = 0;  // 0: measure
};

void Usage(const char* prog) {
  std::printf(
      "Usage: %s [-b MIN] [-e MAX] [-f FACTOR] [-r REPS] [-t THREADS]\n"
      "       %s --roofline -n RANKS -s BYTES [--bw GB/s] [-t THREADS]\n"
      "  Sizes take K/M/G suffixes. See the top of stream_probe.cc for the model.\n",
      prog, prog);
}

int OnlineCpus() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

enum class Kernel { kCopy, kAdd };

// Three float arrays of `max_elems`, touched (page-faulted) once up front.
struct Arrays {
  float* a = nullptr;
  float* b = nullptr;
  float* c = nullptr;
  bool Alloc(size_t elems) {
    const size_t bytes = (elems * sizeof(float) + 4095) / 4096 * 4096;
    a = static_cast<float*>(std::aligned_alloc(4096, bytes));
    b = static_cast<float*>(std::aligned_alloc(4096, bytes));
    c = static_cast<float*>(std::aligned_alloc(4096, bytes));
    if (a == nullptr || b == nullptr || c == nullptr) return false;
    for (size_t i = 0; i < elems; ++i) {
      a[i] = 1.0f;
      b[i] = 2.0f;
      c[i] = 0.0f;
    }
    return true;
  }
  ~Arrays() {
    std::free(a);
    std::free(b);
    std::free(c);
  }
};

void RunKernel(Kernel k, const float* __restrict a, const float* __restrict b, float* __restrict c,
               size_t n) {
  if (k == Kernel::kCopy) {
    for (size_t i = 0; i < n; ++i) c[i] = a[i];
  } else {
    for (size_t i = 0; i < n; ++i) c[i] = a[i] + b[i];
  }
}

// Best bandwidth (GB/s, 1e9 bytes) of `reps` timed passes of kernel `k` over
// `elems` elements split among `threads` threads.
double Measure(Arrays& arr, Kernel k, size_t elems, int threads, int reps) {
  const size_t bytes_per_pass = elems * sizeof(float) * (k == Kernel::kCopy ? 2 : 3);
  const size_t inner = std::max<size_t>(1, (64u << 20) / std::max<size_t>(bytes_per_pass, 1));
  std::barrier sync(threads);
  std::vector<double> secs(static_cast<size_t>(reps), 0);
  auto worker = [&](int t) {
    // Contiguous slice, rounded to 16 elements (64 bytes).
    const size_t per = (elems / static_cast<size_t>(threads) + 15) / 16 * 16;
    const size_t lo = std::min(elems, per * static_cast<size_t>(t));
    const size_t hi = t == threads - 1 ? elems : std::min(elems, lo + per);
    RunKernel(k, arr.a + lo, arr.b + lo, arr.c + lo, hi - lo);  // warm up
    for (int r = 0; r < reps; ++r) {
      sync.arrive_and_wait();
      const auto t0 = std::chrono::steady_clock::now();
      for (size_t i = 0; i < inner; ++i) RunKernel(k, arr.a + lo, arr.b + lo, arr.c + lo, hi - lo);
      sync.arrive_and_wait();
      if (t == 0) {
        secs[static_cast<size_t>(r)] =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker, t);
  worker(0);
  for (std::thread& th : pool) th.join();
  const double best = *std::min_element(secs.begin(), secs.end());
  // Keep the stores observable.
  volatile float sink = arr.c[elems / 2];
  (void)sink;
  return best > 0 ? static_cast<double>(bytes_per_pass * inner) / best / 1e9 : 0;
}

int Sweep(const Options& o) {
  Arrays arr;
  if (!arr.Alloc(o.max_bytes / sizeof(float))) {
    std::fprintf(stderr, "stream_probe: cannot allocate 3 x %zu bytes\n", o.max_bytes);
    return 2;
  }
  const int nt = o.threads == 0 ? OnlineCpus() : o.threads;
  std::printf(
      "# stream_probe: float32, best of %d passes; copy c=a moves 2 x size bytes, "
      "add c=a+b 3 x size; GB/s = 1e9 B/s\n",
      o.reps);
  std::printf("# %12s  %10s  %10s", "size(B)", "copy-1t", "add-1t");
  if (nt > 1) {
    const std::string copy = "copy-" + std::to_string(nt) + "t";
    const std::string add = "add-" + std::to_string(nt) + "t";
    std::printf("  %10s  %10s", copy.c_str(), add.c_str());
  }
  std::printf("\n");
  for (size_t size = o.min_bytes; size <= o.max_bytes; size *= o.factor) {
    const size_t elems = size / sizeof(float);
    std::printf("  %12zu  %10.2f  %10.2f", size, Measure(arr, Kernel::kCopy, elems, 1, o.reps),
                Measure(arr, Kernel::kAdd, elems, 1, o.reps));
    if (nt > 1) {
      std::printf("  %10.2f  %10.2f", Measure(arr, Kernel::kCopy, elems, nt, o.reps),
                  Measure(arr, Kernel::kAdd, elems, nt, o.reps));
    }
    std::printf("\n");
    std::fflush(stdout);
    if (o.factor < 2) break;
  }
  return 0;
}

int Roofline(const Options& o) {
  const double n = o.ranks;
  const double s = static_cast<double>(o.size);
  int nt = o.threads > 1 ? o.threads : std::min(o.ranks, OnlineCpus());
  double bw = o.bw_gbs;
  const char* how = "given";
  if (bw <= 0) {
    Arrays arr;
    const size_t elems = (256u << 20) / sizeof(float);
    if (!arr.Alloc(elems)) {
      std::fprintf(stderr, "stream_probe: cannot allocate 3 x 256 MiB\n");
      return 2;
    }
    bw = Measure(arr, Kernel::kCopy, elems, nt, o.reps);
    how = "measured: copy, 256 MiB";
  } else {
    nt = 0;
  }
  const double floor = 2 * s;  // bytes moved per rank
  const double staged = 2 * (3 * n - 2) * s / n;
  const double bus = 2 * (n - 1) / n;
  std::printf(
      "# ring All-Reduce roofline: %d ranks, %zu B per rank, memory bandwidth %.2f GB/s "
      "(%s",
      o.ranks, o.size, bw, how);
  if (nt > 0) std::printf(", %d threads", nt);
  std::printf(")\n# T = ranks * bytes_moved_per_rank / bandwidth; busbw = size / T * %.3f\n", bus);
  std::printf("# %8s  %16s  %14s  %14s\n", "model", "bytes/rank", "time_us", "busbw_GB/s");
  for (int m = 0; m < 2; ++m) {
    const double moved = m == 0 ? floor : staged;
    const double t = n * moved / (bw * 1e9);
    std::printf("  %8s  %16.0f  %14.2f  %14.3f\n", m == 0 ? "floor" : "staged", moved, t * 1e6,
                t > 0 ? s / t / 1e9 * bus : 0);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const char* val = i + 1 < argc ? argv[i + 1] : nullptr;
    auto need = [&](bool ok) {
      if (!ok) {
        std::fprintf(stderr, "stream_probe: bad or missing value for %s\n", arg.c_str());
        std::exit(1);
      }
      ++i;
    };
    size_t v = 0;
    if (arg == "-h" || arg == "--help") {
      Usage(argv[0]);
      return 0;
    } else if (arg == "--roofline") {
      o.roofline = true;
    } else if (arg == "-b") {
      need(val && ParseSize(val, &o.min_bytes));
    } else if (arg == "-e") {
      need(val && ParseSize(val, &o.max_bytes));
    } else if (arg == "-f") {
      need(val && ParseSize(val, &o.factor) && o.factor >= 1);
    } else if (arg == "-r") {
      need(val && ParseSize(val, &v) && v >= 1 && v <= 1000);
      o.reps = static_cast<int>(v);
    } else if (arg == "-t") {
      need(val && ParseSize(val, &v) && v <= 1024);
      o.threads = static_cast<int>(v);
    } else if (arg == "-n") {
      need(val && ParseSize(val, &v) && v >= 1 && v <= 1 << 20);
      o.ranks = static_cast<int>(v);
    } else if (arg == "-s") {
      need(val && ParseSize(val, &o.size));
    } else if (arg == "--bw") {
      char* end = nullptr;
      need(val && (o.bw_gbs = std::strtod(val, &end)) > 0 && *end == '\0');
    } else {
      std::fprintf(stderr, "stream_probe: unknown argument %s (see -h)\n", arg.c_str());
      return 1;
    }
  }
  if (o.roofline) {
    if (o.ranks < 1 || o.size == 0) {
      std::fprintf(stderr, "stream_probe: --roofline needs -n RANKS and -s BYTES\n");
      return 1;
    }
    return Roofline(o);
  }
  if (o.min_bytes < sizeof(float) || o.min_bytes > o.max_bytes) {
    std::fprintf(stderr, "stream_probe: need 4 <= MIN <= MAX\n");
    return 1;
  }
  return Sweep(o);
}
