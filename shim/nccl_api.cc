// libnccl.so.2: NCCL's C API (the header at /usr/local/cuda/include/nccl.h,
// NCCL 2.28) implemented on Tide's public API. Every function is defined as
// pnccl* (the profiling name) and exported; nccl* is a weak alias, as tools
// that interpose on NCCL expect. No C++ exception leaves an entry point.
//
// Buffers: in host-buffer mode (TIDE_SHIM_HOST_BUFFERS=1) pointers are host
// memory and operations complete before the call returns (the cudaStream_t
// is ignored). In GPU mode, host buffers are accepted after the caller's
// stream has drained; device buffers on one-rank communicators are local
// copies on the caller's stream, and otherwise are staged through host memory
// around the same Tide collective (shim/staging.h, nccl_coll.cc).
#include <stdlib.h>

#include <chrono>
#include <cstddef>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "cuda/cuda_loader.h"
#include "shim/shim_internal.h"

using tide::shim::fail;
using tide::shim::fromTide;
namespace shim = tide::shim;

// Declared by tide.h; absent from some builds of libtide: resolved weakly.
#pragma weak tideCommShrink

static_assert(sizeof(ncclUniqueId) == sizeof(tideUniqueId), "unique id sizes differ");
static_assert(static_cast<int>(ncclFloat8e5m2) == static_cast<int>(tideFloat8e5m2));
static_assert(static_cast<int>(ncclAvg) == static_cast<int>(tideAvg));

namespace {

// ---- Configuration: accepts the ncclConfig_t of any NCCL version ----------
// Fields were only ever appended, so a field is present when the caller's
// size covers it; fields Tide has no use for are ignored.
constexpr unsigned kConfigMagic = 0xcafebeef;

struct Settings {
  tideConfig_t tide = TIDE_CONFIG_INITIALIZER;
  unsigned callerVersion = NCCL_VERSION_CODE;
};

#define SHIM_HAS(cfg, field) ((cfg)->size >= offsetof(ncclConfig_t, field) + sizeof((cfg)->field))

ncclResult_t readConfig(const ncclConfig_t* cfg, Settings* out, const char* what) {
  if (cfg == nullptr) return ncclSuccess;
  if (cfg->size < offsetof(ncclConfig_t, blocking) || cfg->magic != kConfigMagic) {
    return fail(nullptr, ncclInvalidArgument,
                "%s: config not initialised with NCCL_CONFIG_INITIALIZER (size %zu, magic 0x%x)",
                what, cfg->size, cfg->magic);
  }
  out->callerVersion = cfg->version;
  if (SHIM_HAS(cfg, blocking) && cfg->blocking != NCCL_CONFIG_UNDEF_INT) {
    if (cfg->blocking != 0 && cfg->blocking != 1) {
      return fail(nullptr, ncclInvalidArgument, "%s: config.blocking must be 0 or 1, not %d", what,
                  cfg->blocking);
    }
    out->tide.blocking = cfg->blocking;
  }
  if (SHIM_HAS(cfg, commName) && cfg->commName != nullptr) out->tide.commName = cfg->commName;
  return ncclSuccess;
}

// Makes the primary context of `device` current on this thread.
ncclResult_t useDevice(int device, std::string* why) {
  const tide::cuda::DriverApi* api = tide::cuda::driver();
  if (api == nullptr) {
    *why = tide::cuda::probeGpu().detail;
    return ncclUnhandledCudaError;
  }
  int handle = 0;
  void* ctx = nullptr;
  int rc = api->cuDeviceGet(&handle, device);
  if (rc == 0) rc = api->cuDevicePrimaryCtxRetain(&ctx, handle);
  if (rc == 0) rc = api->cuCtxSetCurrent(ctx);
  if (rc != 0) {
    *why = "device " + std::to_string(device) + ": " + tide::cuda::driverErrorString(rc);
    return ncclUnhandledCudaError;
  }
  return ncclSuccess;
}

// A new, not yet created communicator for the calling thread's device.
ncclResult_t newComm(const Settings& s, const char* what, ncclComm_t* out) {
  std::string why;
  const shim::Mode mode = shim::runMode(&why);
  if (mode == shim::Mode::kNone)
    return fail(nullptr, ncclUnhandledCudaError, "%s: %s", what, why.c_str());
  auto* c = new ncclComm;
  c->hostMode = mode == shim::Mode::kHost;
  c->callerVersion = s.callerVersion;
  if (!c->hostMode) {
    c->cudaDev = tide::cuda::ensureContext(&why);
    if (c->cudaDev < 0) {
      delete c;
      return fail(nullptr, ncclUnhandledCudaError, "%s: %s", what, why.c_str());
    }
  }
  *out = c;
  return ncclSuccess;
}

// Creates c->tide (blocking, or in progress for non-blocking configs).
ncclResult_t createTide(ncclComm_t c, int nranks, ncclUniqueId id, int rank, Settings s,
                        const char* what) {
  std::string why;
  if (!c->hostMode && useDevice(c->cudaDev, &why) != ncclSuccess) {
    c->initState = ncclUnhandledCudaError;
    return fail(c, ncclUnhandledCudaError, "%s: %s", what, why.c_str());
  }
  tideUniqueId tid;
  memcpy(&tid, &id, sizeof(tid));
  tideComm_t t = nullptr;
  const tideResult_t r = tideCommInitRankConfig(&t, nranks, tid, rank, &s.tide);
  c->tide = t;
  c->nranks = nranks;
  c->initState = fromTide(c, r, what);
  if (c->initState == ncclInProgress) c->initState = ncclSuccess;  // Tide tracks it
  if (c->initState == ncclSuccess) {
    shim::log(shim::Level::kInfo, "%s: rank %d of %d ready (%s)", what, rank, nranks,
              c->hostMode ? "host buffers" : "GPU");
  }
  return r == tideInProgress ? ncclInProgress : c->initState;
}

ncclResult_t initRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t* config,
                      const char* what) {
  if (comm == nullptr) return fail(nullptr, ncclInvalidArgument, "%s: comm is NULL", what);
  *comm = nullptr;
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    return fail(nullptr, ncclInvalidArgument, "%s: rank %d of %d is invalid", what, rank, nranks);
  }
  Settings s;
  ncclResult_t r = readConfig(config, &s, what);
  if (r != ncclSuccess) return r;
  ncclComm_t c = nullptr;
  r = newComm(s, what, &c);
  if (r != ncclSuccess) return r;
  if (shim::inGroup()) {
    c->initState = ncclInProgress;
    *comm = c;
    shim::deferInit([=] { return createTide(c, nranks, id, rank, s, what); });
    return ncclSuccess;
  }
  r = createTide(c, nranks, id, rank, s, what);
  if (r != ncclSuccess && r != ncclInProgress) {
    delete c;
    return r;
  }
  *comm = c;
  return r;
}

}  // namespace

namespace {

// The error recorded on `c`, without the banner (for re-reporting).
std::string detailOf(ncclComm_t c) {
  std::string m = shim::lastErrorOf(c);
  const size_t skip = strlen(shim::banner()) + 2;
  return m.size() >= skip ? m.substr(skip) : m;
}

// Creates a communicator from `parent` (split or shrink): runs now, or at the
// group end when inside a group. `make` returns Tide's result and the new
// tideComm_t (null when this rank gets none).
ncclResult_t derive(ncclComm_t parent, ncclComm_t* newcomm, ncclConfig_t* config, const char* what,
                    const std::function<tideResult_t(tideComm_t*, tideConfig_t*)>& make) {
  if (parent == nullptr || newcomm == nullptr) {
    return fail(parent, ncclInvalidArgument, "%s: comm or newcomm is NULL", what);
  }
  *newcomm = nullptr;
  Settings s;
  s.callerVersion = parent->callerVersion;
  ncclResult_t r = readConfig(config, &s, what);
  if (r != ncclSuccess) return r;
  auto* c = new ncclComm;
  c->hostMode = parent->hostMode;
  c->cudaDev = parent->cudaDev;
  c->callerVersion = s.callerVersion;
  const bool inherit = config == nullptr;
  auto run = [=]() -> ncclResult_t {
    if (parent->tide == nullptr) {
      delete c;
      *newcomm = nullptr;
      return fail(parent, ncclInvalidUsage, "%s: parent communicator is not initialised", what);
    }
    tideComm_t t = nullptr;
    tideConfig_t tc = s.tide;
    // A NULL config inherits the parent's settings (blocking, timeout, name).
    const tideResult_t tr = make(&t, inherit ? nullptr : &tc);
    const ncclResult_t nr = fromTide(parent, tr, what);
    if (t == nullptr) {  // failed, or not part of any new communicator
      delete c;
      *newcomm = nullptr;
      return nr;
    }
    c->tide = t;
    c->initState = ncclSuccess;
    tideCommCount(t, &c->nranks);
    *newcomm = c;
    return nr;
  };
  if (shim::inGroup()) {
    c->initState = ncclInProgress;
    *newcomm = c;
    shim::deferInit(run);
    return ncclSuccess;
  }
  return run();
}

}  // namespace

// ---- Version, ids, errors ---------------------------------------------------

SHIM_API ncclResult_t pncclGetVersion(int* version) {
  if (version == nullptr)
    return fail(nullptr, ncclInvalidArgument, "ncclGetVersion: version is NULL");
  *version = NCCL_VERSION_CODE;  // the API level implemented, not Tide's version
  return ncclSuccess;
}
SHIM_ALIAS(ncclGetVersion)

SHIM_API ncclResult_t pncclGetUniqueId(ncclUniqueId* uniqueId) {
  return shim::guarded(nullptr, "ncclGetUniqueId", [&]() -> ncclResult_t {
    if (uniqueId == nullptr) return fail(nullptr, ncclInvalidArgument, "ncclGetUniqueId: NULL");
    tideUniqueId id;
    const tideResult_t r = tideGetUniqueId(&id);
    if (r != tideSuccess) return fromTide(nullptr, r, "ncclGetUniqueId");
    memcpy(uniqueId, &id, sizeof(id));
    return ncclSuccess;
  });
}
SHIM_ALIAS(ncclGetUniqueId)

SHIM_API const char* pncclGetErrorString(ncclResult_t result) {
  switch (static_cast<int>(result)) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError:
      return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
      return "internal error - please report this issue to the Tide developers";
    case ncclInvalidArgument:
      return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
      return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
    default:
      return "unknown result code";
  }
}
SHIM_ALIAS(ncclGetErrorString)

SHIM_API const char* pncclGetLastError(ncclComm_t comm) {
  try {
    return shim::lastErrorOf(comm);
  } catch (...) {
    return "Tide NCCL shim: out of memory while reading the last error";
  }
}
SHIM_ALIAS(ncclGetLastError)

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
SHIM_API void pncclResetDebugInit() {}  // the shim reads NCCL_DEBUG on every message
SHIM_ALIAS(ncclResetDebugInit)
#pragma GCC diagnostic pop

// ---- Communicator creation ---------------------------------------------------

SHIM_API ncclResult_t pncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId,
                                              int rank, ncclConfig_t* config) {
  return shim::guarded(nullptr, "ncclCommInitRankConfig", [&] {
    return initRank(comm, nranks, commId, rank, config, "ncclCommInitRankConfig");
  });
}
SHIM_ALIAS(ncclCommInitRankConfig)

SHIM_API ncclResult_t pncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId,
                                        int rank) {
  return shim::guarded(nullptr, "ncclCommInitRank", [&] {
    return initRank(comm, nranks, commId, rank, nullptr, "ncclCommInitRank");
  });
}
SHIM_ALIAS(ncclCommInitRank)

SHIM_API ncclResult_t pncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank,
                                                int nId, ncclUniqueId* commIds,
                                                ncclConfig_t* config) {
  return shim::guarded(nullptr, "ncclCommInitRankScalable", [&]() -> ncclResult_t {
    if (nId < 1 || commIds == nullptr) {
      return fail(nullptr, ncclInvalidArgument, "ncclCommInitRankScalable: no unique ids");
    }
    // Tide's bootstrap root serves every rank: the first id is enough.
    return initRank(newcomm, nranks, commIds[0], myrank, config, "ncclCommInitRankScalable");
  });
}
SHIM_ALIAS(ncclCommInitRankScalable)

SHIM_API ncclResult_t pncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  return shim::guarded(nullptr, "ncclCommInitAll", [&]() -> ncclResult_t {
    const char* what = "ncclCommInitAll";
    if (comms == nullptr || ndev < 1) {
      return fail(nullptr, ncclInvalidArgument, "%s: comms is NULL or ndev %d < 1", what, ndev);
    }
    if (shim::inGroup())
      return fail(nullptr, ncclInvalidUsage, "%s: not allowed inside a group", what);
    std::string why;
    const shim::Mode mode = shim::runMode(&why);
    if (mode == shim::Mode::kNone)
      return fail(nullptr, ncclUnhandledCudaError, "%s: %s", what, why.c_str());
    tideUniqueId tid;
    const tideResult_t tr = tideGetUniqueId(&tid);
    if (tr != tideSuccess) return fromTide(nullptr, tr, what);
    ncclUniqueId id;
    memcpy(&id, &tid, sizeof(id));
    std::vector<std::unique_ptr<ncclComm>> cs;
    for (int i = 0; i < ndev; ++i) {
      cs.push_back(std::make_unique<ncclComm>());
      cs[i]->hostMode = mode == shim::Mode::kHost;
      if (!cs[i]->hostMode) cs[i]->cudaDev = devlist != nullptr ? devlist[i] : i;
    }
    std::vector<ncclResult_t> rs(ndev, ncclSuccess);
    std::vector<std::thread> threads;
    threads.reserve(ndev);
    for (int i = 0; i < ndev; ++i) {
      threads.emplace_back(
          [&, i] { rs[i] = createTide(cs[i].get(), ndev, id, i, Settings{}, what); });
    }
    for (auto& t : threads) t.join();
    for (int i = 0; i < ndev; ++i) {
      if (rs[i] == ncclSuccess) continue;
      const std::string msg = detailOf(cs[i].get());
      for (auto& c : cs) {
        if (c->tide != nullptr) tideCommAbort(c->tide);
      }
      return fail(nullptr, rs[i], "rank %d: %s", i, msg.c_str());
    }
    for (int i = 0; i < ndev; ++i) comms[i] = cs[i].release();
    return ncclSuccess;
  });
}
SHIM_ALIAS(ncclCommInitAll)

SHIM_API ncclResult_t pncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                                     ncclConfig_t* config) {
  return shim::guarded(comm, "ncclCommSplit", [&] {
    return derive(comm, newcomm, config, "ncclCommSplit", [=](tideComm_t* out, tideConfig_t* c) {
      return tideCommSplit(comm->tide, color == NCCL_SPLIT_NOCOLOR ? TIDE_SPLIT_NOCOLOR : color,
                           key, out, c);
    });
  });
}
SHIM_ALIAS(ncclCommSplit)

SHIM_API ncclResult_t pncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                                      ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags) {
  return shim::guarded(comm, "ncclCommShrink", [&]() -> ncclResult_t {
    if (tideCommShrink == nullptr) {
      return fail(comm, ncclInvalidUsage, "ncclCommShrink: this libtide has no tideCommShrink");
    }
    std::vector<int> excl(
        excludeRanksList,
        excludeRanksList +
            (excludeRanksList != nullptr && excludeRanksCount > 0 ? excludeRanksCount : 0));
    const int flags =
        (shrinkFlags & NCCL_SHRINK_ABORT) != 0 ? TIDE_SHRINK_ABORT : TIDE_SHRINK_DEFAULT;
    return derive(comm, newcomm, config, "ncclCommShrink", [=](tideComm_t* out, tideConfig_t* c) {
      return tideCommShrink(comm->tide, excl.data(), static_cast<int>(excl.size()), out, c, flags);
    });
  });
}
SHIM_ALIAS(ncclCommShrink)

// ---- Communicator state and teardown -----------------------------------------

SHIM_API ncclResult_t pncclCommFinalize(ncclComm_t comm) {
  return shim::guarded(comm, "ncclCommFinalize", [&]() -> ncclResult_t {
    if (comm == nullptr)
      return fail(nullptr, ncclInvalidArgument, "ncclCommFinalize: comm is NULL");
    if (comm->initState != ncclSuccess) {
      return comm->initState == ncclInProgress ? ncclSuccess : comm->initState;
    }
    // Host-buffer mode completes operations before their call (or group)
    // returns. Operations on CUDA streams finish on their streams (the caller
    // synchronizes them); what already failed is reported here.
    if (comm->tide == nullptr || comm->hostMode) return ncclSuccess;
    tideResult_t te = tideSuccess;
    const tideResult_t r = tideCommGetAsyncError(comm->tide, &te);
    if (r != tideSuccess) return fromTide(comm, r, "ncclCommFinalize");
    if (te == tideSuccess || te == tideInProgress) return ncclSuccess;
    return fail(comm, shim::mapResult(te, comm->callerVersion), "ncclCommFinalize: %s",
                tideGetLastError(comm->tide));
  });
}
SHIM_ALIAS(ncclCommFinalize)

namespace {

// ncclCommDestroy / ncclCommAbort: ends the Tide communicator with `end`
// (tideCommDestroy or tideCommAbort; an abort unblocks calls of other threads
// waiting inside Tide) and frees the wrapper whatever `end` returns, once no
// call uses it any more; a call still not out after 10 s (a CUDA stream
// that never drains) leaks the wrapper instead of freeing it under that
// call. NULL is a no-op.
ncclResult_t endComm(ncclComm_t comm, const char* what, tideResult_t (*end)(tideComm_t)) {
  if (comm == nullptr) return ncclSuccess;
  return shim::guarded(nullptr, what, [&] {
    comm->closing.store(true);
    const tideResult_t r = comm->tide != nullptr ? end(comm->tide) : tideSuccess;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (comm->users.load() > 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    if (comm->users.load() == 0) delete comm;
    return r == tideSuccess ? ncclSuccess : fromTide(nullptr, r, what);
  });
}

}  // namespace

SHIM_API ncclResult_t pncclCommDestroy(ncclComm_t comm) {
  return endComm(comm, "ncclCommDestroy", tideCommDestroy);
}
SHIM_ALIAS(ncclCommDestroy)

SHIM_API ncclResult_t pncclCommAbort(ncclComm_t comm) {
  return endComm(comm, "ncclCommAbort", tideCommAbort);
}
SHIM_ALIAS(ncclCommAbort)

SHIM_API ncclResult_t pncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  return shim::guarded(comm, "ncclCommRevoke", [&]() -> ncclResult_t {
    return fail(comm, ncclInvalidUsage,
                "ncclCommRevoke (flags %d) is not supported by Tide; use ncclCommAbort, or "
                "ncclCommShrink with NCCL_SHRINK_ABORT",
                revokeFlags);
  });
}
SHIM_ALIAS(ncclCommRevoke)

SHIM_API ncclResult_t pncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  return shim::guarded(comm, "ncclCommGetAsyncError", [&]() -> ncclResult_t {
    if (comm == nullptr || asyncError == nullptr) {
      return fail(comm, ncclInvalidArgument, "ncclCommGetAsyncError: comm or asyncError is NULL");
    }
    if (comm->initState != ncclSuccess || comm->tide == nullptr) {
      *asyncError = comm->tide == nullptr && comm->initState == ncclSuccess ? ncclInvalidUsage
                                                                            : comm->initState;
      return ncclSuccess;
    }
    tideResult_t te = tideSuccess;
    const tideResult_t r = tideCommGetAsyncError(comm->tide, &te);
    if (r != tideSuccess) return fromTide(comm, r, "ncclCommGetAsyncError");
    *asyncError = shim::mapResult(te, comm->callerVersion);
    if (te != tideSuccess && te != tideInProgress) {
      fail(comm, *asyncError, "asynchronous error: %s", tideGetLastError(comm->tide));
    }
    return ncclSuccess;
  });
}
SHIM_ALIAS(ncclCommGetAsyncError)

namespace {
ncclResult_t ready(ncclComm_t comm, const void* out, const char* what) {
  if (comm == nullptr || out == nullptr) {
    return fail(comm, ncclInvalidArgument, "%s: comm or output is NULL", what);
  }
  if (comm->tide == nullptr)
    return fail(comm, ncclInvalidUsage, "%s: communicator not initialised", what);
  return ncclSuccess;
}
}  // namespace

SHIM_API ncclResult_t pncclCommCount(const ncclComm_t comm, int* count) {
  return shim::guarded(comm, "ncclCommCount", [&]() -> ncclResult_t {
    ncclResult_t r = ready(comm, count, "ncclCommCount");
    return r != ncclSuccess ? r : fromTide(comm, tideCommCount(comm->tide, count), "ncclCommCount");
  });
}
SHIM_ALIAS(ncclCommCount)

SHIM_API ncclResult_t pncclCommUserRank(const ncclComm_t comm, int* rank) {
  return shim::guarded(comm, "ncclCommUserRank", [&]() -> ncclResult_t {
    ncclResult_t r = ready(comm, rank, "ncclCommUserRank");
    return r != ncclSuccess
               ? r
               : fromTide(comm, tideCommUserRank(comm->tide, rank), "ncclCommUserRank");
  });
}
SHIM_ALIAS(ncclCommUserRank)

SHIM_API ncclResult_t pncclCommCuDevice(const ncclComm_t comm, int* device) {
  return shim::guarded(comm, "ncclCommCuDevice", [&]() -> ncclResult_t {
    if (comm == nullptr || device == nullptr) {
      return fail(comm, ncclInvalidArgument, "ncclCommCuDevice: comm or device is NULL");
    }
    *device = comm->cudaDev;  // -1 in host-buffer mode
    return ncclSuccess;
  });
}
SHIM_ALIAS(ncclCommCuDevice)

// ---- Buffer registration and memory ---------------------------------------------
// Tide needs no registration: handles only remember the range.

namespace {
struct Registration {
  void* buff;
  size_t size;
};
}  // namespace

SHIM_API ncclResult_t pncclCommRegister(const ncclComm_t comm, void* buff, size_t size,
                                        void** handle) {
  return shim::guarded(comm, "ncclCommRegister", [&]() -> ncclResult_t {
    if (comm == nullptr || handle == nullptr) {
      return fail(comm, ncclInvalidArgument, "ncclCommRegister: comm or handle is NULL");
    }
    *handle = new Registration{buff, size};
    return ncclSuccess;
  });
}
SHIM_ALIAS(ncclCommRegister)

SHIM_API ncclResult_t pncclCommDeregister(const ncclComm_t comm, void* handle) {
  if (comm == nullptr || handle == nullptr) {
    return fail(comm, ncclInvalidArgument, "ncclCommDeregister: comm or handle is NULL");
  }
  delete static_cast<Registration*>(handle);
  return ncclSuccess;
}
SHIM_ALIAS(ncclCommDeregister)

SHIM_API ncclResult_t pncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size,
                                              ncclWindow_t* win, int winFlags) {
  (void)buff;
  (void)size;
  (void)winFlags;
  if (win != nullptr) *win = nullptr;
  return fail(comm, ncclInvalidUsage,
              "ncclCommWindowRegister: symmetric memory windows are not supported by Tide");
}
SHIM_ALIAS(ncclCommWindowRegister)

SHIM_API ncclResult_t pncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  (void)win;
  return fail(comm, ncclInvalidUsage,
              "ncclCommWindowDeregister: symmetric memory windows are not supported by Tide");
}
SHIM_ALIAS(ncclCommWindowDeregister)

SHIM_API ncclResult_t pncclMemAlloc(void** ptr, size_t size) {
  if (ptr == nullptr) return fail(nullptr, ncclInvalidArgument, "ncclMemAlloc: ptr is NULL");
  *ptr = nullptr;
  if (size == 0) return ncclSuccess;
  std::string why;
  const shim::Mode mode = shim::runMode(&why);
  if (mode == shim::Mode::kNone)
    return fail(nullptr, ncclUnhandledCudaError, "ncclMemAlloc: %s", why.c_str());
  if (mode == shim::Mode::kHost) {
    if (posix_memalign(ptr, 4096, size) != 0) {
      *ptr = nullptr;
      return fail(nullptr, ncclSystemError, "ncclMemAlloc: %zu bytes: out of host memory", size);
    }
    return ncclSuccess;
  }
  if (tide::cuda::ensureContext(&why) < 0)
    return fail(nullptr, ncclUnhandledCudaError, "ncclMemAlloc: %s", why.c_str());
  tide::cuda::CuDevPtr p = 0;
  const int rc = tide::cuda::driver()->cuMemAlloc(&p, size);
  if (rc != 0) {
    return fail(nullptr, ncclUnhandledCudaError, "ncclMemAlloc: %zu bytes: %s", size,
                tide::cuda::driverErrorString(rc).c_str());
  }
  *ptr = reinterpret_cast<void*>(p);
  return ncclSuccess;
}
SHIM_ALIAS(ncclMemAlloc)

SHIM_API ncclResult_t pncclMemFree(void* ptr) {
  if (ptr == nullptr) return ncclSuccess;
  if (tide::cuda::isDevicePointer(ptr)) {
    const int rc = tide::cuda::driver()->cuMemFree(reinterpret_cast<tide::cuda::CuDevPtr>(ptr));
    if (rc != 0) {
      return fail(nullptr, ncclUnhandledCudaError, "ncclMemFree: %s",
                  tide::cuda::driverErrorString(rc).c_str());
    }
    return ncclSuccess;
  }
  if (shim::runMode(nullptr) == shim::Mode::kHost) {
    free(ptr);
    return ncclSuccess;
  }
  return fail(nullptr, ncclInvalidArgument, "ncclMemFree: %p was not allocated by ncclMemAlloc",
              ptr);
}
SHIM_ALIAS(ncclMemFree)
