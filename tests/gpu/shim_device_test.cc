// NCCL shim on device buffers (suite gpu): an NCCL program compiled against
// nccl.h and linked to Tide's libnccl.so.2 runs every collective x datatype
// (x operator for reductions), out-of-place and in-place, on cuMemAlloc'd
// buffers, with N ranks sharing one GPU, as threads of one process or as
// processes, and checks every element against a host reference.
//
//   shim_device_test threads|procs N
//
// Exits 77 (skip) when no CUDA driver or device is usable. The CUDA driver
// is opened with dlopen so this builds on machines without CUDA; processes
// are forked before anyone touches CUDA (the parent never does).
#include <dlfcn.h>
#include <nccl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

// ---- CUDA driver, loaded at run time ----------------------------------------
using CuDevPtr = unsigned long long;
struct Cuda {
  int (*init)(unsigned);
  int (*deviceGet)(int*, int);
  int (*primaryCtxRetain)(void**, int);
  int (*ctxSetCurrent)(void*);
  int (*memAlloc)(CuDevPtr*, size_t);
  int (*memFree)(CuDevPtr);
  int (*htod)(CuDevPtr, const void*, size_t);
  int (*dtoh)(void*, CuDevPtr, size_t);
  void* ctx = nullptr;
} cu;

bool loadCuda(std::string* why) {
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    *why = "no libcuda.so.1";
    return false;
  }
  auto sym = [&](const char* n) { return dlsym(h, n); };
  cu.init = reinterpret_cast<int (*)(unsigned)>(sym("cuInit"));
  cu.deviceGet = reinterpret_cast<int (*)(int*, int)>(sym("cuDeviceGet"));
  cu.primaryCtxRetain = reinterpret_cast<int (*)(void**, int)>(sym("cuDevicePrimaryCtxRetain"));
  cu.ctxSetCurrent = reinterpret_cast<int (*)(void*)>(sym("cuCtxSetCurrent"));
  cu.memAlloc = reinterpret_cast<int (*)(CuDevPtr*, size_t)>(sym("cuMemAlloc_v2"));
  cu.memFree = reinterpret_cast<int (*)(CuDevPtr)>(sym("cuMemFree_v2"));
  cu.htod = reinterpret_cast<int (*)(CuDevPtr, const void*, size_t)>(sym("cuMemcpyHtoD_v2"));
  cu.dtoh = reinterpret_cast<int (*)(void*, CuDevPtr, size_t)>(sym("cuMemcpyDtoH_v2"));
  if (!cu.init || !cu.deviceGet || !cu.primaryCtxRetain || !cu.ctxSetCurrent || !cu.memAlloc ||
      !cu.memFree || !cu.htod || !cu.dtoh) {
    *why = "libcuda.so.1 lacks a driver entry point";
    return false;
  }
  int dev = 0;
  int rc = cu.init(0);
  if (rc == 0) rc = cu.deviceGet(&dev, 0);
  if (rc == 0) rc = cu.primaryCtxRetain(&cu.ctx, dev);
  if (rc == 0) rc = cu.ctxSetCurrent(cu.ctx);
  if (rc != 0) {
    *why = "CUDA driver error " + std::to_string(rc) + " (no usable device)";
    return false;
  }
  return true;
}

// ---- Values and the host reference -----------------------------------------------
// Inputs are small integers (1..3), so every result below is exact in every
// datatype, fp8 excepted (not tested here; the host-buffer test covers it).
const ncclDataType_t kTypes[] = {ncclInt8,   ncclUint8,   ncclInt32,   ncclUint32,  ncclInt64,
                                 ncclUint64, ncclFloat16, ncclFloat32, ncclFloat64, ncclBfloat16};
const char* typeName(ncclDataType_t t) {
  static const char* names[] = {"int8",   "uint8", "int32", "uint32", "int64",
                                "uint64", "half",  "float", "double", "bf16"};
  return static_cast<int>(t) < 10 ? names[t] : "?";
}
size_t typeSize(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    default:
      return 8;
  }
}
bool isFloat(ncclDataType_t t) {
  return t == ncclFloat16 || t == ncclFloat32 || t == ncclFloat64 || t == ncclBfloat16;
}

void store(ncclDataType_t t, void* base, size_t i, double v) {
  char* p = static_cast<char*>(base) + i * typeSize(t);
  switch (t) {
    case ncclInt8: {
      int8_t x = static_cast<int8_t>(v);
      memcpy(p, &x, 1);
      break;
    }
    case ncclUint8: {
      uint8_t x = static_cast<uint8_t>(v);
      memcpy(p, &x, 1);
      break;
    }
    case ncclInt32: {
      int32_t x = static_cast<int32_t>(v);
      memcpy(p, &x, 4);
      break;
    }
    case ncclUint32: {
      uint32_t x = static_cast<uint32_t>(v);
      memcpy(p, &x, 4);
      break;
    }
    case ncclInt64: {
      int64_t x = static_cast<int64_t>(v);
      memcpy(p, &x, 8);
      break;
    }
    case ncclUint64: {
      uint64_t x = static_cast<uint64_t>(v);
      memcpy(p, &x, 8);
      break;
    }
    case ncclFloat32: {
      float x = static_cast<float>(v);
      memcpy(p, &x, 4);
      break;
    }
    case ncclFloat64:
      memcpy(p, &v, 8);
      break;
    case ncclBfloat16: {  // exact for the small integers used here
      float f = static_cast<float>(v);
      uint32_t u;
      memcpy(&u, &f, 4);
      uint16_t h = static_cast<uint16_t>(u >> 16);
      memcpy(p, &h, 2);
      break;
    }
    case ncclFloat16: {
      float f = static_cast<float>(v);
      uint32_t u;
      memcpy(&u, &f, 4);
      uint16_t h = 0;
      if (f != 0) {
        uint32_t e = ((u >> 23) & 0xff) - 127 + 15;
        h = static_cast<uint16_t>(((u >> 16) & 0x8000u) | (e << 10) | ((u >> 13) & 0x3ffu));
      }
      memcpy(p, &h, 2);
      break;
    }
    default:
      break;
  }
}

double load(ncclDataType_t t, const void* base, size_t i) {
  const char* p = static_cast<const char*>(base) + i * typeSize(t);
  switch (t) {
    case ncclInt8: {
      int8_t x;
      memcpy(&x, p, 1);
      return x;
    }
    case ncclUint8: {
      uint8_t x;
      memcpy(&x, p, 1);
      return x;
    }
    case ncclInt32: {
      int32_t x;
      memcpy(&x, p, 4);
      return x;
    }
    case ncclUint32: {
      uint32_t x;
      memcpy(&x, p, 4);
      return x;
    }
    case ncclInt64: {
      int64_t x;
      memcpy(&x, p, 8);
      return static_cast<double>(x);
    }
    case ncclUint64: {
      uint64_t x;
      memcpy(&x, p, 8);
      return static_cast<double>(x);
    }
    case ncclFloat32: {
      float x;
      memcpy(&x, p, 4);
      return x;
    }
    case ncclFloat64: {
      double x;
      memcpy(&x, p, 8);
      return x;
    }
    case ncclBfloat16: {
      uint16_t h;
      memcpy(&h, p, 2);
      uint32_t u = static_cast<uint32_t>(h) << 16;
      float f;
      memcpy(&f, &u, 4);
      return f;
    }
    case ncclFloat16: {
      uint16_t h;
      memcpy(&h, p, 2);
      const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
      const double mag = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
      return (h & 0x8000) ? -mag : mag;
    }
    default:
      return NAN;
  }
}

double value(int rank, size_t i) { return static_cast<double>((rank + i) % 3 + 1); }

double reduceRef(ncclRedOp_t op, ncclDataType_t t, int n, size_t i) {
  double acc = value(0, i);
  for (int r = 1; r < n; ++r) {
    const double v = value(r, i);
    if (op == ncclSum || op == ncclAvg) acc += v;
    if (op == ncclProd) acc *= v;
    if (op == ncclMax) acc = std::max(acc, v);
    if (op == ncclMin) acc = std::min(acc, v);
  }
  if (op == ncclAvg) acc = isFloat(t) ? acc / n : std::trunc(acc / n);
  return acc;
}

// ---- One rank's checks ---------------------------------------------------------------
struct Rank {
  int rank, n;
  ncclComm_t comm = nullptr;
  int failures = 0;
  char where[160] = {};

  void fail(const char* what, size_t i, double got, double want) {
    if (failures++ < 10) {
      printf("rank %d: %s: %s[%zu] = %g, want %g\n", rank, where, what, i, got, want);
    }
  }
  bool ok(ncclResult_t rc, const char* call) {
    if (rc == ncclSuccess) return true;
    printf("rank %d: %s: %s -> %s: %s\n", rank, where, call, ncclGetErrorString(rc),
           ncclGetLastError(comm));
    ++failures;
    return false;
  }
};

constexpr size_t kCount = 1001;  // odd on purpose

// Device buffer filled from host values; read back for the check.
struct DevBuf {
  CuDevPtr p = 0;
  size_t bytes = 0;
  explicit DevBuf(size_t b) : bytes(b) { cu.memAlloc(&p, b == 0 ? 1 : b); }
  ~DevBuf() { cu.memFree(p); }
  void* ptr() const { return reinterpret_cast<void*>(p); }
  void put(const std::vector<char>& h) { cu.htod(p, h.data(), h.size()); }
  std::vector<char> get() const {
    std::vector<char> h(bytes);
    cu.dtoh(h.data(), p, bytes);
    return h;
  }
};

void checkAll(Rank& R) {
  const int n = R.n, me = R.rank;
  const ncclRedOp_t ops[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
  const char* opNames[] = {"sum", "prod", "max", "min", "avg"};
  for (ncclDataType_t t : kTypes) {
    const size_t es = typeSize(t), c = kCount, big = c * static_cast<size_t>(n);
    std::vector<char> mine(big * es), exp(big * es);
    for (size_t i = 0; i < big; ++i) store(t, mine.data(), i, value(me, i));
    DevBuf s(big * es), d(big * es);
    auto expectAt = [&](const char* what, const std::vector<char>& got, size_t i, double want) {
      const double g = load(t, got.data(), i);
      if (g != want) R.fail(what, i, g, want);
    };
    for (int inPlace = 0; inPlace < 2; ++inPlace) {
      void* out = inPlace ? s.ptr() : d.ptr();
      for (int o = 0; o < 5; ++o) {
        snprintf(R.where, sizeof(R.where), "%s %s %s", typeName(t), opNames[o],
                 inPlace ? "in-place" : "out-of-place");
        s.put(mine);
        if (R.ok(ncclAllReduce(s.ptr(), out, c, t, ops[o], R.comm, nullptr), "AllReduce")) {
          auto got = (inPlace ? s : d).get();
          for (size_t i = 0; i < c; ++i) expectAt("allreduce", got, i, reduceRef(ops[o], t, n, i));
        }
        s.put(mine);
        const int root = n - 1;
        if (R.ok(ncclReduce(s.ptr(), out, c, t, ops[o], root, R.comm, nullptr), "Reduce") &&
            me == root) {
          auto got = (inPlace ? s : d).get();
          for (size_t i = 0; i < c; ++i) expectAt("reduce", got, i, reduceRef(ops[o], t, n, i));
        }
        // ReduceScatter: rank me gets block me of the reduction of n blocks.
        s.put(mine);
        void* rsOut = inPlace ? static_cast<char*>(s.ptr()) + me * c * es : d.ptr();
        if (R.ok(ncclReduceScatter(s.ptr(), rsOut, c, t, ops[o], R.comm, nullptr),
                 "ReduceScatter")) {
          auto got = (inPlace ? s : d).get();
          const size_t off = inPlace ? me * c : 0;
          for (size_t i = 0; i < c; ++i) {
            expectAt("reducescatter", got, off + i, reduceRef(ops[o], t, n, me * c + i));
          }
        }
      }
      snprintf(R.where, sizeof(R.where), "%s %s", typeName(t),
               inPlace ? "in-place" : "out-of-place");
      // Broadcast from the last rank.
      s.put(mine);
      const int root = n - 1;
      if (R.ok(ncclBroadcast(s.ptr(), out, c, t, root, R.comm, nullptr), "Broadcast")) {
        auto got = (inPlace ? s : d).get();
        for (size_t i = 0; i < c; ++i) expectAt("broadcast", got, i, value(root, i));
      }
      // AllGather: in place means the input is block `me` of the output.
      s.put(mine);
      const void* agIn = inPlace ? static_cast<char*>(s.ptr()) + me * c * es : s.ptr();
      if (inPlace) {
        std::vector<char> blk(big * es);
        for (size_t i = 0; i < c; ++i) store(t, blk.data(), me * c + i, value(me, i));
        s.put(blk);
      }
      if (R.ok(ncclAllGather(agIn, out, c, t, R.comm, nullptr), "AllGather")) {
        auto got = (inPlace ? s : d).get();
        for (int p = 0; p < n; ++p)
          for (size_t i = 0; i < c; ++i) expectAt("allgather", got, p * c + i, value(p, i));
      }
      // AlltoAll (out of place only: NCCL does not define it in place).
      if (!inPlace) {
        s.put(mine);
        if (R.ok(ncclAlltoAll(s.ptr(), d.ptr(), c, t, R.comm, nullptr), "AlltoAll")) {
          auto got = d.get();
          for (int p = 0; p < n; ++p)
            for (size_t i = 0; i < c; ++i)
              expectAt("alltoall", got, p * c + i, value(p, me * c + i));
        }
        // Ring Send/Recv in a group.
        s.put(mine);
        ncclGroupStart();
        ncclSend(s.ptr(), c, t, (me + 1) % n, R.comm, nullptr);
        ncclRecv(d.ptr(), c, t, (me + n - 1) % n, R.comm, nullptr);
        if (R.ok(ncclGroupEnd(), "Send/Recv group")) {
          auto got = d.get();
          for (size_t i = 0; i < c; ++i) expectAt("sendrecv", got, i, value((me + n - 1) % n, i));
        }
      }
    }
  }
}

// One rank, device buffers, inside a group: the local copy runs at
// ncclGroupEnd (issue 16), so it reads what the input holds then, not at the
// call (a synchronous write in between decides which).
void checkGroupDefersLocalCopy(Rank& R) {
  if (R.n != 1) return;
  const size_t c = 256, bytes = c * sizeof(float);
  CuDevPtr in = 0, out = 0;
  if (cu.memAlloc(&in, bytes) != 0 || cu.memAlloc(&out, bytes) != 0) {
    ++R.failures;
    return;
  }
  std::vector<float> v1(c, 1.f), v2(c, 2.f), got(c, 0.f);
  cu.htod(in, v1.data(), bytes);
  ncclGroupStart();
  ncclAllReduce(reinterpret_cast<void*>(in), reinterpret_cast<void*>(out), c, ncclFloat32, ncclSum,
                R.comm, nullptr);
  cu.htod(in, v2.data(), bytes);  // after the call, before the group ends
  if (R.ok(ncclGroupEnd(), "group of one local All-Reduce")) {
    cu.dtoh(got.data(), out, bytes);
    if (got[0] != 2.f || got[c - 1] != 2.f) {
      printf(
          "rank 0: the one-rank device All-Reduce inside a group ran at call time "
          "(%g, want 2)\n",
          got[0]);
      ++R.failures;
    }
  }
  cu.memFree(in);
  cu.memFree(out);
}

int runRank(int rank, int n, const ncclUniqueId& id) {
  Rank R{rank, n};
  if (cu.ctxSetCurrent(cu.ctx) != 0) return 1;
  snprintf(R.where, sizeof(R.where), "init");
  if (!R.ok(ncclCommInitRank(&R.comm, n, id, rank), "ncclCommInitRank")) return 1;
  checkAll(R);
  checkGroupDefersLocalCopy(R);
  ncclCommDestroy(R.comm);
  return R.failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 || (strcmp(argv[1], "threads") != 0 && strcmp(argv[1], "procs") != 0)) {
    fprintf(stderr, "usage: %s threads|procs N\n", argv[0]);
    return 2;
  }
  const bool threads = strcmp(argv[1], "threads") == 0;
  const int n = atoi(argv[2]);
  if (n < 1 || n > 64) return 2;
  setvbuf(stdout, nullptr, _IOLBF, 0);
  // Probe the GPU in a child so that the parent stays CUDA-free for fork().
  pid_t probe = fork();
  if (probe == 0) {
    std::string why;
    if (!loadCuda(&why)) {
      printf("SKIP: %s\n", why.c_str());
      _exit(77);
    }
    _exit(0);
  }
  int st = 0;
  waitpid(probe, &st, 0);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) return WIFEXITED(st) ? WEXITSTATUS(st) : 1;

  // The unique id travels through shared memory from rank 0.
  struct Shared {
    std::atomic<int> ready;
    ncclUniqueId id;
  };
  auto* sh = static_cast<Shared*>(
      mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  if (sh == MAP_FAILED) return 1;
  new (sh) Shared{};
  int failed = 0;
  if (threads) {
    std::string why;
    if (!loadCuda(&why) || ncclGetUniqueId(&sh->id) != ncclSuccess) return 1;
    std::vector<std::thread> ts;
    std::vector<int> rc(static_cast<size_t>(n), 0);
    for (int r = 0; r < n; ++r) ts.emplace_back([&, r] { rc[r] = runRank(r, n, sh->id); });
    for (auto& t : ts) t.join();
    for (int r : rc) failed += r != 0;
  } else {
    std::vector<pid_t> kids;
    for (int r = 0; r < n; ++r) {
      pid_t pid = fork();
      if (pid == 0) {
        std::string why;
        if (!loadCuda(&why)) _exit(1);
        if (r == 0) {
          if (ncclGetUniqueId(&sh->id) != ncclSuccess) _exit(1);
          sh->ready.store(1);
        }
        for (int w = 0; sh->ready.load() == 0 && w < 60000; ++w) usleep(1000);
        _exit(runRank(r, n, sh->id));
      }
      kids.push_back(pid);
    }
    for (pid_t k : kids) {
      int s = 0;
      waitpid(k, &s, 0);
      failed += !(WIFEXITED(s) && WEXITSTATUS(s) == 0);
    }
  }
  printf("shim device buffers, %d ranks as %s on one GPU: %s\n", n, argv[1],
         failed ? "FAILED" : "all collectives x datatypes correct");
  return failed ? 1 : 0;
}
