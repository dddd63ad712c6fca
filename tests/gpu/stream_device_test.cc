// Tide's public API on device buffers and CUDA streams (suite gpu): every
// collective (and send/recv) x a few datatypes with N ranks as threads of one
// process sharing GPU 0, each on its own CUDA stream passed as tideStream_t,
// checked element by element against a host reference; a large All-Reduce
// (the chunked pipeline); host buffers on a CUDA stream; then the same
// collectives captured in a CUDA graph and replayed 3 times with new inputs.
//
//   stream_device_test N
//
// Exits 77 (skip) when no CUDA driver or device is usable. The driver is
// opened with dlopen, so this builds without CUDA. Every wait is bounded.
#include <dlfcn.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "driver_table.h"
#include "tide/tide.h"

namespace {

using gpu_test::cu;
using gpu_test::CuDevPtr;
using gpu_test::htodOn;
using gpu_test::loadCuda;
using gpu_test::syncStream;

struct Dtype {
  tideDataType_t t;
  size_t size;
  const char* name;
};
const Dtype kTypes[] = {{tideInt32, 4, "int32"},
                        {tideFloat32, 4, "float32"},
                        {tideFloat64, 8, "float64"},
                        {tideUint8, 1, "uint8"}};

// Input element i of `rank` at `round` (small values: float sums are exact,
// uint8 sums of up to 4 ranks stay below 256).
double inVal(int rank, size_t i, int round) {
  return static_cast<double>((rank + 1) * 3 + static_cast<int>(i % 11) + round * 5);
}
void store(void* p, size_t i, const Dtype& d, double v) {
  switch (d.t) {
    case tideInt32:
      static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v);
      break;
    case tideFloat32:
      static_cast<float*>(p)[i] = static_cast<float>(v);
      break;
    case tideFloat64:
      static_cast<double*>(p)[i] = v;
      break;
    default:
      static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v);
  }
}
double load(const void* p, size_t i, const Dtype& d) {
  switch (d.t) {
    case tideInt32:
      return static_cast<const int32_t*>(p)[i];
    case tideFloat32:
      return static_cast<const float*>(p)[i];
    case tideFloat64:
      return static_cast<const double*>(p)[i];
    default:
      return static_cast<const uint8_t*>(p)[i];
  }
}

enum Coll { kAllReduce, kBroadcast, kReduce, kAllGather, kReduceScatter, kAlltoAll, kSendRecv, kN };
const char* kCollNames[] = {"AllReduce",     "Broadcast", "Reduce",  "AllGather",
                            "ReduceScatter", "AlltoAll",  "SendRecv"};

struct Rank {
  int rank = 0, n = 1;
  tideComm_t comm = nullptr;
  void* stream = nullptr;
  CuDevPtr in = 0, out = 0;
  size_t cap = 0;
  int failures = 0;
  void fail(const char* what, const std::string& detail) {
    if (++failures <= 10) fprintf(stderr, "rank %d: %s: %s\n", rank, what, detail.c_str());
  }
};

// Input / output element counts of `c` with `count` per block.
void shape(Coll c, size_t count, int n, size_t* in, size_t* out) {
  const size_t N = static_cast<size_t>(n);
  *in = (c == kReduceScatter || c == kAlltoAll) ? count * N : count;
  *out = (c == kAllGather || c == kAlltoAll) ? count * N : count;
}

// Issues `c` on r's device buffers and stream (no waiting).
tideResult_t issue(Rank& r, Coll c, const Dtype& d, size_t count) {
  auto s = static_cast<tideStream_t>(r.stream);
  auto* in = reinterpret_cast<void*>(r.in);
  auto* out = reinterpret_cast<void*>(r.out);
  const int root = r.n - 1;
  switch (c) {
    case kAllReduce:
      return tideAllReduce(in, out, count, d.t, tideSum, r.comm, s);
    case kBroadcast:
      return tideBroadcast(in, out, count, d.t, root, r.comm, s);
    case kReduce:
      return tideReduce(in, out, count, d.t, tideSum, 0, r.comm, s);
    case kAllGather:
      return tideAllGather(in, out, count, d.t, r.comm, s);
    case kReduceScatter:
      return tideReduceScatter(in, out, count, d.t, tideSum, r.comm, s);
    case kAlltoAll:
      return tideAlltoAll(in, out, count, d.t, r.comm, s);
    default: {  // ring: send to rank+1, receive from rank-1
      tideGroupStart();
      tideResult_t a = tideSend(in, count, d.t, (r.rank + 1) % r.n, r.comm, s);
      tideResult_t b = tideRecv(out, count, d.t, (r.rank + r.n - 1) % r.n, r.comm, s);
      tideResult_t e = tideGroupEnd();
      return a != tideSuccess ? a : b != tideSuccess ? b : e;
    }
  }
}

// The expected output element j of rank `me`.
double expect(Coll c, int me, int n, size_t count, size_t j, int round) {
  double sum = 0;
  for (int p = 0; p < n; ++p)
    sum += inVal(p, j % count + (c == kReduceScatter ? me * count : 0), round);
  switch (c) {
    case kAllReduce:
    case kReduce:
      return sum;
    case kBroadcast:
      return inVal(n - 1, j, round);
    case kAllGather:
      return inVal(static_cast<int>(j / count), j % count, round);
    case kReduceScatter:
      return sum;
    case kAlltoAll:  // block p of my output = block `me` of p's input
      return inVal(static_cast<int>(j / count), me * count + j % count, round);
    default:
      return inVal((me + n - 1) % n, j, round);
  }
}

// Fills r.in, runs nothing; checks r.out after the stream drained.
bool fillInput(Rank& r, Coll c, const Dtype& d, size_t count, int round) {
  size_t nin, nout;
  shape(c, count, r.n, &nin, &nout);
  std::vector<char> h(nin * d.size);
  for (size_t i = 0; i < nin; ++i) store(h.data(), i, d, inVal(r.rank, i, round));
  if (!htodOn(r.stream, r.in, h.data(), h.size())) return false;
  std::vector<char> z(nout * d.size, 0);
  return htodOn(r.stream, r.out, z.data(), z.size());
}

void check(Rank& r, Coll c, const Dtype& d, size_t count, int round, const char* mode) {
  size_t nin, nout;
  shape(c, count, r.n, &nin, &nout);
  if (c == kReduce && r.rank != 0) return;  // untouched on non-roots
  std::vector<char> h(nout * d.size);
  if (cu.dtoh(h.data(), r.out, h.size()) != 0) return r.fail(kCollNames[c], "cuMemcpyDtoH");
  size_t wrong = 0, first = 0;
  for (size_t j = 0; j < nout; ++j) {
    double want = expect(c, r.rank, r.n, count, j, round);
    if (d.t == tideUint8) want = static_cast<double>(static_cast<uint8_t>(want));
    if (load(h.data(), j, d) != want && wrong++ == 0) first = j;
  }
  if (wrong != 0) {
    char buf[200];
    snprintf(buf, sizeof(buf), "%s %s count %zu round %d: %zu wrong, first at %zu (%g, want %g)",
             mode, d.name, count, round, wrong, first, load(h.data(), first, d),
             expect(c, r.rank, r.n, count, first, round));  // uint8: before wrapping
    r.fail(kCollNames[c], buf);
  }
}

bool drain(Rank& r, const char* what) {
  if (!syncStream(r.stream)) {
    r.fail(what, "stream did not drain within 60 s (or failed)");
    return false;
  }
  tideResult_t async = tideSuccess;
  tideCommGetAsyncError(r.comm, &async);
  if (async != tideSuccess) {
    r.fail(what, std::string("async error: ") + tideGetLastError(r.comm));
    return false;
  }
  return true;
}

void runRank(Rank& r, const tideUniqueId& id) {
  cu.ctxSetCurrent(cu.ctx);
  if (tideCommInitRank(&r.comm, r.n, id, r.rank) != tideSuccess) {
    return r.fail("tideCommInitRank", tideGetLastError(nullptr));
  }
  if (cu.streamCreate(&r.stream, 1) != 0) return r.fail("cuStreamCreate", "");
  const size_t big = 3u << 20;  // elements: 12 MiB of float32, the chunked pipeline
  r.cap = big * 8 * static_cast<size_t>(r.n);
  if (cu.memAlloc(&r.in, r.cap) != 0 || cu.memAlloc(&r.out, r.cap) != 0) {
    return r.fail("cuMemAlloc", "");
  }
  // 1. Every collective x dtype, stream-ordered.
  for (const Dtype& d : kTypes) {
    for (int c = 0; c < kN; ++c) {
      for (size_t count : {size_t{1}, size_t{1000}, size_t{65537}}) {
        if (r.n == 1 && c == kSendRecv) continue;
        if (!fillInput(r, static_cast<Coll>(c), d, count, 0)) return r.fail("fill", "");
        tideResult_t rc = issue(r, static_cast<Coll>(c), d, count);
        if (rc != tideSuccess) return r.fail(kCollNames[c], tideGetLastError(r.comm));
        if (!drain(r, kCollNames[c])) return;
        check(r, static_cast<Coll>(c), d, count, 0, "stream");
      }
    }
  }
  // 2. A large All-Reduce (pipelined chunks).
  if (!fillInput(r, kAllReduce, kTypes[1], big, 1)) return r.fail("fill", "");
  if (issue(r, kAllReduce, kTypes[1], big) != tideSuccess) {
    return r.fail("big AllReduce", tideGetLastError(r.comm));
  }
  if (!drain(r, "big AllReduce")) return;
  check(r, kAllReduce, kTypes[1], big, 1, "pipelined");
  // 3. Host buffers on a CUDA stream.
  {
    std::vector<float> hin(4096), hout(4096, 0.f);
    for (size_t i = 0; i < hin.size(); ++i) hin[i] = static_cast<float>(inVal(r.rank, i, 2));
    if (tideAllReduce(hin.data(), hout.data(), hin.size(), tideFloat32, tideSum, r.comm,
                      static_cast<tideStream_t>(r.stream)) != tideSuccess) {
      return r.fail("host-buffer AllReduce", tideGetLastError(r.comm));
    }
    if (!drain(r, "host-buffer AllReduce")) return;
    for (size_t i = 0; i < hin.size(); ++i) {
      double want = 0;
      for (int p = 0; p < r.n; ++p) want += inVal(p, i, 2);
      if (hout[i] != want) {
        r.fail("host-buffer AllReduce", "wrong result at " + std::to_string(i));
        break;
      }
    }
  }
  // 4. Captured in a CUDA graph, replayed 3 times with new inputs.
  const Dtype& d = kTypes[1];
  const size_t count = 4099;
  for (int c = 0; c < kN; ++c) {
    if (r.n == 1 && c == kSendRecv) continue;
    const int mode = r.n > 1 ? 1 : 0;  // thread-local with several ranks, as nccl-tests
    if (cu.beginCapture(r.stream, mode) != 0) return r.fail("cuStreamBeginCapture", "");
    tideResult_t rc = issue(r, static_cast<Coll>(c), d, count);
    void* graph = nullptr;
    int erc = cu.endCapture(r.stream, &graph);
    if (rc != tideSuccess) return r.fail(kCollNames[c], tideGetLastError(r.comm));
    if (erc != 0) return r.fail("cuStreamEndCapture", std::to_string(erc));
    void* exec = nullptr;
    if (cu.instantiate(&exec, graph, 0) != 0) return r.fail("cuGraphInstantiate", "");
    for (int round = 3; round < 6; ++round) {
      if (!fillInput(r, static_cast<Coll>(c), d, count, round)) return r.fail("fill", "");
      if (cu.graphLaunch(exec, r.stream) != 0) return r.fail("cuGraphLaunch", "");
      if (!drain(r, kCollNames[c])) return;
      check(r, static_cast<Coll>(c), d, count, round, "graph");
    }
    cu.graphExecDestroy(exec);
    cu.graphDestroy(graph);
  }
  cu.memFree(r.in);
  cu.memFree(r.out);
  if (tideCommDestroy(r.comm) != tideSuccess) r.fail("tideCommDestroy", tideGetLastError(nullptr));
  cu.streamDestroy(r.stream);
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? atoi(argv[1]) : 2;
  if (n < 1 || n > 16) {
    fprintf(stderr, "usage: stream_device_test NRANKS\n");
    return 2;
  }
  std::string why;
  if (getenv("TIDE_CUDA_DISABLE") != nullptr || !loadCuda(&why)) {
    printf("SKIP: %s\n", why.empty() ? "TIDE_CUDA_DISABLE set" : why.c_str());
    return 77;
  }
  tideUniqueId id;
  if (tideGetUniqueId(&id) != tideSuccess) {
    fprintf(stderr, "tideGetUniqueId: %s\n", tideGetLastError(nullptr));
    return 1;
  }
  std::vector<Rank> ranks(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    ranks[i].rank = i;
    ranks[i].n = n;
    threads.emplace_back(runRank, std::ref(ranks[i]), std::cref(id));
  }
  for (auto& t : threads) t.join();
  int failures = 0;
  for (const Rank& r : ranks) failures += r.failures;
  printf("stream_device_test: %d rank(s) as threads, CUDA streams + graphs: %s (%d failure(s))\n",
         n, failures == 0 ? "PASS" : "FAIL", failures);
  return failures == 0 ? 0 : 1;
}
