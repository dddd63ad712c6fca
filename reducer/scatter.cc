// The gradient reducer's reduce-scatter mode (include/tide/reducer.h,
// docs/overlap.md "Reduce-scatter mode"): the padded bucket layout and the
// shard it defines, the add of a reduced chunk into the shard, and the
// inverse all-gather (ZeRO's parameter gather).
//
// Layout: bucket b holds its gradients in index order at b.offsets, count
// elements, padded with zeros to nranks * chunk (chunk = ceil(count /
// nranks)). Rank q owns elements [q * chunk, (q + 1) * chunk) of every
// bucket; its shard is those chunks one after another in launch order. The
// layout is fixed at creation, so every rank derives the same one.
#include <algorithm>
#include <cstring>

#include "reducer/reducer_impl.h"

namespace tide_reducer {

void addInto(void* dst, const void* src, size_t n, tideDataType_t dtype) {
  if (dtype == tideFloat64) {
    double* d = static_cast<double*>(dst);
    const double* s = static_cast<const double*>(src);
    for (size_t i = 0; i < n; ++i) d[i] += s[i];
    return;
  }
  float* d = static_cast<float*>(dst);
  const float* s = static_cast<const float*>(src);
  for (size_t i = 0; i < n; ++i) d[i] += s[i];
}

void layoutScatter(tideReducer* r, std::vector<Bucket>* buckets) {
  const size_t nr = static_cast<size_t>(r->nranks);
  size_t at = 0, largest = 0, sum = 0;
  std::vector<size_t> each;
  for (Bucket& b : *buckets) {
    b.chunk = (b.count + nr - 1) / nr;
    b.shardOffset = at;
    at += b.chunk;
    each.push_back(b.chunk * nr * r->elemSize);
    largest = std::max(largest, each.back());
    sum += each.back();
  }
  r->shardCount = at;
  // The layout is fixed (SetState installs the same one): one pool.
  if (r->pool == nullptr) {
    const size_t k = kStagingBuffers;
    if (sum > k * largest) each.assign(k, largest);
    r->pool = std::make_unique<StagingPool>(each, largest, r->worker != nullptr);
  }
}

void ensureStaging(tideReducer* r, Bucket& b) {
  if (!b.staging.empty() || b.chunk == 0) return;
  b.staging = r->pool->acquire(b.chunk * static_cast<size_t>(r->nranks) * r->elemSize);
}

void releaseStaging(tideReducer* r, Bucket& b) {
  if (b.staging.empty()) return;
  r->pool->release(std::move(b.staging), false);
  b.staging = {};
}

void bufferBytes(tideReducer* r, size_t* current, size_t* peak) {
  if (r->pool != nullptr) {
    r->pool->bytes(current, peak);
    return;
  }
  *current = 0;
  for (const Bucket& b : r->buckets) *current += b.staging.capacity();
  *peak = *current;
}

std::vector<CopyBack> ownedCopies(const tideReducer* r, Bucket& b, void* const* outs) {
  std::vector<CopyBack> out;
  const size_t lo = static_cast<size_t>(r->rank) * b.chunk, hi = lo + b.chunk;
  for (size_t k = 0; k < b.grads.size(); ++k) {
    const size_t g = static_cast<size_t>(b.grads[k]);
    const size_t s = std::max(lo, b.offsets[k]);
    const size_t e = std::min(hi, b.offsets[k] + r->counts[g]);
    if (s >= e) continue;
    void* base = outs != nullptr ? outs[g] : r->grads[g];
    if (base == nullptr) continue;
    out.push_back(CopyBack{static_cast<unsigned char*>(base) + (s - b.offsets[k]) * r->elemSize,
                           b.staging.data() + s * r->elemSize, (e - s) * r->elemSize});
  }
  return out;
}

void addChunk(tideReducer* r, Bucket& b) {
  if (b.chunk == 0) return;
  if (r->shard == nullptr) {
    for (const CopyBack& c : ownedCopies(r, b)) std::memcpy(c.dst, c.src, c.bytes);
    return;
  }
  addInto(static_cast<unsigned char*>(r->shard) + b.shardOffset * r->elemSize,
          b.staging.data() + static_cast<size_t>(r->rank) * b.chunk * r->elemSize, b.chunk,
          r->dtype);
}

Err copyCompressConfig(const tideCompressConfig_t* in, const char* what,
                       tideCompressConfig_t* out) {
  if (in->size < offsetof(tideCompressConfig_t, reserved) || in->size > sizeof(*in))
    return fail(tideInvalidArgument, "%s->size %zu: not a tideCompressConfig_t", what, in->size);
  tideCompressConfig_t copy = TIDE_COMPRESS_CONFIG_INITIALIZER;
  std::memcpy(&copy, in, in->size);
  copy.size = sizeof(copy);
  *out = copy;
  return okay();
}

Err getShard(tideReducer* r, tideReducerSegment_t* segments, int* nsegments, size_t* shardCount) {
  if (!r->reduceScatter)
    return fail(tideInvalidUsage, "tideReducerGetShard: the reducer is not in reduce-scatter mode");
  if (nsegments == nullptr || shardCount == nullptr)
    return fail(tideInvalidArgument, "%s is NULL",
                nsegments == nullptr ? "nsegments" : "shardCount");
  if (segments != nullptr && *nsegments < 0)
    return fail(tideInvalidArgument, "*nsegments %d < 0", *nsegments);
  const int room = segments != nullptr ? *nsegments : 0;
  int n = 0;
  const size_t q = static_cast<size_t>(r->rank);
  for (size_t bi = 0; bi < r->buckets.size(); ++bi) {
    const Bucket& b = r->buckets[bi];
    const size_t lo = q * b.chunk, hi = lo + b.chunk;
    for (size_t k = 0; k < b.grads.size(); ++k) {
      const size_t g = static_cast<size_t>(b.grads[k]);
      const size_t s = std::max(lo, b.offsets[k]);
      const size_t e = std::min(hi, b.offsets[k] + r->counts[g]);
      if (s >= e) continue;
      if (n < room)
        segments[n] = tideReducerSegment_t{b.grads[k], static_cast<int>(bi), s - b.offsets[k],
                                           e - s, b.shardOffset + (s - lo)};
      n++;
    }
  }
  *nsegments = n;
  *shardCount = r->shardCount;
  return okay();
}

namespace {

bool sameConfig(const tideCompressConfig_t& a, const tideCompressConfig_t& b) {
  return a.codec == b.codec && a.blockSize == b.blockSize && a.topkRatio == b.topkRatio &&
         a.errorFeedback == b.errorFeedback && a.stochasticRounding == b.stochasticRounding &&
         a.interNodeOnly == b.interNodeOnly && a.seed == b.seed;
}

// The gather compressors for `config` (made on first use; a new config
// replaces the old ones).
Err gatherCompressors(tideReducer* r, const tideCompressConfig_t& config) {
  if (r->haveGatherConfig && !sameConfig(r->gatherConfig, config)) {
    for (Bucket& b : r->buckets) {
      if (b.gatherCompressor != nullptr) tideCompressorDestroy(b.gatherCompressor);
      b.gatherCompressor = nullptr;
    }
  }
  r->gatherConfig = config;
  r->haveGatherConfig = true;
  for (Bucket& b : r->buckets) {
    if (b.gatherCompressor != nullptr || b.chunk == 0) continue;
    const tideResult_t rc = tideCompressorCreate(r->comm, &config, &b.gatherCompressor);
    if (rc != tideSuccess)
      return fail(rc, "making a bucket's all-gather compressor failed: %s",
                  tideGetLastError(r->comm));
  }
  return okay();
}

}  // namespace

Err allGather(tideReducer* r, const void* values, void* const* outs, int bucket,
              const tideCompressConfig_t* compress) {
  if (!r->reduceScatter)
    return fail(tideInvalidUsage,
                "tideReducerAllGather: the reducer is not in reduce-scatter mode");
  if (r->inStep)
    return fail(tideInvalidUsage, "tideReducerAllGather inside step %llu (call it after Wait)",
                currentStep(r));
  const int nb = static_cast<int>(r->buckets.size());
  if (bucket < -1 || bucket >= nb)
    return fail(tideInvalidArgument, "bucket %d out of range [-1, %d)", bucket, nb);
  tideCompressConfig_t cfg{};
  if (compress != nullptr) {
    Err e = copyCompressConfig(compress, "compress", &cfg);
    if (e.ok()) e = gatherCompressors(r, cfg);
    if (!e.ok()) return e;
  }
  Err d = drainAll(r);
  if (!d.ok()) return d;
  const size_t q = static_cast<size_t>(r->rank);
  for (int bi = bucket < 0 ? 0 : bucket; bi < (bucket < 0 ? nb : bucket + 1); ++bi) {
    Bucket& b = r->buckets[static_cast<size_t>(bi)];
    if (b.chunk == 0) continue;
    ensureStaging(r, b);
    unsigned char* mine = b.staging.data() + q * b.chunk * r->elemSize;
    if (values != nullptr) {
      std::memcpy(mine, static_cast<const unsigned char*>(values) + b.shardOffset * r->elemSize,
                  b.chunk * r->elemSize);
    } else {  // this rank's elements are in place in the destinations
      std::memset(mine, 0, b.chunk * r->elemSize);
      for (const CopyBack& c : ownedCopies(r, b, outs))
        std::memcpy(const_cast<void*>(c.src), c.dst, c.bytes);
    }
    const tideResult_t rc =
        compress != nullptr
            ? tideAllGatherCompressed(mine, b.staging.data(), b.chunk, r->dtype, b.gatherCompressor,
                                      r->comm, nullptr)
            : tideAllGather(mine, b.staging.data(), b.chunk, r->dtype, r->comm, nullptr);
    if (rc != tideSuccess)
      return fail(rc, "bucket %d's All-Gather failed: %s (%s)", bi, tideGetErrorString(rc),
                  tideGetLastError(r->comm));
    for (size_t k = 0; k < b.grads.size(); ++k) {
      const size_t g = static_cast<size_t>(b.grads[k]);
      void* dst = outs != nullptr ? outs[g] : r->grads[g];
      if (dst == nullptr || r->counts[g] == 0) continue;
      std::memcpy(dst, b.staging.data() + b.offsets[k] * r->elemSize, r->counts[g] * r->elemSize);
    }
    releaseStaging(r, b);
  }
  return okay();
}

}  // namespace tide_reducer
