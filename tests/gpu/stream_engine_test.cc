// The device collective engine as the CUDA-stream path of tideAllReduce (and
// of tideAllGather / tideReduceScatter / tideBroadcast) on a one-node
// communicator (suite gpu): N ranks as threads of one process on
// GPU 0, each on its own CUDA stream. Every dtype for sum and every other op
// (prod, max, min, avg) for float32; sizes 8 B .. 64 MiB; out of place and in
// place; host buffers on the stream; a CUDA graph capture replayed 3 times
// with new inputs. Then AllGather / ReduceScatter / Broadcast: every dtype for
// RS sum, the other ops on float32, 8 B .. 64 MiB, in and out of place, each
// captured and replayed 3 times. Results are checked element by element
// against a host reference, and the debug log (TIDE_DEBUG=INFO into a file)
// must show that every rank chose the engine path for every collective.
//
//   stream_engine_test N [MAXBYTES]   (sizes above MAXBYTES, default 64 MiB, skipped)
//
// With TIDE_DEVICE_ALGO=oneshot|twoshot|ring in the environment (the gpu
// suite runs ring and twoshot passes) every All-Reduce runs that kernel, and
// with two or more ranks the log must show every rank running it.
//
// Exits 77 (skip) when no CUDA driver or device is usable. The driver is
// opened with dlopen, so this builds without CUDA. Every wait is bounded.
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
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

// Every dtype: size, and for floats the (mantissa bits, exponent bias) of
// its encoding (exact small values only; 0 bits = integer type).
struct Dtype {
  tideDataType_t t;
  size_t size;
  int mant, bias;
  bool isSigned;
  const char* name;
};
const Dtype kTypes[] = {
    {tideInt8, 1, 0, 0, true, "int8"},       {tideUint8, 1, 0, 0, false, "uint8"},
    {tideInt32, 4, 0, 0, true, "int32"},     {tideUint32, 4, 0, 0, false, "uint32"},
    {tideInt64, 8, 0, 0, true, "int64"},     {tideUint64, 8, 0, 0, false, "uint64"},
    {tideFloat16, 2, 10, 15, true, "half"},  {tideFloat32, 4, 23, 127, true, "float32"},
    {tideFloat64, 8, 52, 1023, true, "f64"}, {tideBfloat16, 2, 7, 127, true, "bf16"},
    {tideFloat8e4m3, 1, 3, 7, true, "e4m3"}, {tideFloat8e5m2, 1, 2, 15, true, "e5m2"},
};
const Dtype& f32() { return kTypes[7]; }

// Encodes a small non-negative integer (exact in the format) / decodes.
uint64_t encode(const Dtype& d, double v) {
  if (d.mant == 0) return static_cast<uint64_t>(static_cast<int64_t>(v));
  if (d.t == tideFloat32) {
    const float f = static_cast<float>(v);
    uint32_t b;
    memcpy(&b, &f, 4);
    return b;
  }
  if (d.t == tideFloat64) {
    uint64_t b;
    memcpy(&b, &v, 8);
    return b;
  }
  if (v == 0) return 0;
  const int e = static_cast<int>(std::floor(std::log2(v)));
  const auto m = static_cast<uint64_t>((v / std::ldexp(1.0, e) - 1.0) * std::ldexp(1.0, d.mant));
  return (static_cast<uint64_t>(e + d.bias) << d.mant) | m;
}
double decode(const Dtype& d, uint64_t b) {
  if (d.mant == 0) {
    if (!d.isSigned) return static_cast<double>(b);
    const int shift = 64 - static_cast<int>(d.size) * 8;
    return static_cast<double>(static_cast<int64_t>(b << shift) >> shift);
  }
  if (d.t == tideFloat32) {
    float f;
    const auto u = static_cast<uint32_t>(b);
    memcpy(&f, &u, 4);
    return f;
  }
  if (d.t == tideFloat64) {
    double v;
    memcpy(&v, &b, 8);
    return v;
  }
  const uint64_t expBits = (b >> d.mant) & ((1u << (d.size * 8 - 1 - d.mant)) - 1);
  const uint64_t m = b & ((uint64_t{1} << d.mant) - 1);
  if (expBits == 0 && m == 0) return 0;
  const double sign = (b >> (d.size * 8 - 1)) & 1 ? -1 : 1;
  return sign * std::ldexp(1.0 + std::ldexp(static_cast<double>(m), -d.mant),
                           static_cast<int>(expBits) - d.bias);
}
void put(void* p, size_t i, const Dtype& d, double v) {
  const uint64_t b = encode(d, v);
  memcpy(static_cast<char*>(p) + i * d.size, &b, d.size);  // little-endian
}
double get(const void* p, size_t i, const Dtype& d) {
  uint64_t b = 0;
  memcpy(&b, static_cast<const char*>(p) + i * d.size, d.size);
  return decode(d, b);
}

// Inputs: sums, products and averages stay exact in every format (fp8 and
// prod: 0..1 / 1..2 per rank; averages over 1, 2 or 4 ranks).
double inVal(const Dtype& d, tideRedOp_t op, int rank, size_t i, int round) {
  if (op == tideProd) return static_cast<double>(1 + (rank + i + round) % 2);
  if (d.size == 1 && d.mant != 0) return static_cast<double>((rank + i + round) % 2);
  return static_cast<double>((rank + 1) + static_cast<int>((i + round) % 5));
}
double want(const Dtype& d, tideRedOp_t op, int n, size_t i, int round) {
  double acc = inVal(d, op, 0, i, round);
  for (int p = 1; p < n; ++p) {
    const double x = inVal(d, op, p, i, round);
    acc = op == tideProd  ? acc * x
          : op == tideMax ? std::max(acc, x)
          : op == tideMin ? std::min(acc, x)
                          : acc + x;
  }
  if (op == tideAvg) acc = d.mant == 0 ? std::trunc(acc / n) : acc / n;
  return acc;
}

struct Rank {
  int rank = 0, n = 1;
  tideComm_t comm = nullptr;
  void* stream = nullptr;
  CuDevPtr in = 0, out = 0;
  int failures = 0;
  long checks = 0;
  void fail(const std::string& what) {
    if (++failures <= 10) fprintf(stderr, "rank %d: %s\n", rank, what.c_str());
  }
};

bool fill(Rank& r, const Dtype& d, tideRedOp_t op, size_t count, int round, bool inPlace) {
  std::vector<char> h(count * d.size);
  for (size_t i = 0; i < count; ++i) put(h.data(), i, d, inVal(d, op, r.rank, i, round));
  if (!htodOn(r.stream, r.in, h.data(), h.size())) return false;
  if (inPlace) return true;
  std::vector<char> z(count * d.size, 0x5a);
  return htodOn(r.stream, r.out, z.data(), z.size());
}

void check(Rank& r, const Dtype& d, tideRedOp_t op, size_t count, int round, bool inPlace,
           const char* mode) {
  std::vector<char> h(count * d.size);
  if (cu.dtoh(h.data(), inPlace ? r.in : r.out, h.size()) != 0) return r.fail("cuMemcpyDtoH");
  ++r.checks;
  for (size_t i = 0; i < count; ++i) {
    const double w = want(d, op, r.n, i, round);
    if (get(h.data(), i, d) != w) {
      char buf[240];
      snprintf(buf, sizeof(buf), "%s %s op %d count %zu%s round %d: element %zu is %g, want %g",
               mode, d.name, static_cast<int>(op), count, inPlace ? " in place" : "", round, i,
               get(h.data(), i, d), w);
      return r.fail(buf);
    }
  }
}

bool drain(Rank& r, const char* what) {
  if (!syncStream(r.stream)) {
    r.fail(std::string(what) + ": stream did not drain within 120 s (or failed)");
    return false;
  }
  tideResult_t async = tideSuccess;
  tideCommGetAsyncError(r.comm, &async);
  if (async != tideSuccess) {
    r.fail(std::string(what) + ": async error: " + tideGetLastError(r.comm));
    return false;
  }
  return true;
}

bool runOne(Rank& r, const Dtype& d, tideRedOp_t op, size_t count, bool inPlace, int round) {
  if (!fill(r, d, op, count, round, inPlace)) {
    r.fail("fill");
    return false;
  }
  auto* in = reinterpret_cast<void*>(r.in);
  auto* out = inPlace ? in : reinterpret_cast<void*>(r.out);
  if (tideAllReduce(in, out, count, d.t, op, r.comm, static_cast<tideStream_t>(r.stream)) !=
      tideSuccess) {
    r.fail(std::string("tideAllReduce: ") + tideGetLastError(r.comm));
    return false;
  }
  if (!drain(r, "AllReduce")) return false;
  check(r, d, op, count, round, inPlace, "stream");
  return true;
}

constexpr size_t kMaxBytes = size_t{64} << 20;
size_t gLimit = kMaxBytes;  // largest size run (argv[2])

// AllGather / ReduceScatter / Broadcast on the engine path. `count` as in
// NCCL (AG: per-rank send, RS: per-rank recv, Bcast: the buffer). In place:
// AG send = recv + rank * count, RS recv = send + rank * count, Bcast
// send == recv. Inputs are inVal of (rank, global element index, round);
// outputs are checked against the host reference of the same formula.
enum class Kind { kAllGather, kReduceScatter, kBroadcast };
const char* kindName(Kind k) {
  return k == Kind::kAllGather       ? "AllGather"
         : k == Kind::kReduceScatter ? "ReduceScatter"
                                     : "Broadcast";
}
struct CollBufs {
  void* send;
  void* recv;
  size_t sendElems, recvElems;
};
CollBufs collBufs(const Rank& r, Kind k, const Dtype& d, size_t count, bool inPlace) {
  char* in = reinterpret_cast<char*>(r.in);
  char* out = reinterpret_cast<char*>(r.out);
  const auto n = static_cast<size_t>(r.n);
  const size_t rk = static_cast<size_t>(r.rank);
  switch (k) {
    case Kind::kAllGather:
      return {inPlace ? out + rk * count * d.size : in, out, count, count * n};
    case Kind::kReduceScatter:
      return {in, inPlace ? in + rk * count * d.size : out, count * n, count};
    default:
      return {in, inPlace ? in : out, count, count};
  }
}
bool fillColl(Rank& r, Kind k, const Dtype& d, tideRedOp_t op, size_t count, bool inPlace,
              int round, int root) {
  const CollBufs b = collBufs(r, k, d, count, inPlace);
  if (!inPlace || k == Kind::kAllGather) {
    std::vector<char> z(b.recvElems * d.size, 0x5a);
    if (!htodOn(r.stream, reinterpret_cast<CuDevPtr>(b.recv), z.data(), z.size())) return false;
  }
  const int who = k == Kind::kBroadcast ? root : r.rank;
  std::vector<char> h(b.sendElems * d.size);
  for (size_t i = 0; i < b.sendElems; ++i) put(h.data(), i, d, inVal(d, op, who, i, round));
  // A Broadcast non-root's buffer is garbage before the call.
  if (k == Kind::kBroadcast && r.rank != root) memset(h.data(), 0x33, h.size());
  return htodOn(r.stream, reinterpret_cast<CuDevPtr>(b.send), h.data(), h.size());
}
double wantColl(Kind k, const Dtype& d, tideRedOp_t op, int n, int rank, size_t count, size_t i,
                int round, int root) {
  switch (k) {
    case Kind::kAllGather:
      return inVal(d, op, static_cast<int>(i / count), i % count, round);
    case Kind::kReduceScatter:
      return want(d, op, n, static_cast<size_t>(rank) * count + i, round);
    default:
      return inVal(d, op, root, i, round);
  }
}
void checkColl(Rank& r, Kind k, const Dtype& d, tideRedOp_t op, size_t count, bool inPlace,
               int round, int root, const char* mode) {
  const CollBufs b = collBufs(r, k, d, count, inPlace);
  std::vector<char> h(b.recvElems * d.size);
  if (cu.dtoh(h.data(), reinterpret_cast<CuDevPtr>(b.recv), h.size()) != 0) {
    return r.fail("cuMemcpyDtoH");
  }
  ++r.checks;
  for (size_t i = 0; i < b.recvElems; ++i) {
    const double w = wantColl(k, d, op, r.n, r.rank, count, i, round, root);
    if (get(h.data(), i, d) != w) {
      char buf[260];
      snprintf(buf, sizeof(buf),
               "%s %s %s op %d count %zu%s root %d round %d: element %zu is %g, want %g", mode,
               kindName(k), d.name, static_cast<int>(op), count, inPlace ? " in place" : "", root,
               round, i, get(h.data(), i, d), w);
      return r.fail(buf);
    }
  }
}
tideResult_t callColl(Rank& r, Kind k, const Dtype& d, tideRedOp_t op, size_t count, bool inPlace,
                      int root) {
  const CollBufs b = collBufs(r, k, d, count, inPlace);
  auto* s = static_cast<tideStream_t>(r.stream);
  switch (k) {
    case Kind::kAllGather:
      return tideAllGather(b.send, b.recv, count, d.t, r.comm, s);
    case Kind::kReduceScatter:
      return tideReduceScatter(b.send, b.recv, count, d.t, op, r.comm, s);
    default:
      return tideBroadcast(b.send, b.recv, count, d.t, root, r.comm, s);
  }
}
bool runColl(Rank& r, Kind k, const Dtype& d, tideRedOp_t op, size_t count, bool inPlace,
             int round) {
  const int root = (round + 1) % r.n;
  if (!fillColl(r, k, d, op, count, inPlace, round, root)) {
    r.fail("fill");
    return false;
  }
  if (callColl(r, k, d, op, count, inPlace, root) != tideSuccess) {
    r.fail(std::string(kindName(k)) + ": " + tideGetLastError(r.comm));
    return false;
  }
  if (!drain(r, kindName(k))) return false;
  checkColl(r, k, d, op, count, inPlace, round, root, "stream");
  return true;
}

// 5. AllGather, ReduceScatter, Broadcast: every dtype for RS sum (AG and
// Bcast move bytes: float32, int8 and f64), the other ops on float32, the
// largest buffer 8 B .. 64 MiB, in place and out of place; then each
// captured once and replayed 3 times with new inputs.
bool runNewCollectives(Rank& r, const size_t* sizes, size_t nsizes) {
  const auto n = static_cast<size_t>(r.n);
  for (Kind k : {Kind::kReduceScatter, Kind::kAllGather, Kind::kBroadcast}) {
    for (const Dtype& d : kTypes) {
      if (k != Kind::kReduceScatter && d.t != tideFloat32 && d.t != tideInt8 &&
          d.t != tideFloat64) {
        continue;
      }
      for (size_t i = 0; i < nsizes; ++i) {
        const size_t bytes = sizes[i];
        if ((d.t != tideFloat32 && bytes > (size_t{1} << 20)) || bytes > gLimit) continue;
        const size_t per = k == Kind::kBroadcast ? 1 : n;
        const size_t count = std::max<size_t>(1, bytes / d.size / per);
        for (bool inPlace : {false, true}) {
          if (!runColl(r, k, d, tideSum, count, inPlace, static_cast<int>(bytes % 7))) return false;
        }
      }
    }
  }
  for (tideRedOp_t op : {tideProd, tideMax, tideMin, tideAvg}) {
    for (size_t bytes : {size_t{8}, size_t{4096}, size_t{1} << 20, kMaxBytes}) {
      if (bytes > gLimit) continue;
      for (bool inPlace : {false, true}) {
        const size_t count = std::max<size_t>(1, bytes / 4 / n);
        if (!runColl(r, Kind::kReduceScatter, f32(), op, count, inPlace, 1)) return false;
      }
    }
  }
  const int mode = r.n > 1 ? 1 : 0;  // thread-local capture with several ranks
  for (Kind k : {Kind::kAllGather, Kind::kReduceScatter, Kind::kBroadcast}) {
    for (size_t count : {size_t{1001}, (size_t{8} << 20) / 4 / n}) {
      if (count * 4 * n > gLimit) continue;
      const bool inPlace = count == 1001;
      const int root = r.n - 1;
      if (!fillColl(r, k, f32(), tideSum, count, inPlace, 0, root)) return r.fail("fill"), false;
      if (cu.beginCapture(r.stream, mode) != 0) return r.fail("cuStreamBeginCapture"), false;
      const tideResult_t rc = callColl(r, k, f32(), tideSum, count, inPlace, root);
      void* graph = nullptr;
      const int erc = cu.endCapture(r.stream, &graph);
      if (rc != tideSuccess) {
        r.fail(std::string("captured ") + kindName(k) + ": " + tideGetLastError(r.comm));
        return false;
      }
      if (erc != 0) return r.fail("cuStreamEndCapture " + std::to_string(erc)), false;
      void* exec = nullptr;
      if (cu.instantiate(&exec, graph, 0) != 0) return r.fail("cuGraphInstantiate"), false;
      for (int round = 3; round < 6; ++round) {
        // The root is fixed by the capture: fill with the same one.
        if (!fillColl(r, k, f32(), tideSum, count, inPlace, round, root)) {
          return r.fail("fill"), false;
        }
        if (cu.graphLaunch(exec, r.stream) != 0) return r.fail("cuGraphLaunch"), false;
        if (!drain(r, "graph replay")) return false;
        checkColl(r, k, f32(), tideSum, count, inPlace, round, root, "graph");
      }
      cu.graphExecDestroy(exec);
      cu.graphDestroy(graph);
    }
  }
  return true;
}

void runRank(Rank& r, const tideUniqueId& id) {
  cu.ctxSetCurrent(cu.ctx);
  if (tideCommInitRank(&r.comm, r.n, id, r.rank) != tideSuccess) {
    return r.fail(std::string("tideCommInitRank: ") + tideGetLastError(nullptr));
  }
  if (cu.streamCreate(&r.stream, 1) != 0) return r.fail("cuStreamCreate");
  if (cu.memAlloc(&r.in, kMaxBytes) != 0 || cu.memAlloc(&r.out, kMaxBytes) != 0) {
    return r.fail("cuMemAlloc");
  }
  const size_t sizes[] = {8, 1000, 4096, 65536 + 8, size_t{1} << 20, size_t{16} << 20, kMaxBytes};
  // 1. Sum: every dtype, every size (up to 1 MiB for all but float32).
  for (const Dtype& d : kTypes) {
    for (size_t bytes : sizes) {
      if ((d.t != tideFloat32 && bytes > (size_t{1} << 20)) || bytes > gLimit) continue;
      const size_t count = std::max<size_t>(1, bytes / d.size);
      for (bool inPlace : {false, true}) {
        if (!runOne(r, d, tideSum, count, inPlace, static_cast<int>(bytes % 7))) return;
      }
    }
  }
  // 2. The other ops on float32.
  for (tideRedOp_t op : {tideProd, tideMax, tideMin, tideAvg}) {
    for (size_t bytes : {size_t{8}, size_t{4096}, size_t{1} << 20, kMaxBytes}) {
      if (bytes > gLimit) continue;
      for (bool inPlace : {false, true}) {
        if (!runOne(r, f32(), op, bytes / 4, inPlace, 1)) return;
      }
    }
  }
  // 3. Host buffers on the CUDA stream (the engine works on a pinned copy).
  {
    const size_t count = 4099;
    std::vector<float> hin(count), hout(count, -1.f);
    for (size_t i = 0; i < count; ++i) {
      hin[i] = static_cast<float>(inVal(f32(), tideSum, r.rank, i, 2));
    }
    if (tideAllReduce(hin.data(), hout.data(), count, tideFloat32, tideSum, r.comm,
                      static_cast<tideStream_t>(r.stream)) != tideSuccess) {
      return r.fail(std::string("host-buffer AllReduce: ") + tideGetLastError(r.comm));
    }
    if (!drain(r, "host-buffer AllReduce")) return;
    for (size_t i = 0; i < count; ++i) {
      if (hout[i] != want(f32(), tideSum, r.n, i, 2)) {
        r.fail("host-buffer AllReduce: wrong at " + std::to_string(i));
        break;
      }
    }
  }
  // 4. Graph capture + 3 replays with new inputs (sum f32 and avg int32,
  // small and large, in place and out of place).
  struct G {
    const Dtype* d;
    tideRedOp_t op;
    size_t count;
    bool inPlace;
  };
  const G graphs[] = {{&f32(), tideSum, 4099, false},
                      {&kTypes[2], tideAvg, 1000, true},
                      {&f32(), tideSum, (size_t{16} << 20) / 4, true}};
  for (const G& g : graphs) {
    const int mode = r.n > 1 ? 1 : 0;  // thread-local with several ranks
    if (!fill(r, *g.d, g.op, g.count, 0, g.inPlace)) return r.fail("fill");
    if (cu.beginCapture(r.stream, mode) != 0) return r.fail("cuStreamBeginCapture");
    auto* in = reinterpret_cast<void*>(r.in);
    auto* out = g.inPlace ? in : reinterpret_cast<void*>(r.out);
    const tideResult_t rc =
        tideAllReduce(in, out, g.count, g.d->t, g.op, r.comm, static_cast<tideStream_t>(r.stream));
    void* graph = nullptr;
    const int erc = cu.endCapture(r.stream, &graph);
    if (rc != tideSuccess) return r.fail(std::string("captured: ") + tideGetLastError(r.comm));
    if (erc != 0) return r.fail("cuStreamEndCapture " + std::to_string(erc));
    void* exec = nullptr;
    if (cu.instantiate(&exec, graph, 0) != 0) return r.fail("cuGraphInstantiate");
    for (int round = 3; round < 6; ++round) {
      if (!fill(r, *g.d, g.op, g.count, round, g.inPlace)) return r.fail("fill");
      if (cu.graphLaunch(exec, r.stream) != 0) return r.fail("cuGraphLaunch");
      if (!drain(r, "graph replay")) return;
      check(r, *g.d, g.op, g.count, round, g.inPlace, "graph");
    }
    cu.graphExecDestroy(exec);
    cu.graphDestroy(graph);
  }
  if (!runNewCollectives(r, sizes, sizeof(sizes) / sizeof(sizes[0]))) return;
  cu.memFree(r.in);
  cu.memFree(r.out);
  if (tideCommDestroy(r.comm) != tideSuccess) {
    r.fail(std::string("tideCommDestroy: ") + tideGetLastError(nullptr));
  }
  cu.streamDestroy(r.stream);
}

// Log lines holding `what` (one per rank: the engine's creation, or a
// collective's first call on the engine path).
int logLines(const std::string& path, const char* what) {
  std::ifstream f(path);
  std::string line;
  int n = 0;
  while (std::getline(f, line)) n += line.find(what) != std::string::npos;
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? atoi(argv[1]) : 2;
  if (n < 1 || n > 8) {
    fprintf(stderr, "usage: stream_engine_test NRANKS (1..8)\n");
    return 2;
  }
  if (argc > 2) gLimit = std::min<size_t>(kMaxBytes, strtoull(argv[2], nullptr, 0));
  std::string why;
  if (getenv("TIDE_CUDA_DISABLE") != nullptr || !loadCuda(&why)) {
    printf("SKIP: %s\n", why.empty() ? "TIDE_CUDA_DISABLE set" : why.c_str());
    return 77;
  }
  const std::string log = "/tmp/tide_stream_engine_" + std::to_string(getpid()) + ".log";
  setenv("TIDE_DEBUG", "INFO", 1);
  setenv("TIDE_DEBUG_FILE", log.c_str(), 1);
  tideUniqueId id;
  if (tideGetUniqueId(&id) != tideSuccess) {
    fprintf(stderr, "tideGetUniqueId: %s\n", tideGetLastError(nullptr));
    return 1;
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Rank> ranks(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    ranks[i].rank = i;
    ranks[i].n = n;
    threads.emplace_back(runRank, std::ref(ranks[i]), std::cref(id));
  }
  for (auto& t : threads) t.join();
  int failures = 0;
  long checks = 0;
  for (const Rank& r : ranks) {
    failures += r.failures;
    checks += r.checks;
  }
  bool pathOk = true;
  std::vector<std::string> wants = {"uses the engine path", "allgather runs on the engine path",
                                    "reducescatter runs on the engine path",
                                    "broadcast runs on the engine path"};
  const char* forced = getenv("TIDE_DEVICE_ALGO");
  std::string algoName;
  if (forced != nullptr && n >= 2) {
    const std::string f = forced;
    algoName = f == "ring"      ? "ring"
               : f == "twoshot" ? "two-shot"
               : f == "oneshot" ? "one-shot"
                                : "";
    if (!algoName.empty()) wants.push_back("all-reduce algorithm " + algoName + " ");
  }
  for (const std::string& wantLine : wants) {
    const char* what = wantLine.c_str();
    const int lines = logLines(log, what);
    if (lines != n) {
      pathOk = false;
      fprintf(stderr, "%d of %d ranks logged '%s' (log %s): the staged path ran\n", lines, n, what,
              log.c_str());
    }
  }
  if (pathOk) {
    unlink(log.c_str());
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  printf(
      "stream_engine_test: %d rank(s) as threads, up to %zu B, path: %s%s%s, %ld checks, %.1f s: "
      "%s (%d failure(s))\n",
      n, gLimit, pathOk ? "device collective engine" : "NOT the engine",
      algoName.empty() ? "" : ", all-reduce ", algoName.c_str(), checks, secs,
      failures == 0 && pathOk ? "PASS" : "FAIL", failures);
  return failures == 0 && pathOk ? 0 : 1;
}
