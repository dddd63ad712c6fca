// The gradient reducer's step protocol (include/tide/reducer.h,
// docs/overlap.md): creation and its agreement check, MarkReady's in-order
// bucket launches, Wait's completion, step check and rebuild.
//
// Agreement without deadlock: every rank issues the same collectives in the
// same order on the communicator. Buckets launch strictly in bucket index
// order (bucket b starts when it and every bucket before it are complete in
// marks), and at Wait every bucket not yet started starts (an unmarked
// gradient contributes zeros), so each rank issues exactly one All-Reduce per
// bucket per synced step, in index order, whatever order its gradients were
// marked in. With findUnused = 0 one small step check follows; rebuilds and
// the agreement checks happen at points every rank reaches together.
#include <algorithm>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <utility>

#include "reducer/reducer_impl.h"

namespace tide_reducer {

Err fail(tideResult_t code, const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  return Err{code, buf};
}

namespace {

size_t dtypeBytes(int dt) {
  switch (dt) {
    case tideInt8:
    case tideUint8:
    case tideFloat8e4m3:
    case tideFloat8e5m2:
      return 1;
    case tideFloat16:
    case tideBfloat16:
      return 2;
    case tideInt32:
    case tideUint32:
    case tideFloat32:
      return 4;
    case tideInt64:
    case tideUint64:
    case tideFloat64:
      return 8;
    default:
      return 0;
  }
}

// A config flag: TIDE_CONFIG_UNDEF_INT takes `undef`.
Err flag(int v, bool undef, const char* name, bool* out) {
  if (v == TIDE_CONFIG_UNDEF_INT) {
    *out = undef;
  } else if (v == 0 || v == 1) {
    *out = v == 1;
  } else {
    return fail(tideInvalidArgument, "config->%s %d: 0, 1 or TIDE_CONFIG_UNDEF_INT", name, v);
  }
  return okay();
}

// The local checks of tideReducerCreate's arguments; fills r on success.
Err parseArgs(int ngrads, void* const* grads, const size_t* counts, tideDataType_t datatype,
              const tideReducerConfig_t* config, tideReducer* r) {
  if (ngrads < 0) return fail(tideInvalidArgument, "ngrads %d < 0", ngrads);
  if (ngrads > 0 && (grads == nullptr || counts == nullptr))
    return fail(tideInvalidArgument, "%s is NULL with ngrads %d",
                grads == nullptr ? "grads" : "counts", ngrads);
  int dt;
  std::memcpy(&dt, &datatype, sizeof(dt));
  r->elemSize = dtypeBytes(dt);
  if (r->elemSize == 0) return fail(tideInvalidArgument, "invalid datatype %d", dt);
  r->dtype = datatype;
  r->ngrads = ngrads;
  for (int i = 0; i < ngrads; ++i) {
    if (counts[i] > (SIZE_MAX >> 2) / r->elemSize)
      return fail(tideInvalidArgument, "counts[%d] = %zu overflows", i, counts[i]);
    if (counts[i] > 0 && grads[i] == nullptr)
      return fail(tideInvalidArgument, "grads[%d] is NULL with counts[%d] = %zu", i, i, counts[i]);
    r->grads.push_back(grads[i]);
    r->counts.push_back(counts[i]);
  }
  tideReducerConfig_t c = TIDE_REDUCER_CONFIG_INITIALIZER;
  if (config != nullptr) {
    // A header from before reduce-scatter mode ends at its reserved words.
    if (config->size < offsetof(tideReducerConfig_t, reduceScatter) || config->size > sizeof(c))
      return fail(tideInvalidArgument,
                  "config->size %zu: not a tideReducerConfig_t (use "
                  "TIDE_REDUCER_CONFIG_INITIALIZER; expected %zu)",
                  config->size, sizeof(c));
    std::memcpy(&c, config, config->size);
  }
  r->sizes.bucketBytes = c.bucketBytes == 0 ? kDefaultBucketBytes : c.bucketBytes;
  r->sizes.firstBucketBytes =
      c.firstBucketBytes == 0 ? kDefaultFirstBucketBytes : c.firstBucketBytes;
  Err e = flag(c.rebuildBuckets, true, "rebuildBuckets", &r->rebuild);
  if (e.ok()) e = flag(c.average, true, "average", &r->average);
  if (e.ok()) e = flag(c.findUnused, false, "findUnused", &r->findUnused);
  if (e.ok()) e = flag(c.reduceScatter, false, "reduceScatter", &r->reduceScatter);
  if (e.ok()) e = flag(c.gatherAsync, false, "gatherAsync", &r->gatherAsync);
  if (!e.ok()) return e;
  if (r->gatherAsync && !r->reduceScatter)
    return fail(tideInvalidArgument, "config->gatherAsync 1 needs reduceScatter 1");
  if (c.groups != nullptr) r->groups.assign(c.groups, c.groups + ngrads);
  if (r->reduceScatter) {
    if (c.rebuildBuckets == 1)
      return fail(tideInvalidArgument,
                  "config->rebuildBuckets 1 with reduceScatter 1: the reduce-scatter layout is "
                  "fixed at creation (pass 0 or TIDE_CONFIG_UNDEF_INT)");
    r->rebuild = false;
    if (dt != tideFloat32 && dt != tideFloat64 && dt != tideBfloat16 && dt != tideFloat16)
      return fail(tideInvalidArgument,
                  "reduce-scatter mode needs float32, float64, bfloat16 or float16 gradients "
                  "(datatype %d)",
                  dt);
    r->shard = c.shard;
  }
  if (c.compress != nullptr) {
    Err ce = copyCompressConfig(c.compress, "config->compress", &r->compressConfig);
    if (!ce.ok()) return ce;
    if (dt != tideFloat32 && dt != tideBfloat16 && dt != tideFloat16)
      return fail(tideInvalidArgument,
                  "compression needs float32, bfloat16 or float16 gradients (datatype %d)", dt);
    r->compress = true;
  }
  r->stream = c.stream;
  r->rebuildPending = r->rebuild;
  return okay();
}

// The fingerprint of what every rank must pass alike (never 0).
uint64_t fingerprintOf(const tideReducer* r, size_t rawBucketBytes) {
  uint64_t h = fnv("tide-reducer", 12);
  h = fnv(&r->ngrads, sizeof(r->ngrads), h);
  h = fnv(r->counts.data(), r->counts.size() * sizeof(size_t), h);
  h = fnv(&r->dtype, sizeof(r->dtype), h);
  h = fnv(&rawBucketBytes, sizeof(rawBucketBytes), h);
  h = fnv(&r->sizes.firstBucketBytes, sizeof(size_t), h);
  const int flags = (r->rebuild ? 1 : 0) | (r->average ? 2 : 0) | (r->findUnused ? 4 : 0) |
                    (r->compress ? 8 : 0) | (r->reduceScatter ? 16 : 0) |
                    (r->gatherAsync ? 32 : 0) | (r->groups.empty() ? 0 : 64);
  h = fnv(r->groups.data(), r->groups.size() * sizeof(int), h);
  h = fnv(&flags, sizeof(flags), h);
  if (r->compress) {
    const tideCompressConfig_t& c = r->compressConfig;
    h = fnv(&c.codec, sizeof(c.codec), h);
    h = fnv(&c.blockSize, sizeof(c.blockSize), h);
    h = fnv(&c.topkRatio, sizeof(c.topkRatio), h);
    h = fnv(&c.errorFeedback, sizeof(c.errorFeedback), h);
    h = fnv(&c.stochasticRounding, sizeof(c.stochasticRounding), h);
    h = fnv(&c.interNodeOnly, sizeof(c.interNodeOnly), h);
  }
  return h | 1;
}

Err commError(tideReducer* r, tideResult_t rc, const char* what) {
  return fail(rc, "step %llu: %s failed: %s (%s)", currentStep(r), what, tideGetErrorString(rc),
              tideGetLastError(r->comm));
}

void beginStep(tideReducer* r) {
  r->inStep = true;
  r->marked.assign(static_cast<size_t>(r->ngrads), 0);
  r->order.clear();
  r->nextLaunch = 0;
  r->stepError = okay();
  for (Bucket& b : r->buckets) b.pending = static_cast<int>(b.grads.size());
}

// Reduce-scatter mode: marked gradients are in the staging buffer already
// (markReady); unmarked ones and the padding are zeros.
Err launchScatter(tideReducer* r, size_t bi) {
  Bucket& b = r->buckets[bi];
  ensureStaging(r, b);
  for (size_t k = 0; k < b.grads.size(); ++k) {
    const size_t g = static_cast<size_t>(b.grads[k]);
    if (!r->marked[g] && r->counts[g] > 0)
      std::memset(b.staging.data() + b.offsets[k] * r->elemSize, 0, r->counts[g] * r->elemSize);
  }
  const size_t padded = b.chunk * static_cast<size_t>(r->nranks);
  std::memset(b.staging.data() + b.count * r->elemSize, 0, (padded - b.count) * r->elemSize);
  r->stats.buckets++;
  const size_t recvOffset = static_cast<size_t>(r->rank) * b.chunk * r->elemSize;
  if (r->worker != nullptr) {
    Job job;
    job.buf = b.staging.data();
    job.count = padded;
    job.compressor = b.compressor;
    job.bucket = static_cast<int>(bi);
    job.step = r->step + 1;
    job.scatter = true;
    job.recvcount = b.chunk;
    job.recvOffset = recvOffset;
    if (r->shard != nullptr) {
      job.addTo = static_cast<unsigned char*>(r->shard) + b.shardOffset * r->elemSize;
    } else {
      job.copies = ownedCopies(r, b, b.staging.data());
    }
    job.owned = std::move(b.staging);  // back to the pool once reduced
    b.staging = {};
    job.pool = r->pool.get();
    r->pool->inFlight();
    r->worker->submit(std::move(job));
    return okay();
  }
  const tideRedOp_t op = r->average ? tideAvg : tideSum;
  unsigned char* buf = b.staging.data();
  const tideResult_t rc =
      b.compressor != nullptr
          ? tideReduceScatterCompressed(buf, buf + recvOffset, b.chunk, r->dtype, op, b.compressor,
                                        r->comm, r->stream)
          : tideReduceScatter(buf, buf + recvOffset, b.chunk, r->dtype, op, r->comm, r->stream);
  if (rc != tideSuccess) return commError(r, rc, "a bucket Reduce-Scatter");
  return okay();
}

// Starts bucket `bi`'s All-Reduce on the reducer's stream: gradients are
// copied into the staging buffer (unmarked ones as zeros).
Err launch(tideReducer* r, size_t bi) {
  Bucket& b = r->buckets[bi];
  if (b.count == 0) return okay();
  if (r->reduceScatter) return launchScatter(r, bi);
  // With the worker, each staged gradient goes back to the caller's buffer
  // as soon as the bucket is reduced (Job::copies).
  Job job;
  void* buf;
  if (b.staging.empty()) {
    const int g = b.grads[0];
    buf = r->grads[static_cast<size_t>(g)];
    if (!r->marked[static_cast<size_t>(g)]) std::memset(buf, 0, b.count * r->elemSize);
  } else {
    buf = b.staging.data();
    for (size_t k = 0; k < b.grads.size(); ++k) {
      const size_t g = static_cast<size_t>(b.grads[k]);
      unsigned char* dst = b.staging.data() + b.offsets[k] * r->elemSize;
      const size_t n = r->counts[g] * r->elemSize;
      if (n == 0) continue;
      if (r->marked[g]) {
        std::memcpy(dst, r->grads[g], n);
      } else {
        std::memset(dst, 0, n);
      }
      if (r->worker != nullptr) job.copies.push_back(CopyBack{r->grads[g], dst, n});
    }
  }
  r->stats.buckets++;
  if (r->worker != nullptr) {
    job.buf = buf;
    job.count = b.count;
    job.compressor = b.compressor;
    job.bucket = static_cast<int>(bi);
    job.step = r->step + 1;
    r->worker->submit(std::move(job));
    return okay();
  }
  const tideRedOp_t op = r->average ? tideAvg : tideSum;
  const tideResult_t rc = b.compressor != nullptr
                              ? tideAllReduceCompressed(buf, buf, b.count, r->dtype, op,
                                                        b.compressor, r->comm, r->stream)
                              : tideAllReduce(buf, buf, b.count, r->dtype, op, r->comm, r->stream);
  if (rc != tideSuccess) return commError(r, rc, "a bucket All-Reduce");
  return okay();
}

// Launches every bucket whose turn has come (index order, all marked), or
// all remaining ones (`all`, at Wait). The first failure is kept for Wait.
Err launchReady(tideReducer* r, bool all) {
  while (r->nextLaunch < r->buckets.size() && (all || r->buckets[r->nextLaunch].pending == 0)) {
    Err e = launch(r, r->nextLaunch++);
    if (!e.ok() && r->stepError.ok()) r->stepError = e;
  }
  return r->stepError;
}

// After the first synced step: the layout from rank 0's readiness order
// (broadcast, so every rank builds the same), checked by a fingerprint
// agreement, then fixed.
Err rebuildFromOrder(tideReducer* r) {
  std::vector<int> order = r->order;
  for (int g = r->ngrads - 1; g >= 0; --g) {  // unmarked ones (findUnused) last
    if (!r->marked[static_cast<size_t>(g)]) order.push_back(g);
  }
  if (r->ngrads > 0) {
    const tideResult_t rc =
        tideBroadcast(order.data(), order.data(), order.size(), tideInt32, 0, r->comm, nullptr);
    r->stats.setup++;
    if (rc != tideSuccess) return commError(r, rc, "the rebuild's order broadcast");
  }
  if (!isPermutation(order, r->ngrads))
    return fail(tideInternalError, "step %llu: rank 0's readiness order is not a permutation",
                currentStep(r));
  const Layout layout = pack(order, r->counts, r->elemSize, r->sizes, r->groups);
  bool same = false;
  Err e = agree(r, layoutHash(layout), &same);
  if (!e.ok()) return e;
  if (!same)
    return fail(tideInternalError, "step %llu: the rebuilt bucket layouts differ across ranks",
                currentStep(r));
  r->stats.rebuilds++;
  Layout current;
  for (const Bucket& b : r->buckets) current.push_back(b.grads);
  if (current == layout) return okay();  // unchanged: the compressors keep their residuals
  std::vector<Bucket> fresh;
  e = applyLayout(r, layout, &fresh);
  if (!e.ok()) return e;
  installBuckets(r, &fresh);
  return okay();
}

}  // namespace

Err agreeOn(tideComm_t comm, uint64_t key, bool* same) {
  uint64_t v[2] = {key, ~key};
  const tideResult_t rc = tideAllReduce(v, v, 2, tideUint64, tideMax, comm, nullptr);
  if (rc != tideSuccess)
    return fail(rc, "the agreement check failed: %s (%s)", tideGetErrorString(rc),
                tideGetLastError(comm));
  *same = v[0] == key && v[1] == ~key;
  return okay();
}

Err agree(tideReducer* r, uint64_t key, bool* same) {
  r->stats.setup++;
  return agreeOn(r->comm, key, same);
}

Err applyLayout(tideReducer* r, const Layout& layout, std::vector<Bucket>* out) {
  out->clear();
  for (const auto& grads : layout) {
    Bucket b;
    b.grads = grads;
    if (r->reduceScatter) std::sort(b.grads.begin(), b.grads.end());
    for (int g : b.grads) {
      b.offsets.push_back(b.count);
      b.count += r->counts[static_cast<size_t>(g)];
    }
    if (grads.size() > 1 && !r->reduceScatter) b.staging.resize(b.count * r->elemSize);
    if (r->compress && b.count > 0) {
      const tideResult_t rc = tideCompressorCreate(r->comm, &r->compressConfig, &b.compressor);
      if (rc != tideSuccess) {
        freeBuckets(out);
        return fail(rc, "making a bucket's compressor failed: %s", tideGetLastError(r->comm));
      }
    }
    out->push_back(std::move(b));
  }
  if (r->reduceScatter) layoutScatter(r, out);
  return okay();
}

void freeBuckets(std::vector<Bucket>* buckets) {
  for (Bucket& b : *buckets) {
    if (b.compressor != nullptr) tideCompressorDestroy(b.compressor);
    if (b.gatherCompressor != nullptr) tideCompressorDestroy(b.gatherCompressor);
    b.compressor = nullptr;
    b.gatherCompressor = nullptr;
  }
  buckets->clear();
}

void installBuckets(tideReducer* r, std::vector<Bucket>* buckets) {
  freeBuckets(&r->buckets);
  r->buckets = std::move(*buckets);
  buckets->clear();
  r->bucketOf.assign(static_cast<size_t>(r->ngrads), 0);
  r->slotOf.assign(static_cast<size_t>(r->ngrads), 0);
  for (size_t b = 0; b < r->buckets.size(); ++b) {
    const std::vector<int>& grads = r->buckets[b].grads;
    for (size_t k = 0; k < grads.size(); ++k) {
      r->bucketOf[static_cast<size_t>(grads[k])] = static_cast<int>(b);
      r->slotOf[static_cast<size_t>(grads[k])] = k;
    }
  }
}

Err create(tideComm_t comm, int ngrads, void* const* grads, const size_t* counts,
           tideDataType_t datatype, const tideReducerConfig_t* config, tideReducer* r,
           bool nullOut) {
  r->comm = comm;
  tideResult_t rc = tideCommUserRank(comm, &r->rank);
  if (rc == tideSuccess) rc = tideCommCount(comm, &r->nranks);
  if (rc != tideSuccess) return fail(rc, "the communicator: %s", tideGetLastError(comm));
  // Local checks first; a rank that fails them still takes part in the
  // agreement (with key 0), so every rank fails together, none hangs.
  Err local = nullOut ? fail(tideInvalidArgument, "reducer pointer is NULL")
                      : parseArgs(ngrads, grads, counts, datatype, config, r);
  const size_t rawBucketBytes = r->sizes.bucketBytes;
  const uint64_t key = local.ok() ? fingerprintOf(r, rawBucketBytes) : 0;
  bool same = false;
  Err e = agree(r, key, &same);
  if (!e.ok()) return e;
  if (!local.ok()) return local;
  if (!same)
    return fail(tideInvalidArgument,
                "the ranks passed different arguments (ngrads, counts, datatype or config differ "
                "on some rank, or an argument was bad there; this rank: %d gradients)",
                ngrads);
  r->fingerprint = key;
  if (rawBucketBytes == SIZE_MAX) r->sizes.bucketBytes = chooseBucketBytes(comm);
  if (r->sizes.firstBucketBytes > r->sizes.bucketBytes)
    r->sizes.firstBucketBytes = r->sizes.bucketBytes;
  if (r->stream == nullptr) {
    const char* trace = std::getenv("TIDE_REDUCER_TRACE");
    if (trace != nullptr && *trace != '\0' && r->rank == 0) r->tracePath = trace;
    r->worker = std::make_unique<Worker>(comm, r->dtype, r->elemSize,
                                         r->average ? tideAvg : tideSum, !r->tracePath.empty());
  }
  if (r->gatherAsync) {
    // The all-gathers' own communicator and thread (every rank splits here).
    tideComm_t g = nullptr;
    rc = tideCommSplit(comm, 0, r->rank, &g, nullptr);
    if (rc != tideSuccess)
      return fail(rc, "making the all-gather communicator (tideCommSplit) failed: %s",
                  tideGetLastError(comm));
    r->gatherComm = g;
    r->gatherWorker = std::make_unique<Worker>(g, r->dtype, r->elemSize, tideSum, false);
  }
  std::vector<Bucket> buckets;
  e = applyLayout(r, pack(reverseOrder(ngrads), r->counts, r->elemSize, r->sizes, r->groups),
                  &buckets);
  if (!e.ok()) return e;
  installBuckets(r, &buckets);
  return okay();
}

Err markReady(tideReducer* r, int index) {
  if (index < 0 || index >= r->ngrads)
    return fail(tideInvalidArgument, "gradient %d out of range [0, %d)", index, r->ngrads);
  if (!r->inStep) beginStep(r);
  const size_t g = static_cast<size_t>(index);
  if (r->marked[g])
    return fail(tideInvalidArgument, "gradient %d was already marked in step %llu", index,
                currentStep(r));
  r->marked[g] = 1;
  r->order.push_back(index);
  if (!r->sync) return okay();
  Bucket& b = r->buckets[static_cast<size_t>(r->bucketOf[g])];
  if (r->reduceScatter && r->counts[g] > 0) {  // the caller may reuse grads[g] at once
    ensureStaging(r, b);
    std::memcpy(b.staging.data() + b.offsets[r->slotOf[g]] * r->elemSize, r->grads[g],
                r->counts[g] * r->elemSize);
  }
  b.pending--;
  return launchReady(r, false);
}

Err wait(tideReducer* r) {
  if (!r->inStep) beginStep(r);
  const unsigned long long stepNo = r->step + 1;
  int firstUnmarked = -1, nUnmarked = 0;
  for (int g = 0; g < r->ngrads; ++g) {
    if (r->marked[static_cast<size_t>(g)]) continue;
    if (firstUnmarked < 0) firstUnmarked = g;
    nUnmarked++;
  }
  r->inStep = false;
  r->stats.steps++;
  // The step ends however Wait returns (messages above name it as stepNo).
  struct StepEnd {
    tideReducer* r;
    ~StepEnd() { r->step++; }
  } end{r};
  if (!r->sync) {
    if (nUnmarked > 0 && !r->findUnused)
      return fail(tideInvalidUsage,
                  "gradient %d was not marked in step %llu (%d unmarked; a local step with "
                  "findUnused = 0 needs every gradient marked)",
                  firstUnmarked, stepNo, nUnmarked);
    return okay();
  }
  r->stats.synced++;
  launchReady(r, true);  // unmarked gradients contribute zeros
  Err drained = drainAll(r);
  if (r->stepError.ok()) r->stepError = drained;
  // findUnused = 0: the step check, after the last bucket. Key: the
  // smallest unmarked index of any rank first, then the lowest such rank.
  uint64_t check[2] = {0, 0};
  if (!r->findUnused && r->stepError.ok()) {
    if (nUnmarked > 0) {
      check[0] = (static_cast<uint64_t>(r->ngrads - firstUnmarked) << 32) |
                 static_cast<uint64_t>(r->nranks - r->rank);
      check[1] = static_cast<uint64_t>(nUnmarked);
    }
    const tideResult_t rc = tideAllReduce(check, check, 2, tideUint64, tideMax, r->comm, nullptr);
    r->stats.checks++;
    if (rc != tideSuccess) r->stepError = commError(r, rc, "the step check");
  }
  if (!r->stepError.ok()) return r->stepError;
  // The caller's stream: staged buckets are copied back here (the worker
  // copies each one back as soon as it is reduced).
  for (Bucket& b : r->buckets) {
    if (r->reduceScatter) {
      if (r->worker == nullptr) {
        addChunk(r, b);
        releaseStaging(r, b);
      }
      continue;
    }
    if (b.staging.empty() || r->worker != nullptr) continue;
    for (size_t k = 0; k < b.grads.size(); ++k) {
      const size_t g = static_cast<size_t>(b.grads[k]);
      const size_t n = r->counts[g] * r->elemSize;
      if (n > 0) std::memcpy(r->grads[g], b.staging.data() + b.offsets[k] * r->elemSize, n);
    }
  }
  if (check[0] != 0) {
    const int idx = r->ngrads - static_cast<int>(check[0] >> 32);
    const int rank = r->nranks - static_cast<int>(check[0] & 0xffffffffu);
    return fail(tideInvalidUsage,
                "gradient %d was not marked in step %llu (on rank %d; up to %llu unmarked on a "
                "rank): with findUnused = 0 every gradient must be marked before "
                "tideReducerWait (findUnused = 1 counts unmarked ones as zero)",
                idx, stepNo, rank, static_cast<unsigned long long>(check[1]));
  }
  if (r->rebuildPending) {
    r->rebuildPending = false;
    Err e = rebuildFromOrder(r);
    if (!e.ok()) return e;
  }
  return okay();
}

Err setSync(tideReducer* r, int enabled) {
  if (enabled != 0 && enabled != 1) return fail(tideInvalidArgument, "enabled %d: 0 or 1", enabled);
  if (r->inStep)
    return fail(tideInvalidUsage, "tideReducerSetSync inside step %llu (call it after Wait)",
                currentStep(r));
  r->sync = enabled == 1;
  return okay();
}

Err drainAll(tideReducer* r) {
  if (r->worker != nullptr) {
    std::string msg;
    const tideResult_t rc = r->worker->drain(&msg);
    if (rc != tideSuccess) return fail(rc, "the bucket All-Reduces failed: %s", msg.c_str());
    return okay();
  }
  if (r->stream == nullptr) return okay();
  const tideResult_t rc = tideStreamSynchronize(r->stream);
  if (rc != tideSuccess) return commError(r, rc, "the reducer's stream");
  return okay();
}

void destroy(tideReducer* r) {
  drainAll(r);
  r->gatherWorker.reset();  // its queued gathers finish first
  freeBuckets(&r->buckets);
  r->worker.reset();
  r->pool.reset();
  r->gatherPool.reset();
  if (r->gatherComm != nullptr) tideCommDestroy(r->gatherComm);
  r->gatherComm = nullptr;
}

}  // namespace tide_reducer
