// Errors, logging, run mode and the thread-local group of the NCCL shim.
#include <pthread.h>
#include <strings.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>

#include "cuda/cuda_loader.h"
#include "shim/shim_internal.h"
#include "shim/staging.h"

namespace tide::shim {
namespace {

thread_local std::string tLastError;      // this thread's last error
thread_local std::string tLastErrorCopy;  // what ncclGetLastError returned

struct Group {
  int depth = 0;
  std::vector<Deferred> inits;
  std::vector<Deferred> ops;
  std::vector<Deferred> posts;  // staged results to copy back after the ops
  double bytes = 0;
};
thread_local Group tGroup;

bool envTrue(const char* name) {
  const char* v = getenv(name);
  if (v == nullptr || *v == '\0') return false;
  return strcmp(v, "0") != 0 && strcasecmp(v, "false") != 0 && strcasecmp(v, "no") != 0 &&
         strcasecmp(v, "off") != 0;
}

int debugLevel() {
  const char* v = getenv("TIDE_DEBUG");
  if (v == nullptr || *v == '\0') v = getenv("NCCL_DEBUG");
  if (v == nullptr || *v == '\0') return 2;
  if (strcasecmp(v, "NONE") == 0) return 0;
  if (strcasecmp(v, "VERSION") == 0) return 1;
  if (strcasecmp(v, "INFO") == 0) return 3;
  if (strcasecmp(v, "TRACE") == 0) return 4;
  return 2;
}

void vlogLine(const char* level, const char* fmt, va_list ap) {
  char host[64] = "?";
  gethostname(host, sizeof(host) - 1);
  char body[1024];
  vsnprintf(body, sizeof(body), fmt, ap);
  fprintf(stderr, "%s:%d:%ld NCCL %s %s: %s\n", host, static_cast<int>(getpid()),
          static_cast<long>(gettid()), level, banner(), body);
}

}  // namespace

const char* banner() {
  static const std::string b = [] {
    int v = 0;
    tideGetVersion(&v);
    char buf[96];
    snprintf(buf, sizeof(buf), "Tide %d.%d.%d NCCL shim", v / 10000, (v / 100) % 100, v % 100);
    return std::string(buf);
  }();
  return b.c_str();
}

ncclResult_t fail(ncclComm_t comm, ncclResult_t code, const char* fmt, ...) {
  char body[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(body, sizeof(body), fmt, ap);
  va_end(ap);
  std::string msg = std::string(banner()) + ": " + body;
  tLastError = msg;
  if (comm != nullptr) {
    std::lock_guard<std::mutex> lock(comm->mu);
    comm->lastError = msg;
  }
  log(Level::kInfo, "%s (%s)", body, ncclGetErrorString(code));
  return code;
}

ncclResult_t mapResult(tideResult_t r, unsigned callerVersion) {
  // ncclRemoteError and ncclInProgress exist since NCCL 2.13 / 2.14.
  switch (r) {
    case tideSuccess:
      return ncclSuccess;
    case tideUnhandledDeviceError:
      return ncclUnhandledCudaError;
    case tideSystemError:
      return ncclSystemError;
    case tideInternalError:
      return ncclInternalError;
    case tideInvalidArgument:
      return ncclInvalidArgument;
    case tideInvalidUsage:
      return ncclInvalidUsage;
    case tideRemoteError:
    case tideTimeout:  // NCCL has no timeout code: a silent peer is a remote failure
      return callerVersion >= 21300 ? ncclRemoteError : ncclSystemError;
    case tideInProgress:
      return ncclInProgress;
    default:
      return ncclInternalError;
  }
}

ncclResult_t fromTide(ncclComm_t comm, tideResult_t r, const char* what) {
  const ncclResult_t code = mapResult(r, comm != nullptr ? comm->callerVersion : NCCL_VERSION_CODE);
  if (r == tideSuccess || r == tideInProgress) return code;
  const char* detail = tideGetLastError(nullptr);
  if (r == tideTimeout) {
    return fail(comm, code, "%s: timed out (Tide tideTimeout, reported as %s): %s", what,
                code == ncclRemoteError ? "ncclRemoteError" : "ncclSystemError", detail);
  }
  return fail(comm, code, "%s: %s: %s", what, tideGetErrorString(r), detail);
}

const char* lastErrorOf(ncclComm_t comm) {
  if (comm != nullptr) {
    std::lock_guard<std::mutex> lock(comm->mu);
    tLastErrorCopy = comm->lastError;
  } else {
    tLastErrorCopy = tLastError;
  }
  return tLastErrorCopy.c_str();
}

void log(Level level, const char* fmt, ...) {
  if (debugLevel() < static_cast<int>(level)) return;
  va_list ap;
  va_start(ap, fmt);
  vlogLine(level == Level::kWarn ? "WARN" : "INFO", fmt, ap);
  va_end(ap);
}

Mode runMode(std::string* why) {
  static std::once_flag once;
  std::call_once(once, [] {
    const char* set = getenv("TIDE_DEBUG");
    if (set == nullptr || *set == '\0') set = getenv("NCCL_DEBUG");
    if (set != nullptr && *set != '\0' && debugLevel() >= 1) {
      fprintf(stderr, "NCCL version %d.%d.%d: %s (GPU: %s)\n", NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH,
              banner(), cuda::probeGpu().detail.c_str());
    }
  });
  if (envTrue("TIDE_SHIM_HOST_BUFFERS")) return Mode::kHost;
  const cuda::GpuProbe& p = cuda::probeGpu();
  if (p.state == cuda::GpuState::kUsable) return Mode::kGpu;
  if (why != nullptr) {
    *why = std::string("no usable CUDA device (") + cuda::gpuStateName(p.state) + ": " + p.detail +
           "); set TIDE_SHIM_HOST_BUFFERS=1 to run on host buffers";
  }
  return Mode::kNone;
}

bool inGroup() { return tGroup.depth > 0; }
int groupDepth() { return tGroup.depth; }
void groupPush() { ++tGroup.depth; }
void deferInit(Deferred fn) { tGroup.inits.push_back(std::move(fn)); }
void deferOp(Deferred fn, double bytes) {
  tGroup.ops.push_back(std::move(fn));
  tGroup.bytes += bytes;
}

ncclResult_t groupPop(ncclSimInfo_t* simulate) {
  if (tGroup.depth <= 0)
    return fail(nullptr, ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  if (--tGroup.depth > 0) return ncclSuccess;
  Group g = std::exchange(tGroup, Group{});
  // result: the first real error; pending: a non-blocking creation still
  // running (ncclInProgress, reported only when nothing failed).
  ncclResult_t result = ncclSuccess;
  bool pending = false;
  std::string firstMsg;
  auto outcome = [&] { return result != ncclSuccess ? result : pending ? ncclInProgress : result; };
  // Creations first, concurrently: each blocks until all of its ranks joined.
  if (g.inits.size() == 1) {
    const ncclResult_t r = g.inits[0]();
    pending = r == ncclInProgress;
    if (r != ncclSuccess && r != ncclInProgress) {
      result = r;
      firstMsg = tLastError;
    }
  } else if (!g.inits.empty()) {
    std::vector<ncclResult_t> rs(g.inits.size(), ncclSuccess);
    std::vector<std::string> msgs(g.inits.size());
    std::vector<std::thread> threads;
    threads.reserve(g.inits.size());
    for (size_t i = 0; i < g.inits.size(); ++i) {
      threads.emplace_back([&, i] {
        try {
          rs[i] = g.inits[i]();
          msgs[i] = tLastError;
        } catch (...) {  // never std::terminate in a helper thread
          rs[i] = ncclInternalError;
          msgs[i] = "ncclGroupEnd: communicator creation failed (out of memory?)";
        }
      });
    }
    for (auto& t : threads) t.join();
    for (size_t i = 0; i < rs.size(); ++i) {
      pending = pending || rs[i] == ncclInProgress;
      if (rs[i] != ncclSuccess && rs[i] != ncclInProgress && result == ncclSuccess) {
        result = rs[i];
        firstMsg = msgs[i];
      }
    }
  }
  if (result != ncclSuccess) tLastError = firstMsg;
  if (simulate != nullptr) {
    // No cost model is exported by Tide: a latency + bandwidth estimate
    // (5 us per operation, 10 GB/s), in microseconds.
    simulate->estimatedTime =
        static_cast<float>(5.0 * static_cast<double>(g.ops.size()) + g.bytes / 1e4);
    return outcome();
  }
  if (g.ops.empty()) return outcome();
  tideResult_t r = tideGroupStart();
  if (r != tideSuccess) return fromTide(nullptr, r, "ncclGroupEnd");
  for (Deferred& op : g.ops) {
    const ncclResult_t x = op();
    if (x != ncclSuccess && x != ncclInProgress && result == ncclSuccess) result = x;
  }
  r = tideGroupEnd();
  if (r != tideSuccess && r != tideInProgress && result == ncclSuccess) {
    result = fromTide(nullptr, r, "ncclGroupEnd");
  }
  // Staged device results: only when every operation succeeded.
  for (Deferred& post : g.posts) {
    if (result != ncclSuccess) break;
    result = post();
  }
  return outcome();
}

ncclResult_t submit(ncclComm_t comm, const char* what, double bytes,
                    std::function<tideResult_t()> op, const std::shared_ptr<Staging>& staging) {
  if (comm == nullptr) return fail(nullptr, ncclInvalidArgument, "%s: comm is NULL", what);
  if (!inGroup() && (comm->initState != ncclSuccess || comm->tide == nullptr)) {
    return fail(comm, ncclInvalidUsage, "%s: communicator is not initialised", what);
  }
  Deferred run = [comm, what, op = std::move(op), staging]() -> ncclResult_t {
    struct Use {  // keeps the wrapper alive (see ncclComm::users)
      explicit Use(ncclComm_t c) : comm(c) { comm->users.fetch_add(1); }
      ~Use() { comm->users.fetch_sub(1); }
      ncclComm_t comm;
    } use(comm);
    auto closing = [&] {
      return comm->closing.load() ? fail(comm, ncclInvalidUsage,
                                         "%s: the communicator is being destroyed or aborted", what)
                                  : ncclSuccess;
    };
    if (comm->tide == nullptr) {
      return fail(comm, ncclInvalidUsage, "%s: communicator creation failed", what);
    }
    if (closing() != ncclSuccess) return ncclInvalidUsage;
    if (staging != nullptr) {
      const ncclResult_t pulled = staging->pull();
      if (pulled != ncclSuccess) return pulled;
      if (closing() != ncclSuccess) return ncclInvalidUsage;
    }
    return fromTide(comm, op(), what);
  };
  if (inGroup()) {
    deferOp(std::move(run), bytes);
    if (staging != nullptr) tGroup.posts.emplace_back([staging] { return staging->push(); });
    return ncclSuccess;
  }
  const ncclResult_t r = run();
  if (r != ncclSuccess || staging == nullptr) return r;
  return staging->push();
}

}  // namespace tide::shim
