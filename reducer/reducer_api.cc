// The gradient reducer's C entry points (include/tide/reducer.h): handle
// checks, the reducer's lock, last-error strings, and no exception across
// the C boundary. TIDE_REDUCER_STATS=FILE appends one line per reducer to
// FILE at tideReducerDestroy: the collectives it issued, by purpose (the
// tests count the step checks with it; docs/overlap.md); TIDE_REDUCER_TRACE
// writes the buckets' communication as a Chrome trace.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>
#include <string>

#include "reducer/reducer_impl.h"

#define TIDE_REDUCER_API extern "C" __attribute__((visibility("default")))

namespace {

using tide_reducer::Err;
using tide_reducer::fail;

thread_local std::string tLastError = "no error";

// Runs body, catching what it throws; records a failure as the reducer's
// (or, without one, the thread's) last error.
template <class F>
tideResult_t guarded(const char* fn, tideReducer* r, F&& body) {
  Err e;
  try {
    e = body();
  } catch (const std::bad_alloc&) {
    e = fail(tideSystemError, "out of memory");
  } catch (const std::exception& x) {
    e = fail(tideInternalError, "unexpected exception: %s", x.what());
  } catch (...) {
    e = fail(tideInternalError, "unexpected exception");
  }
  if (!e.ok()) {
    try {
      std::string msg = std::string(fn) + ": " + e.msg;
      if (r != nullptr) {
        r->lastError = msg;
      } else {
        tLastError = msg;
      }
    } catch (...) {  // the code still reaches the caller
    }
  }
  return e.code;
}

Err checkLive(const tideReducer* r) {
  if (r == nullptr) return fail(tideInvalidArgument, "reducer is NULL");
  if (r->magic != tideReducer::kMagic) return fail(tideInvalidArgument, "not a live reducer");
  return Err{};
}

// Calls body with the reducer's lock held, after the handle check.
template <class F>
tideResult_t locked(const char* fn, tideReducer* r, F&& body) {
  Err live = checkLive(r);
  if (!live.ok()) return guarded(fn, nullptr, [&] { return live; });
  return guarded(fn, r, [&] {
    std::lock_guard<std::mutex> lock(r->mu);
    return body();
  });
}

void writeStats(const tideReducer* r) {
  const char* path = std::getenv("TIDE_REDUCER_STATS");
  if (path == nullptr || *path == '\0') return;
  const tide_reducer::Stats& s = r->stats;
  char line[320];
  const int n = snprintf(
      line, sizeof(line),
      "tide_reducer rank %d nranks %d steps %llu synced %llu buckets %llu "
      "bucket_colls %llu checks %llu setup %llu rebuilds %llu\n",
      r->rank, r->nranks, static_cast<unsigned long long>(s.steps),
      static_cast<unsigned long long>(s.synced), static_cast<unsigned long long>(r->buckets.size()),
      static_cast<unsigned long long>(s.buckets), static_cast<unsigned long long>(s.checks),
      static_cast<unsigned long long>(s.setup), static_cast<unsigned long long>(s.rebuilds));
  const int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;
  if (n > 0 && write(fd, line, static_cast<size_t>(n)) < 0) {
    // Statistics are best effort.
  }
  close(fd);
}

// TIDE_REDUCER_TRACE=FILE (rank 0, the reducer's own worker): a JSON array
// of Chrome trace events, one complete event per bucket All-Reduce, on the
// clock of std::chrono::steady_clock in microseconds (perf/overlap_bench
// merges it with its compute events).
void writeTrace(tideReducer* r) {
  if (r->tracePath.empty() || r->worker == nullptr) return;
  tide_reducer::drainAll(r);
  const std::vector<tide_reducer::TraceEvent> ev = r->worker->takeTrace();
  FILE* f = std::fopen(r->tracePath.c_str(), "w");
  if (f == nullptr) return;
  std::fprintf(f, "[\n");
  for (size_t i = 0; i < ev.size(); ++i) {
    std::fprintf(f,
                 "{\"name\": \"bucket %d\", \"cat\": \"comm\", \"ph\": \"X\", \"ts\": %.3f, "
                 "\"dur\": %.3f, \"pid\": %d, \"tid\": 1, \"args\": {\"step\": %llu, "
                 "\"bytes\": %zu}}%s\n",
                 ev[i].bucket, ev[i].startUs, ev[i].endUs - ev[i].startUs, r->rank,
                 static_cast<unsigned long long>(ev[i].step), ev[i].bytes,
                 i + 1 < ev.size() ? "," : "");
  }
  std::fprintf(f, "]\n");
  std::fclose(f);
}

}  // namespace

TIDE_REDUCER_API tideResult_t tideReducerCreate(tideComm_t comm, int ngrads, void* const* grads,
                                                const size_t* counts, tideDataType_t datatype,
                                                const tideReducerConfig_t* config,
                                                tideReducer_t* reducer) {
  return guarded("tideReducerCreate", nullptr, [&]() -> Err {
    if (comm == nullptr) return fail(tideInvalidArgument, "comm is NULL");
    if (reducer != nullptr) *reducer = nullptr;
    auto* r = new tideReducer();
    // A NULL reducer pointer still takes part (as a bad argument), so the
    // other ranks fail with it instead of waiting.
    Err e =
        tide_reducer::create(comm, ngrads, grads, counts, datatype, config, r, reducer == nullptr);
    if (!e.ok()) {
      tide_reducer::destroy(r);
      r->magic = 0;
      delete r;
      return e;
    }
    *reducer = r;
    return e;
  });
}

TIDE_REDUCER_API tideResult_t tideReducerMarkReady(tideReducer_t reducer, int index) {
  return locked("tideReducerMarkReady", reducer,
                [&] { return tide_reducer::markReady(reducer, index); });
}

TIDE_REDUCER_API tideResult_t tideReducerWait(tideReducer_t reducer) {
  return locked("tideReducerWait", reducer, [&] { return tide_reducer::wait(reducer); });
}

TIDE_REDUCER_API tideResult_t tideReducerSetSync(tideReducer_t reducer, int enabled) {
  return locked("tideReducerSetSync", reducer,
                [&] { return tide_reducer::setSync(reducer, enabled); });
}

TIDE_REDUCER_API tideResult_t tideReducerDestroy(tideReducer_t reducer) {
  Err live = checkLive(reducer);
  if (!live.ok()) return guarded("tideReducerDestroy", nullptr, [&] { return live; });
  return guarded("tideReducerDestroy", nullptr, [&]() -> Err {
    {
      std::lock_guard<std::mutex> lock(reducer->mu);
      reducer->magic = 0;
      writeStats(reducer);
      writeTrace(reducer);
      tide_reducer::destroy(reducer);
    }
    delete reducer;
    return Err{};
  });
}

TIDE_REDUCER_API const char* tideReducerGetLastError(tideReducer_t reducer) {
  if (reducer == nullptr) return tLastError.c_str();
  if (reducer->magic != tideReducer::kMagic) return "not a live reducer";
  return reducer->lastError.c_str();
}

TIDE_REDUCER_API tideResult_t tideReducerGetState(tideReducer_t reducer, void* buf, size_t* bytes) {
  return locked("tideReducerGetState", reducer,
                [&] { return tide_reducer::getState(reducer, buf, bytes); });
}

TIDE_REDUCER_API tideResult_t tideReducerSetState(tideReducer_t reducer, const void* buf,
                                                  size_t bytes) {
  return locked("tideReducerSetState", reducer,
                [&] { return tide_reducer::setState(reducer, buf, bytes); });
}

TIDE_REDUCER_API tideResult_t tideReducerGetShard(tideReducer_t reducer,
                                                  tideReducerSegment_t* segments, int* nsegments,
                                                  size_t* shardCount) {
  return locked("tideReducerGetShard", reducer,
                [&] { return tide_reducer::getShard(reducer, segments, nsegments, shardCount); });
}

TIDE_REDUCER_API tideResult_t tideReducerAllGather(tideReducer_t reducer, const void* values,
                                                   void* const* outs, int bucket,
                                                   const tideCompressConfig_t* compress) {
  return locked("tideReducerAllGather", reducer,
                [&] { return tide_reducer::allGather(reducer, values, outs, bucket, compress); });
}

TIDE_REDUCER_API tideResult_t tideReducerGetBufferBytes(tideReducer_t reducer, size_t* current,
                                                        size_t* peak) {
  return locked("tideReducerGetBufferBytes", reducer, [&]() -> Err {
    if (current == nullptr || peak == nullptr)
      return fail(tideInvalidArgument, "%s is NULL", current == nullptr ? "current" : "peak");
    tide_reducer::bufferBytes(reducer, current, peak);
    return Err{};
  });
}

TIDE_REDUCER_API tideResult_t tideReducerAllGatherStart(tideReducer_t reducer, const void* values,
                                                        void* const* outs, int bucket,
                                                        const tideCompressConfig_t* compress) {
  return locked("tideReducerAllGatherStart", reducer,
                [&] { return tide_reducer::gatherStart(reducer, values, outs, bucket, compress); });
}

TIDE_REDUCER_API tideResult_t tideReducerAllGatherWait(tideReducer_t reducer, int bucket) {
  return locked("tideReducerAllGatherWait", reducer,
                [&] { return tide_reducer::gatherWait(reducer, bucket); });
}

TIDE_REDUCER_API tideResult_t tideReducerGetLayout(tideReducer_t reducer, int* bucketOf,
                                                   int* nbuckets) {
  return locked("tideReducerGetLayout", reducer, [&]() -> Err {
    if (nbuckets == nullptr) return fail(tideInvalidArgument, "nbuckets is NULL");
    *nbuckets = static_cast<int>(reducer->buckets.size());
    if (bucketOf != nullptr)
      for (int g = 0; g < reducer->ngrads; ++g)
        bucketOf[g] = reducer->bucketOf[static_cast<size_t>(g)];
    return Err{};
  });
}
