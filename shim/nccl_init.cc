// libnccl.so.2 (see nccl_api.cc): communicator creation. ncclCommInitRank*,
// ncclCommInitAll, ncclCommSplit and ncclCommShrink, with the ncclConfig_t of
// any NCCL version; inside a group the creation is deferred to the group end.
#include <cstddef>
#include <cstring>
#include <functional>
#include <memory>
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
