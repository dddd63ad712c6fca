// Internal state of the NCCL ABI shim (libnccl.so.2 built on Tide's public
// API). Not installed; nothing here is exported.
//
// Model: an ncclComm wraps one tideComm_t plus what NCCL has and Tide does
// not (CUDA device, user-defined PreMulSum ops, the caller's NCCL version,
// the per-communicator last error). Between ncclGroupStart and the outermost
// ncclGroupEnd, every call is recorded in the calling thread's group and
// issued at the end: communicator creations first (concurrently, one thread
// each, so one thread can create several ranks, as NCCL allows), then the
// operations inside one Tide group. That also lets ncclGroupSimulateEnd drop
// the recorded work.
#pragma once

#include <nccl.h>

#include <atomic>
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "tide/tide.h"

struct ncclComm {
  tideComm_t tide = nullptr;
  int cudaDev = -1;                            // -1 in host-buffer mode
  bool hostMode = false;                       // TIDE_SHIM_HOST_BUFFERS: buffers are host memory
  unsigned callerVersion = NCCL_VERSION_CODE;  // from the caller's ncclConfig_t
  ncclResult_t initState = ncclSuccess;        // ncclInProgress while a group defers init
  std::mutex mu;                               // guards the fields below
  std::string lastError;
  struct PreMulSum {
    ncclDataType_t dtype;
    ncclScalarResidence_t residence;
    double value;        // HostImmediate: read at creation
    const void* scalar;  // Device: read at each use
  };
  std::map<int, PreMulSum> ops;  // key: ncclRedOp_t value >= ncclNumOps
  int nextOp = ncclNumOps;
  int nranks = 0;  // known once created
  // One-rank device path: self sends and receives waiting for their match.
  struct Pending {
    void* buf;
    size_t bytes;
  };
  std::deque<Pending> selfSends, selfRecvs;
  // Calls running an operation (shim::submit) and whether ncclCommDestroy /
  // ncclCommAbort has begun: the wrapper is freed only once no call uses it,
  // so an abort from another thread (PyTorch's watchdog) cannot free it under
  // a call that the abort just unblocked.
  std::atomic<int> users{0};
  std::atomic<bool> closing{false};
};

namespace tide::shim {

// "Tide <version> NCCL shim": starts every message the shim writes.
const char* banner();

// Records `msg` (prefixed with the banner) as the calling thread's last
// error and, when comm is not null, the communicator's. Returns `code`.
ncclResult_t fail(ncclComm_t comm, ncclResult_t code, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));
// Maps a Tide result to the closest code of the caller's NCCL version and, on
// error, records Tide's detail (tideGetLastError) under `what`.
ncclResult_t fromTide(ncclComm_t comm, tideResult_t r, const char* what);
ncclResult_t mapResult(tideResult_t r, unsigned callerVersion);
const char* lastErrorOf(ncclComm_t comm);  // thread's when comm is null

// Debug output on stderr, gated by NCCL_DEBUG / TIDE_DEBUG (WARN default).
enum class Level { kWarn = 2, kInfo = 3 };
void log(Level level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// How communicators may run on this machine. Host mode when
// TIDE_SHIM_HOST_BUFFERS=1; GPU mode when a CUDA device is usable; otherwise
// creation fails with ncclUnhandledCudaError and *why says why.
enum class Mode { kHost, kGpu, kNone };
Mode runMode(std::string* why);

// ---- Thread-local group ---------------------------------------------------
using Deferred = std::function<ncclResult_t()>;
bool inGroup();
int groupDepth();
void groupPush();  // ncclGroupStart
// Records a communicator creation / an operation for the outermost group end.
void deferInit(Deferred fn);
void deferOp(Deferred fn, double bytes);
// Pops one level; at the outermost level runs (or, with simulate, drops and
// estimates) the recorded work. Returns the first error.
ncclResult_t groupPop(ncclSimInfo_t* simulate);

class Staging;  // shim/staging.h

// Runs `op` now, or records it when inside a group. With `staging`, its
// pull() runs right before `op` and its push() after `op` completed (at the
// outermost group end when inside a group, once every operation finished).
ncclResult_t submit(ncclComm_t comm, const char* what, double bytes,
                    std::function<tideResult_t()> op,
                    const std::shared_ptr<Staging>& staging = nullptr);

// ---- Helpers ------------------------------------------------------------------
size_t dtypeBytes(ncclDataType_t t);  // 0 when invalid
bool dtypeOk(ncclDataType_t t);
// dst[i] = src[i] * scalar in the dtype's own arithmetic (16- and 8-bit floats
// through fp32, round to nearest even, fp8 saturating; integers wrap).
void scaleHost(void* dst, const void* src, size_t count, ncclDataType_t dtype, double scalar);
// Reads one element of `dtype` at p (host memory) as a double.
double loadScalar(const void* p, ncclDataType_t dtype);

// Runs an entry point's body; what may escape it (allocation failure,
// thread creation) becomes an error code instead of crossing the C ABI.
template <class F>
ncclResult_t guarded(ncclComm_t comm, const char* what, F&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return fail(comm, ncclSystemError, "%s: out of memory", what);
  } catch (const std::exception& e) {
    return fail(comm, ncclInternalError, "%s: %s", what, e.what());
  } catch (...) {
    return fail(comm, ncclInternalError, "%s: unexpected exception", what);
  }
}

}  // namespace tide::shim

// Entry points: pnccl* is defined and exported, nccl* is a weak alias.
#define SHIM_API extern "C" __attribute__((visibility("default")))
// NOLINTNEXTLINE(bugprone-macro-parentheses): `name` is pasted, not evaluated
#define SHIM_ALIAS(name) SHIM_API decltype(p##name) name __attribute__((weak, alias("p" #name)));
