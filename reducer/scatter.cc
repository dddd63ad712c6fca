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
  // The collectives' own kernel: 16-bit shards are added in fp32 and rounded
  // once, as a reduction of theirs would be.
  (void)tideReduceLocal(src, dst, n, dtype, tideSum);
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
    if (r->gatherWorker != nullptr)
      r->gatherPool = std::make_unique<StagingPool>(each, largest, true);
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
    if (r->gatherPool != nullptr) {
      size_t c = 0, p = 0;
      r->gatherPool->bytes(&c, &p);
      *current += c;
      *peak += p;
    }
    return;
  }
  *current = 0;
  for (const Bucket& b : r->buckets) *current += b.staging.capacity();
  *peak = *current;
}

std::vector<CopyBack> ownedCopies(const tideReducer* r, const Bucket& b, unsigned char* buf,
                                  void* const* outs) {
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
                           buf + s * r->elemSize, (e - s) * r->elemSize});
  }
  return out;
}

void addChunk(tideReducer* r, Bucket& b) {
  if (b.chunk == 0) return;
  if (r->shard == nullptr) {
    for (const CopyBack& c : ownedCopies(r, b, b.staging.data()))
      std::memcpy(c.dst, c.src, c.bytes);
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

}  // namespace tide_reducer
