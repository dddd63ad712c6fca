// The gradient reducer's state (include/tide/reducer.h; docs/overlap.md).
// The reducer is a client of the public API: it includes only include/tide
// headers and reaches the core through tide*() calls (scripts/lint.sh
// layers, rule f). Every tideReducer function below is called with
// tideReducer::mu held by the entry points (reducer_api.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "reducer/layout.h"
#include "reducer/worker.h"
#include "tide/reducer.h"

namespace tide_reducer {

// A failure: a result code and its message (tideReducerGetLastError).
struct Err {
  tideResult_t code = tideSuccess;
  std::string msg;
  bool ok() const { return code == tideSuccess; }
};
Err fail(tideResult_t code, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
inline Err okay() { return Err{}; }

// One bucket of the current layout.
struct Bucket {
  std::vector<int> grads;       // in staging order
  std::vector<size_t> offsets;  // element offset of each in the staging buffer
  size_t count = 0;             // elements of the bucket
  // The flat buffer of a bucket of several gradients (a bucket of one
  // reduces in place in the caller's buffer).
  std::vector<unsigned char> staging;
  tideCompressor_t compressor = nullptr;  // config->compress and count > 0
  int pending = 0;                        // gradients not marked yet in this step
  // Reduce-scatter mode (reducer/scatter.cc): the staging buffer (lent by
  // the pool while the bucket is in flight) holds nranks * chunk elements
  // (zero padded); this rank owns chunk `rank`, which is shard elements
  // [shardOffset, shardOffset + chunk).
  size_t chunk = 0;
  size_t shardOffset = 0;
  tideCompressor_t gatherCompressor = nullptr;  // tideReducerAllGather's, made on first use
  uint64_t gatherSeq = 0;  // gatherAsync: the gather thread's number of its last gather
};

// The collectives the reducer issued, by purpose (TIDE_REDUCER_STATS).
struct Stats {
  uint64_t steps = 0;     // Waits
  uint64_t synced = 0;    // Waits of synced steps
  uint64_t buckets = 0;   // bucket All-Reduces
  uint64_t checks = 0;    // step checks (findUnused = 0: one per synced step)
  uint64_t setup = 0;     // creation, rebuild and SetState agreement collectives
  uint64_t rebuilds = 0;  // layouts rebuilt from the readiness order
};

}  // namespace tide_reducer

struct tideReducer {
  static constexpr uint32_t kMagic = 0x7ed0ce18u;
  uint32_t magic = kMagic;
  std::mutex mu;
  tideComm_t comm = nullptr;
  int rank = 0;
  int nranks = 1;
  int ngrads = 0;
  std::vector<void*> grads;
  std::vector<size_t> counts;
  tideDataType_t dtype = tideFloat32;
  size_t elemSize = 4;
  tide_reducer::Sizes sizes;  // bucket capacities (resolved)
  bool rebuild = true;
  bool average = true;
  bool findUnused = false;
  bool compress = false;
  tideCompressConfig_t compressConfig{};
  bool reduceScatter = false;  // config->reduceScatter (reducer/scatter.cc)
  void* shard = nullptr;       // config->shard
  size_t shardCount = 0;       // elements of this rank's shard
  bool haveGatherConfig = false;
  bool gatherAsync = false;         // config->gatherAsync
  std::vector<int> groups;          // config->groups (empty: none)
  tideComm_t gatherComm = nullptr;  // gatherAsync: split from comm at creation
  std::unique_ptr<tide_reducer::StagingPool> gatherPool;
  std::unique_ptr<tide_reducer::Worker> gatherWorker;
  uint64_t gatherSeq = 0;               // the last gather started
  tideCompressConfig_t gatherConfig{};  // of the buckets' gatherCompressor
  tideStream_t stream = nullptr;        // the caller's, or NULL: the reducer's worker thread
  std::unique_ptr<tide_reducer::StagingPool> pool;  // reduce-scatter mode (outlives worker)
  std::unique_ptr<tide_reducer::Worker> worker;
  std::string tracePath;     // TIDE_REDUCER_TRACE (rank 0 only)
  uint64_t fingerprint = 0;  // of the creation arguments (the same on every rank)

  std::vector<tide_reducer::Bucket> buckets;
  std::vector<int> bucketOf;   // gradient -> bucket
  std::vector<size_t> slotOf;  // gradient -> its place in its bucket's grads

  // The step in progress.
  bool inStep = false;
  bool sync = true;
  uint64_t step = 0;  // steps ended so far (the current one is step + 1)
  std::vector<unsigned char> marked;
  std::vector<int> order;       // this step's marking order
  size_t nextLaunch = 0;        // buckets launch in index order
  tide_reducer::Err stepError;  // the first failed launch of the step
  bool rebuildPending = true;   // rebuild after the first synced step

  std::string lastError = "no error";
  tide_reducer::Stats stats;
};

namespace tide_reducer {

// The number of the step in progress (or the next one), from 1, as messages
// name it.
inline unsigned long long currentStep(const tideReducer* r) { return r->step + 1ull; }

// reducer.cc: the step protocol.
Err create(tideComm_t comm, int ngrads, void* const* grads, const size_t* counts,
           tideDataType_t datatype, const tideReducerConfig_t* config, tideReducer* r,
           bool nullOut);
Err markReady(tideReducer* r, int index);
Err wait(tideReducer* r);
Err setSync(tideReducer* r, int enabled);
void destroy(tideReducer* r);
// Waits for every launched bucket (the worker or the caller's stream).
Err drainAll(tideReducer* r);
// Replaces the layout by `layout` (new staging buffers and compressors, the
// old ones freed), or fails leaving the reducer unchanged.
Err applyLayout(tideReducer* r, const Layout& layout, std::vector<Bucket>* out);
void installBuckets(tideReducer* r, std::vector<Bucket>* buckets);
void freeBuckets(std::vector<Bucket>* buckets);
// The agreement check: an All-Reduce (max) of `key` and its complement on
// the NULL stream; *same tells whether every rank passed the same key.
Err agree(tideReducer* r, uint64_t key, bool* same);
Err agreeOn(tideComm_t comm, uint64_t key, bool* same);

// scatter.cc: reduce-scatter mode. Sorts each bucket's gradients into
// index order and sizes its padded staging, chunk and shard offset.
void layoutScatter(tideReducer* r, std::vector<Bucket>* buckets);
// Reduce-scatter mode's staging buffers (reducer/worker.h, StagingPool).
constexpr int kStagingBuffers = 2;
// Reduce-scatter mode: lends bucket b a staging buffer from the pool (if it
// has none), and gives it back.
void ensureStaging(tideReducer* r, Bucket& b);
void releaseStaging(tideReducer* r, Bucket& b);
// The reducer's staging bytes now and at most so far.
void bufferBytes(tideReducer* r, size_t* current, size_t* peak);
// Adds this rank's reduced chunk of bucket b (in its staging buffer) into
// the shard, or with no shard copies it into the gradients it covers (the
// caller's stream, after it synchronized).
void addChunk(tideReducer* r, Bucket& b);
// The copies of this rank's reduced chunk of b into the gradients.
// Its chunk in `buf` (a staging buffer of the bucket); outs: the
// destinations instead of grads (an entry NULL: left out).
std::vector<CopyBack> ownedCopies(const tideReducer* r, const Bucket& b, unsigned char* buf,
                                  void* const* outs = nullptr);
Err getShard(tideReducer* r, tideReducerSegment_t* segments, int* nsegments, size_t* shardCount);
// gather.cc: the all-gathers (AllGather = Start + Wait).
Err allGather(tideReducer* r, const void* values, void* const* outs, int bucket,
              const tideCompressConfig_t* compress);
Err gatherStart(tideReducer* r, const void* values, void* const* outs, int bucket,
                const tideCompressConfig_t* compress);
Err gatherWait(tideReducer* r, int bucket);
// Copies or validates a caller's compression config (its size field).
Err copyCompressConfig(const tideCompressConfig_t* in, const char* what, tideCompressConfig_t* out);

// reducer_state.cc: checkpoints.
Err getState(tideReducer* r, void* buf, size_t* bytes);
Err setState(tideReducer* r, const void* buf, size_t bytes);

}  // namespace tide_reducer
