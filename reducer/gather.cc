// The reducer's all-gather in reduce-scatter mode (include/tide/reducer.h,
// tideReducerAllGather*; docs/overlap.md "Reduce-scatter mode"): every
// rank's chunk of a bucket back into whole tensors on every rank, the
// inverse of the bucket's Reduce-Scatter (ZeRO's parameter gather).
//
// Two ways. gatherAsync 0: on the caller's thread and the reducer's
// communicator, between steps (the step's Reduce-Scatters are done). 1: on
// the gather thread over a second communicator made at creation, so the
// gathers neither wait for nor reorder the step's Reduce-Scatters; every
// rank starts the same gathers in the same order, so each communicator
// sees the same sequence everywhere.
#include <algorithm>
#include <cstring>

#include "reducer/reducer_impl.h"

namespace tide_reducer {

namespace {

bool sameConfig(const tideCompressConfig_t& a, const tideCompressConfig_t& b) {
  return a.codec == b.codec && a.blockSize == b.blockSize && a.topkRatio == b.topkRatio &&
         a.errorFeedback == b.errorFeedback && a.stochasticRounding == b.stochasticRounding &&
         a.interNodeOnly == b.interNodeOnly && a.seed == b.seed;
}

tideComm_t gatherComm(const tideReducer* r) {
  return r->gatherComm != nullptr ? r->gatherComm : r->comm;
}

Err waitGathers(tideReducer* r, uint64_t seq) {
  if (r->gatherWorker == nullptr || seq == 0) return okay();
  std::string msg;
  const tideResult_t rc = r->gatherWorker->waitFor(seq, &msg);
  if (rc != tideSuccess) return fail(rc, "the all-gather failed: %s", msg.c_str());
  return okay();
}

// The gather compressors for `config` (made on first use; a new config
// replaces the old ones once no gather uses them).
Err gatherCompressors(tideReducer* r, const tideCompressConfig_t& config) {
  if (r->haveGatherConfig && !sameConfig(r->gatherConfig, config)) {
    Err e = waitGathers(r, r->gatherSeq);
    if (!e.ok()) return e;
    for (Bucket& b : r->buckets) {
      if (b.gatherCompressor != nullptr) tideCompressorDestroy(b.gatherCompressor);
      b.gatherCompressor = nullptr;
    }
  }
  r->gatherConfig = config;
  r->haveGatherConfig = true;
  for (Bucket& b : r->buckets) {
    if (b.gatherCompressor != nullptr || b.chunk == 0) continue;
    const tideResult_t rc = tideCompressorCreate(gatherComm(r), &config, &b.gatherCompressor);
    if (rc != tideSuccess)
      return fail(rc, "making a bucket's all-gather compressor failed: %s",
                  tideGetLastError(gatherComm(r)));
  }
  return okay();
}

// This rank's chunk of bucket b into its place in `buf` (the bucket's
// staging): from values (laid out as the shard), or in place from the
// destinations.
void fillChunk(const tideReducer* r, const Bucket& b, unsigned char* buf, const void* values,
               void* const* outs) {
  unsigned char* mine = buf + static_cast<size_t>(r->rank) * b.chunk * r->elemSize;
  if (values != nullptr) {
    std::memcpy(mine, static_cast<const unsigned char*>(values) + b.shardOffset * r->elemSize,
                b.chunk * r->elemSize);
    return;
  }
  std::memset(mine, 0, b.chunk * r->elemSize);
  for (const CopyBack& c : ownedCopies(r, b, buf, outs))
    std::memcpy(const_cast<void*>(c.src), c.dst, c.bytes);
}

// The copies of a gathered bucket (in buf) into the destinations.
std::vector<CopyBack> copiesOut(const tideReducer* r, const Bucket& b, const unsigned char* buf,
                                void* const* outs) {
  std::vector<CopyBack> out;
  for (size_t k = 0; k < b.grads.size(); ++k) {
    const size_t g = static_cast<size_t>(b.grads[k]);
    void* dst = outs != nullptr ? outs[g] : r->grads[g];
    if (dst == nullptr || r->counts[g] == 0) continue;
    out.push_back(CopyBack{dst, buf + b.offsets[k] * r->elemSize, r->counts[g] * r->elemSize});
  }
  return out;
}

// gatherAsync 0: bucket b now, on the caller's thread.
Err gatherNow(tideReducer* r, int bi, const void* values, void* const* outs, bool compressed) {
  Bucket& b = r->buckets[static_cast<size_t>(bi)];
  ensureStaging(r, b);
  fillChunk(r, b, b.staging.data(), values, outs);
  unsigned char* mine = b.staging.data() + static_cast<size_t>(r->rank) * b.chunk * r->elemSize;
  const tideResult_t rc =
      compressed ? tideAllGatherCompressed(mine, b.staging.data(), b.chunk, r->dtype,
                                           b.gatherCompressor, r->comm, nullptr)
                 : tideAllGather(mine, b.staging.data(), b.chunk, r->dtype, r->comm, nullptr);
  if (rc != tideSuccess) {
    releaseStaging(r, b);
    return fail(rc, "bucket %d's All-Gather failed: %s (%s)", bi, tideGetErrorString(rc),
                tideGetLastError(r->comm));
  }
  for (const CopyBack& c : copiesOut(r, b, b.staging.data(), outs))
    std::memcpy(c.dst, c.src, c.bytes);
  releaseStaging(r, b);
  return okay();
}

// gatherAsync 1: bucket b queued on the gather thread.
void gatherQueued(tideReducer* r, int bi, const void* values, void* const* outs, bool compressed) {
  Bucket& b = r->buckets[static_cast<size_t>(bi)];
  const size_t bytes = b.chunk * static_cast<size_t>(r->nranks) * r->elemSize;
  Job job;
  job.owned = r->gatherPool->acquire(bytes);
  job.pool = r->gatherPool.get();
  fillChunk(r, b, job.owned.data(), values, outs);
  job.buf = job.owned.data();
  job.count = b.chunk * static_cast<size_t>(r->nranks);
  job.compressor = compressed ? b.gatherCompressor : nullptr;
  job.bucket = bi;
  job.step = r->step + 1;
  job.gather = true;
  job.recvcount = b.chunk;
  job.recvOffset = static_cast<size_t>(r->rank) * b.chunk * r->elemSize;
  job.copies = copiesOut(r, b, job.owned.data(), outs);
  r->gatherPool->inFlight();
  b.gatherSeq = r->gatherWorker->submit(std::move(job));
  r->gatherSeq = b.gatherSeq;
}

Err checkGather(tideReducer* r, const char* fn, int bucket) {
  if (!r->reduceScatter)
    return fail(tideInvalidUsage, "%s: the reducer is not in reduce-scatter mode", fn);
  const int nb = static_cast<int>(r->buckets.size());
  if (bucket < -1 || bucket >= nb)
    return fail(tideInvalidArgument, "bucket %d out of range [-1, %d)", bucket, nb);
  return okay();
}

}  // namespace

Err gatherStart(tideReducer* r, const void* values, void* const* outs, int bucket,
                const tideCompressConfig_t* compress) {
  Err e = checkGather(r, "tideReducerAllGatherStart", bucket);
  if (!e.ok()) return e;
  const bool async = r->gatherWorker != nullptr;
  if (!async && r->inStep)
    return fail(tideInvalidUsage,
                "tideReducerAllGather inside step %llu (call it after Wait, or create the "
                "reducer with gatherAsync 1)",
                currentStep(r));
  if (compress != nullptr) {
    tideCompressConfig_t cfg{};
    e = copyCompressConfig(compress, "compress", &cfg);
    if (e.ok()) e = gatherCompressors(r, cfg);
    if (!e.ok()) return e;
  }
  if (!async) {
    Err d = drainAll(r);
    if (!d.ok()) return d;
  }
  const int nb = static_cast<int>(r->buckets.size());
  for (int bi = bucket < 0 ? 0 : bucket; bi < (bucket < 0 ? nb : bucket + 1); ++bi) {
    if (r->buckets[static_cast<size_t>(bi)].chunk == 0) continue;
    if (async) {
      gatherQueued(r, bi, values, outs, compress != nullptr);
      continue;
    }
    e = gatherNow(r, bi, values, outs, compress != nullptr);
    if (!e.ok()) return e;
  }
  return okay();
}

Err gatherWait(tideReducer* r, int bucket) {
  Err e = checkGather(r, "tideReducerAllGatherWait", bucket);
  if (!e.ok()) return e;
  return waitGathers(r,
                     bucket < 0 ? r->gatherSeq : r->buckets[static_cast<size_t>(bucket)].gatherSeq);
}

Err allGather(tideReducer* r, const void* values, void* const* outs, int bucket,
              const tideCompressConfig_t* compress) {
  Err e = gatherStart(r, values, outs, bucket, compress);
  if (e.ok()) e = gatherWait(r, bucket);
  return e;
}

}  // namespace tide_reducer
