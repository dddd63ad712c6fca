// GPU suite: the device All-Reduce engine of one node (src/cuda/device_coll.h)
// with N ranks on GPU 0, as threads of this process (pointers shared) or as
// processes (fork + exec of this program; CUDA IPC mappings). Each rank has
// its own communicator (tideCommInitRank); the engine's setup exchange runs
// over that communicator's bootstrap.
//
//   device_coll_test threads|procs N [maxBytes]
//
// 1. correctness: one-shot and two-shot (threads: direct and scratch mode),
//    every dtype x op, counts 1, 13 (buffers off 16-byte alignment) and
//    1000003 (runs as several scratch-sized steps), in place for odd cases;
//    compared with the host reference (rank-order fold of the host kernels;
//    any NaN matches any NaN).
// 2. bounded waits (threads, N >= 2): a peer that never calls makes rank 0's
//    kernel time out (tideTimeout with text); abort() ends a wait at once.
// 3. bandwidth: float32 sum from 8 B to maxBytes (default 256 MiB threads,
//    64 MiB processes; QUICK=1: 8 MiB): time per call and bus bandwidth,
//    beside a device-to-device copy of the same bytes, and the share of the
//    bound "every rank's input read once and output written once at copy
//    speed" (n * bytes / copy rate) that each algorithm reaches.
// The last line is the summary. Exits 77 without CUDA kernels or a GPU.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/boot/bootstrap.h"
#include "core/comm.h"
#include "core/registry.h"
#include "core/types.h"
#include "cuda/cuda_loader.h"
#include "nan_elem.h"
#include "tide/tide.h"
#if TIDE_TEST_CUDA_KERNELS
#include "cuda/device_coll.h"

namespace {

using tide::cuda::CuDevPtr;
using tide::cuda::CuStream;
using tide::cuda::DeviceAlgo;
using tide::cuda::DeviceAllReduce;
using tide_test::isNan;

using Clock = std::chrono::steady_clock;

long firstMismatch(const uint8_t* want, const uint8_t* got, size_t n, tideDataType_t t) {
  const size_t es = tide::dtypeSize(t);
  for (size_t i = 0; i < n; ++i) {
    if (memcmp(want + i * es, got + i * es, es) == 0) continue;
    if (isNan(want + i * es, t) && isNan(got + i * es, t)) continue;
    return static_cast<long>(i);
  }
  return -1;
}

void randomBytes(std::vector<uint8_t>* v, uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i + 8 <= v->size(); i += 8) {
    const uint64_t x = rng();
    memcpy(v->data() + i, &x, 8);
  }
  for (size_t i = v->size() / 8 * 8; i < v->size(); ++i) (*v)[i] = static_cast<uint8_t>(rng());
}

struct Rank {
  int rank = 0;
  int n = 1;
  bool threads = true;
  size_t maxBytes = 0;
  tideComm_t comm = nullptr;
  CuStream stream = nullptr;
  int wrong = 0;
  int cases = 0;
  std::string firstError;

  tide::cuda::AllGatherFn gather() {
    return [this](void* all, size_t bytes) { return comm->bootstrap->allGather(all, bytes); };
  }
  void fail(const std::string& what) {
    ++wrong;
    if (firstError.empty()) firstError = what;
    if (wrong <= 8) printf("rank %d: FAIL %s\n", rank, what.c_str());  // first few only
  }
  // Waits for the stream and the engine's error word.
  bool finish(DeviceAllReduce* e, const char* what) {
    const int rc = tide::cuda::waitStream(stream, 120);
    if (rc != tide::cuda::kCudaSuccess) {
      fail(std::string(what) + ": stream: " + tide::cuda::driverErrorString(rc));
      return false;
    }
    const tide::Status s = e->check();
    if (!s.ok()) {
      fail(std::string(what) + ": " + s.message());
      return false;
    }
    return true;
  }
};

struct DevBuf {
  CuDevPtr p = 0;
  explicit DevBuf(size_t bytes) {
    if (tide::cuda::driver()->cuMemAlloc(&p, bytes < 16 ? 16 : bytes) != 0) p = 0;
  }
  ~DevBuf() {
    if (p != 0) tide::cuda::driver()->cuMemFree(p);
  }
  void* ptr() const { return reinterpret_cast<void*>(p); }
};

void copySync(CuDevPtr dst, CuDevPtr src, size_t bytes, CuStream st) {
  tide::cuda::driver()->cuMemcpyAsync(dst, src, bytes, st);
  tide::cuda::waitStream(st, 60);
}

void correctness(Rank* r, bool allowDirect) {
  tide::cuda::DeviceCollOptions o;
  o.areaBytes = 1 << 20;  // small: the large count runs in several steps
  o.oneShotMax = 0;
  o.allowDirect = allowDirect;
  std::unique_ptr<DeviceAllReduce> e;
  tide::Status s = DeviceAllReduce::create(r->rank, r->n, o, r->gather(), &e);
  if (!s.ok()) return r->fail("create: " + s.message());
  const size_t counts[] = {1, 13, 1000003};
  const size_t maxBytes = 1000003 * 8;
  DevBuf in(maxBytes + 16), out(maxBytes + 16);
  std::vector<std::vector<uint8_t>> inputs(r->n, std::vector<uint8_t>(maxBytes));
  std::vector<uint8_t> want(maxBytes), got(maxBytes);
  const tide::KernelTable* host = tide::kernelsFor(tide::MemType::Host);
  int caseNo = 0;
  for (DeviceAlgo algo : {DeviceAlgo::kOneShot, DeviceAlgo::kTwoShot, DeviceAlgo::kRing}) {
    for (int t = 0; t < tideNumTypes; ++t) {
      const auto dt = static_cast<tideDataType_t>(t);
      const size_t es = tide::dtypeSize(dt);
      for (int op = 0; op < 4; ++op) {
        for (size_t count : counts) {
          ++caseNo;
          const bool inPlace = (caseNo % 2) == 1;
          // Count 13: buffers one element off 16-byte alignment (scalar path).
          const size_t shift = count == 13 ? es % 16 : 0;
          const size_t bytes = count * es;
          for (int q = 0; q < r->n; ++q) {
            inputs[q].resize(bytes);
            randomBytes(&inputs[q], static_cast<uint64_t>(caseNo) * 1000 + q);
          }
          memcpy(want.data(), inputs[0].data(), bytes);
          const auto fn = host->reduceFn(dt, static_cast<tide::RedOp>(op));
          for (int q = 1; q < r->n; ++q) fn(want.data(), want.data(), inputs[q].data(), count);
          copySync(in.p + shift, reinterpret_cast<CuDevPtr>(inputs[r->rank].data()), bytes,
                   r->stream);
          void* src = reinterpret_cast<void*>(in.p + shift);
          void* dst = reinterpret_cast<void*>((inPlace ? in.p : out.p) + shift);
          s = e->allReduce(src, dst, count, dt, static_cast<tide::RedOp>(op), algo, r->stream);
          char what[160];
          snprintf(what, sizeof(what), "%s %s %s op %d count %zu%s",
                   e->direct() ? "direct" : "scratch", deviceAlgoName(algo), tide::dtypeName(dt),
                   op, count, inPlace ? " in place" : "");
          ++r->cases;
          if (!s.ok()) {
            r->fail(std::string(what) + ": " + s.message());
            return;
          }
          if (!r->finish(e.get(), what)) return;
          copySync(reinterpret_cast<CuDevPtr>(got.data()), reinterpret_cast<CuDevPtr>(dst), bytes,
                   r->stream);
          const long bad = firstMismatch(want.data(), got.data(), count, dt);
          if (bad >= 0) r->fail(std::string(what) + ": element " + std::to_string(bad) + " wrong");
        }
      }
    }
  }
  s = e->close(r->gather());
  if (!s.ok()) r->fail("close: " + s.message());
}

// Threads only: rank 0 calls, the others do not; then abort() on a long wait.
void boundedWaits(Rank* r) {
  DevBuf buf(4096);
  tide::cuda::DeviceCollOptions o;
  o.timeoutSec = 0.5;
  std::unique_ptr<DeviceAllReduce> e;
  tide::Status s;
  // A lone rank's one-shot kernel, then its ring kernel (FIFO data wait).
  for (DeviceAlgo algo : {DeviceAlgo::kAuto, DeviceAlgo::kRing}) {
    s = DeviceAllReduce::create(r->rank, r->n, o, r->gather(), &e);
    if (!s.ok()) return r->fail("create (timeout case): " + s.message());
    if (r->rank == 0) {
      const auto t0 = Clock::now();
      s = e->allReduce(buf.ptr(), buf.ptr(), 256, tideFloat32, tide::RedOp::Sum, algo, r->stream);
      tide::cuda::waitStream(r->stream, 30);
      const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
      s = e->check();
      printf("timeout case (%s): %.2f s, %s\n", deviceAlgoName(algo), secs, s.message().c_str());
      if (s.code() != tideTimeout || secs > 10) r->fail("no tideTimeout from a lone rank's kernel");
      ++r->cases;
    }
    s = e->close(r->gather());  // the barrier keeps peers' scratch alive meanwhile
  }
  o.timeoutSec = 60;
  s = DeviceAllReduce::create(r->rank, r->n, o, r->gather(), &e);
  if (!s.ok()) return r->fail("create (abort case): " + s.message());
  if (r->rank == 0) {
    const auto t0 = Clock::now();
    s = e->allReduce(buf.ptr(), buf.ptr(), 256, tideFloat32, tide::RedOp::Sum, DeviceAlgo::kAuto,
                     r->stream);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    e->abort();
    tide::cuda::waitStream(r->stream, 30);
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    s = e->check();
    printf("abort case: %.2f s, %s\n", secs, s.message().c_str());
    if (s.code() != tideRemoteError || secs > 10) r->fail("abort() did not end the wait");
    ++r->cases;
  }
  s = e->close(r->gather());
}

void bandwidth(Rank* r) {
  std::unique_ptr<DeviceAllReduce> e;
  tide::Status s = DeviceAllReduce::create(r->rank, r->n, {}, r->gather(), &e);
  if (!s.ok()) return r->fail("create (bandwidth): " + s.message());
  DevBuf in(r->maxBytes), out(r->maxBytes);
  const auto* api = tide::cuda::driver();
  api->cuMemsetD8Async(in.p, 0, r->maxBytes, r->stream);
  if (r->rank == 0) {
    printf(
        "%12s %12s %10s %12s %10s %12s %8s %8s  (%d ranks as %s; busbw = "
        "bytes*2(n-1)/n/time GB/s; bound: see below)\n",
        "bytes", "1shot us", "busbw", "2shot us", "busbw", "copy GB/s", "1sh/bnd", "2sh/bnd", r->n,
        r->threads ? "threads" : "processes");
  }
  for (size_t bytes = 8; bytes <= r->maxBytes; bytes *= 4) {
    const int iters = bytes <= (1 << 20) ? 20 : bytes <= (32 << 20) ? 8 : 3;
    const size_t count = bytes / 4;
    double us[2] = {0, 0};
    for (int a = 0; a < 2; ++a) {
      const DeviceAlgo algo = a == 0 ? DeviceAlgo::kOneShot : DeviceAlgo::kTwoShot;
      s = e->allReduce(in.ptr(), out.ptr(), count, tideFloat32, tide::RedOp::Sum, algo, r->stream);
      if (!s.ok()) return r->fail("bandwidth warm-up: " + s.message());
      if (!r->finish(e.get(), "bandwidth warm-up")) return;
      int32_t bar[8] = {};
      (void)r->comm->bootstrap->allGather(bar, sizeof(int32_t));
      const auto t0 = Clock::now();
      for (int i = 0; i < iters && s.ok(); ++i) {
        s = e->allReduce(in.ptr(), out.ptr(), count, tideFloat32, tide::RedOp::Sum, algo,
                         r->stream);
      }
      if (!s.ok()) return r->fail("bandwidth: " + s.message());
      if (!r->finish(e.get(), "bandwidth")) return;
      us[a] = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / iters;
    }
    double copyBw = 0;
    if (r->rank == 0) {
      api->cuMemcpyAsync(out.p, in.p, bytes, r->stream);
      tide::cuda::waitStream(r->stream, 60);
      const auto t0 = Clock::now();
      for (int i = 0; i < iters; ++i) api->cuMemcpyAsync(out.p, in.p, bytes, r->stream);
      tide::cuda::waitStream(r->stream, 60);
      const double t = std::chrono::duration<double>(Clock::now() - t0).count() / iters;
      copyBw = bytes / t / 1e9;
      const double f = 2.0 * (r->n - 1) / r->n;
      // Bound: on one GPU every rank's input must be read and its output
      // written at least once: n * 2 * bytes through memory, at the rate a
      // copy (1 read + 1 write per byte) achieves.
      const double boundUs = r->n * bytes / (copyBw * 1e9) * 1e6;
      printf("%12zu %12.1f %10.2f %12.1f %10.2f %12.2f %8.2f %8.2f\n", bytes, us[0],
             bytes * f / us[0] / 1e3, us[1], bytes * f / us[1] / 1e3, copyBw, boundUs / us[0],
             boundUs / us[1]);
      fflush(stdout);
    }
  }
  s = e->close(r->gather());
  if (!s.ok()) r->fail("close (bandwidth): " + s.message());
}

// One rank, start to end. Returns the number of failures.
void runRank(Rank* r, const tideUniqueId& id) {
  std::string why;
  if (tide::cuda::ensureContext(&why) < 0) return r->fail(why);
  const auto* api = tide::cuda::driver();
  if (api->cuStreamCreate(&r->stream, tide::cuda::kStreamNonBlocking) != 0) {
    return r->fail("cuStreamCreate");
  }
  const tideResult_t rc = tideCommInitRank(&r->comm, r->n, id, r->rank);
  if (rc != tideSuccess) return r->fail(std::string("tideCommInitRank: ") + tideGetErrorString(rc));
  correctness(r, true);  // direct mode for threads, scratch mode for processes
  if (r->wrong == 0 && r->threads && r->n >= 2) correctness(r, false);
  if (r->wrong == 0 && r->threads && r->n >= 2) boundedWaits(r);
  if (r->wrong == 0) bandwidth(r);
  tideCommDestroy(r->comm);
  api->cuStreamDestroy(r->stream);
}

size_t maxBytesFor(bool threads, int argc, char** argv, int argi) {
  if (argc > argi) return strtoull(argv[argi], nullptr, 0);
  const char* q = getenv("QUICK");
  if (q != nullptr && strcmp(q, "1") == 0) return 8 << 20;
  return threads ? size_t{256} << 20 : size_t{64} << 20;
}

std::string hex(const void* p, size_t n) {
  std::string s;
  char b[3];
  for (size_t i = 0; i < n; ++i) {
    snprintf(b, sizeof(b), "%02x", static_cast<const uint8_t*>(p)[i]);
    s += b;
  }
  return s;
}

void unhex(const char* s, void* p, size_t n) {
  for (size_t i = 0; i < n && s[2 * i] != '\0'; ++i) {
    unsigned v = 0;
    sscanf(s + 2 * i, "%2x", &v);
    static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v);
  }
}

}  // namespace
#endif  // TIDE_TEST_CUDA_KERNELS

int main(int argc, char** argv) {
#if !TIDE_TEST_CUDA_KERNELS
  (void)argc;
  (void)argv;
  printf("SKIP: built without CUDA kernels (configure with -Dcuda=enabled and nvcc on PATH)\n");
  return 77;
#else
  setvbuf(stdout, nullptr, _IOLBF, 0);
  if (argc >= 5 && strcmp(argv[1], "child") == 0) {  // child rank N idhex [maxBytes]
    Rank r;
    r.rank = atoi(argv[2]);
    r.n = atoi(argv[3]);
    r.threads = false;
    r.maxBytes = maxBytesFor(false, argc, argv, 5);
    tideUniqueId id{};
    unhex(argv[4], &id, sizeof(id));
    runRank(&r, id);
    printf("rank %d: %d cases, %d failures%s%s\n", r.rank, r.cases, r.wrong,
           r.firstError.empty() ? "" : ": ", r.firstError.c_str());
    return r.wrong == 0 ? 0 : 1;
  }
  if (argc < 3 || (strcmp(argv[1], "threads") != 0 && strcmp(argv[1], "procs") != 0)) {
    fprintf(stderr, "usage: %s threads|procs N [maxBytes]\n", argv[0]);
    return 2;
  }
  const auto& probe = tide::cuda::probeGpu();
  if (probe.state != tide::cuda::GpuState::kUsable) {
    printf("SKIP: no GPU (%s: %s)\n", tide::cuda::gpuStateName(probe.state), probe.detail.c_str());
    return 77;
  }
  const bool threads = strcmp(argv[1], "threads") == 0;
  const int n = atoi(argv[2]);
  if (n < 1 || n > 8) {
    fprintf(stderr, "N must be 1..8\n");
    return 2;
  }
  tideUniqueId id{};
  if (tideGetUniqueId(&id) != tideSuccess) {
    printf("FAIL: tideGetUniqueId\n");
    return 1;
  }
  int wrong = 0, cases = 0;
  std::string firstError;
  if (threads) {
    std::vector<Rank> ranks(n);
    std::vector<std::thread> ts;
    for (int r = 0; r < n; ++r) {
      ranks[r].rank = r;
      ranks[r].n = n;
      ranks[r].maxBytes = maxBytesFor(true, argc, argv, 3);
      ts.emplace_back(runRank, &ranks[r], id);
    }
    for (auto& t : ts) t.join();
    for (const Rank& r : ranks) {
      wrong += r.wrong;
      cases += r.cases;
      if (firstError.empty()) firstError = r.firstError;
    }
  } else {
    const std::string idHex = hex(&id, sizeof(id));
    std::vector<pid_t> pids;
    for (int r = 0; r < n; ++r) {
      const std::string rs = std::to_string(r), ns = std::to_string(n);
      const pid_t pid = fork();
      if (pid == 0) {
        std::vector<const char*> av = {"/proc/self/exe", "child", rs.c_str(), ns.c_str(),
                                       idHex.c_str()};
        if (argc > 3) av.push_back(argv[3]);
        av.push_back(nullptr);
        execv("/proc/self/exe", const_cast<char* const*>(av.data()));
        _exit(127);
      }
      pids.push_back(pid);
    }
    // Bounded: children get 280 s, then are killed.
    const auto deadline = Clock::now() + std::chrono::seconds(280);
    for (size_t i = 0; i < pids.size();) {
      int st = 0;
      const pid_t w = waitpid(pids[i], &st, WNOHANG);
      if (w == pids[i]) {
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
          ++wrong;
          if (firstError.empty()) firstError = "rank " + std::to_string(i) + " exited badly";
        }
        ++i;
        continue;
      }
      if (Clock::now() > deadline) {
        for (size_t j = i; j < pids.size(); ++j) kill(pids[j], SIGKILL);
        ++wrong;
        firstError = "ranks did not finish within 280 s";
        for (size_t j = i; j < pids.size(); ++j) waitpid(pids[j], &st, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    cases = -1;  // counted by the children
  }
  printf("device all-reduce, %d ranks as %s: %s%d failures%s%s\n", n,
         threads ? "threads" : "processes",
         cases >= 0 ? (std::to_string(cases) + " cases, ").c_str() : "", wrong,
         firstError.empty() ? "" : ": ", firstError.c_str());
  return wrong == 0 ? 0 : 1;
#endif
}
