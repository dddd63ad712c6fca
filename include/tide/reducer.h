/*
 * Tide: the bucketed gradient reducer (overlap engine).
 *
 * C99 and C++; includes tide/tide.h and tide/compress.h. Every function
 * returns a tideResult_t and never throws; the library never exits the
 * process. docs/overlap.md describes the design, defaults and measurements.
 *
 * A reducer averages (or sums) a fixed list of gradient buffers over the ranks
 * of a communicator, step after step. The caller marks each gradient ready
 * as the backward pass produces it; the reducer packs gradients into buckets
 * and starts a bucket's All-Reduce as soon as its last gradient is marked
 * (and every bucket before it in the agreed bucket order has started), on a
 * library thread, so communication overlaps the rest of the backward pass and
 * progress never depends on the caller polling. tideReducerWait ends the step.
 *
 * Collective calls: tideReducerCreate, tideReducerWait (of a synced step)
 * and tideReducerSetState are made by every rank of the communicator, in the
 * same order. tideReducerMarkReady, SetSync, GetState, GetLastError and
 * Destroy are local. Every rank must call SetSync with the same
 * values at the same steps.
 *
 * Threads: the calls of one reducer are serialized by the reducer (MarkReady
 * may come from any thread, e.g. a framework's autograd hooks). From the
 * first MarkReady of a step to its Wait, the communicator belongs to the
 * reducer: the caller makes no other call on it (its buckets' collectives run
 * on it in the agreed order).
 *
 * Buffers: grads[i] is the caller's host buffer of counts[i] elements; it
 * stays owned by the caller and must outlive the reducer. After MarkReady(i)
 * the caller neither reads nor writes grads[i] until Wait returns.
 *
 * Bounded waits: every wait of the reducer is a Tide call on the
 * communicator, bounded by its no-progress timeout (TIDE_TIMEOUT,
 * tideConfig_t.timeoutSeconds) or ended by tideCommAbort. A gradient left
 * unmarked at Wait (findUnused = 0) fails Wait on every rank with
 * tideInvalidUsage naming it ("gradient <index> ... step <n>"), never a hang
 * (a 16-byte step check after the last bucket of every synced step tells
 * every rank; findUnused = 1 needs none).
 *
 * Environment (docs/overlap.md): TIDE_REDUCER_STATS=FILE appends the
 * reducer's collective counts to FILE at Destroy; TIDE_REDUCER_TRACE=FILE
 * (rank 0) writes its buckets' All-Reduces as a Chrome trace.
 */
#ifndef TIDE_REDUCER_H_
#define TIDE_REDUCER_H_

#include "tide/compress.h"
#include "tide/tide.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tideReducer* tideReducer_t;

typedef struct {
  size_t size;             /* sizeof(tideReducerConfig_t) of the caller's header */
  size_t bucketBytes;      /* 0: 25 MiB; SIZE_MAX: chosen by the cost model */
  size_t firstBucketBytes; /* 0: 1 MiB */
  int rebuildBuckets;      /* TIDE_CONFIG_UNDEF_INT or 1: after the first step, rebuild from
                              the readiness order; 0: keep the initial (reverse-index) layout */
  int average;             /* TIDE_CONFIG_UNDEF_INT or 1: average over ranks; 0: sum */
  int findUnused; /* TIDE_CONFIG_UNDEF_INT or 0: every gradient must be marked each step; 1:
                     unmarked ones count as zero */
  const tideCompressConfig_t* compress; /* NULL: no compression; else one compressor per bucket
                                           (copied at creation) */
  tideStream_t stream; /* NULL: the reducer's own host stream; else this host or CUDA stream */
  /* Reduce-scatter mode (ZeRO stages 1-3; docs/overlap.md, "Reduce-scatter
   * mode"). TIDE_CONFIG_UNDEF_INT or 0: every bucket is All-Reduced back into
   * grads. 1: every bucket is Reduce-Scattered and this rank's chunk of it is
   * ADDED into `shard` (the caller zeroes it when it has consumed it), grads
   * left as they were; with shard NULL the chunk is instead written into the
   * elements of grads it covers (the others keep this rank's own, unreduced
   * values: ZeRO-1, whose gradients stay whole). The layout is then fixed at
   * creation (the initial reverse-index packing, within `groups`;
   * rebuildBuckets must be UNDEF or 0): a bucket of n
   * elements holds its gradients in index order, padded with zeros to
   * nranks*c elements (c = ceil(n / nranks)), and rank q owns chunk q. The
   * shard is the concatenation of this rank's chunks in bucket launch order
   * (tideReducerGetShard lists what each element is). In this mode
   * MarkReady (of a synced step) copies the gradient into the bucket before
   * returning, so the caller may reuse grads[i] at once (with shard NULL
   * the elements it covers are written before Wait returns). Datatypes:
   * float32, float64, bfloat16, float16 (a 16-bit shard is added to in fp32
   * and rounded once: tideReduceLocal). */
  int reduceScatter;
  /* Reduce-scatter mode: TIDE_CONFIG_UNDEF_INT or 0: tideReducerAllGatherStart
   * gathers at once on the caller's thread; 1: the reducer makes a second
   * communicator (tideCommSplit of comm, at creation) and a thread for the
   * all-gathers, so they run while the caller computes and while the
   * step's Reduce-Scatters are in flight (ZeRO-3's parameter prefetch). */
  int gatherAsync;
  void* shard; /* reduceScatter = 1: this rank's shard, tideReducerGetShard's shardCount elements,
                  or NULL */
  /* NULL, or ngrads group numbers: a bucket never holds gradients of two
   * groups (ZeRO-3 gathers one layer's tensors as its own buckets). */
  const int* groups;
  int reserved[10]; /* keep zero */
} tideReducerConfig_t;

#define TIDE_REDUCER_CONFIG_INITIALIZER                                              \
  {                                                                                  \
    sizeof(tideReducerConfig_t), 0, 0, TIDE_CONFIG_UNDEF_INT, TIDE_CONFIG_UNDEF_INT, \
        TIDE_CONFIG_UNDEF_INT, NULL, NULL, TIDE_CONFIG_UNDEF_INT, 0, NULL, NULL, {   \
      0                                                                              \
    }                                                                                \
  }

/* One piece of a reduce-scatter mode shard: elements [offset, offset+count)
 * of gradient `grad` are shard elements [shardOffset, shardOffset+count). */
typedef struct {
  int grad;
  int bucket; /* the bucket it belongs to (launch order) */
  size_t offset;
  size_t count;
  size_t shardOffset;
} tideReducerSegment_t;

/* Collective. Makes a reducer of the ngrads gradients grads[i] of counts[i]
 * elements of `datatype` (one datatype per reducer). config NULL: defaults.
 * Every rank passes the same ngrads, counts, datatype and config values; a
 * mismatch, or a bad argument on any rank, fails the call on every rank
 * (tideInvalidArgument, with a message; only a rank with a NULL comm cannot
 * take part, and fails alone). A gradient may have 0 elements. */
tideResult_t tideReducerCreate(tideComm_t comm, int ngrads, void* const* grads,
                               const size_t* counts, tideDataType_t datatype,
                               const tideReducerConfig_t* config, tideReducer_t* reducer);
/* Local. Gradient `index` of the current step is final (the first MarkReady
 * after a Wait begins the next step). tideInvalidArgument for an index out of
 * range or marked twice in the step. May start bucket All-Reduces (it
 * returns once they are enqueued, never waiting for them). */
tideResult_t tideReducerMarkReady(tideReducer_t reducer, int index);
/* Collective (in a synced step). Returns once every bucket of the step is
 * reduced, with the averaged (or summed) gradients in grads. An unmarked
 * gradient: with findUnused = 0, tideInvalidUsage on every rank naming it;
 * with findUnused = 1 it counts as zero (the rank contributes zeros, and its
 * buffer receives the reduced value). The step ends either way. */
tideResult_t tideReducerWait(tideReducer_t reducer);
/* Local, between steps. 0: the following steps accumulate locally (the
 * caller adds into grads; MarkReady/Wait communicate nothing); 1 (default):
 * the next step reduces the accumulated gradients. */
tideResult_t tideReducerSetSync(tideReducer_t reducer, int enabled);
/* Local. Waits for the reducer's enqueued work (bounded by the timeout), then
 * frees it (its own stream and compressors; never the caller's buffers or
 * stream). */
tideResult_t tideReducerDestroy(tideReducer_t reducer);
/* Detail of the reducer's last failure (never NULL). With reducer NULL: the
 * calling thread's last failure of a call without a reducer (Create). */
const char* tideReducerGetLastError(tideReducer_t reducer);
/* The bucket layout and every bucket's compression state, for checkpoints (buf NULL: the size
 * needed). Local, between steps; a versioned, checksummed blob of this rank. */
tideResult_t tideReducerGetState(tideReducer_t reducer, void* buf, size_t* bytes);
/* Collective, between steps: every rank loads its own rank's blob into a
 * reducer made with the same arguments. The next step uses the saved layout
 * and residuals, so a resumed run reduces exactly as the uninterrupted one.
 * A corrupt, foreign or mismatched blob on any rank: tideInvalidArgument on
 * every rank, every reducer unchanged. */
tideResult_t tideReducerSetState(tideReducer_t reducer, const void* buf, size_t bytes);

/* Local; reduce-scatter mode only (tideInvalidUsage otherwise). This rank's
 * shard: *shardCount its elements (padding included), *nsegments the number
 * of segments, and, when segments is not NULL, the first min(*nsegments on
 * entry, total) segments in shard order (shard elements no segment covers
 * are padding: they receive zeros). */
tideResult_t tideReducerGetShard(tideReducer_t reducer, tideReducerSegment_t* segments,
                                 int* nsegments, size_t* shardCount);
/* Collective, between steps; reduce-scatter mode only. The inverse of the
 * reduce-scatter: every rank's shard of `values` (shardCount elements of the
 * reducer's datatype, laid out as tideReducerGetShard says) is all-gathered
 * bucket by bucket into outs[i] (counts[i] elements each; outs NULL: into
 * grads[i]; outs[i] NULL: gradient i is not written), e.g. the parameters
 * after each rank updated its shard. values NULL: this rank's elements are
 * read in place from the destinations (its segments of outs[i], or grads).
 * bucket >= 0: that bucket only (ZeRO-3 gathers a layer before its
 * forward); -1: every bucket. With compress (a compressor per bucket, of
 * the config given here, NULL: none), the all-gather is compressed. Blocking
 * on the caller's thread, on the reducer's communicator. */
tideResult_t tideReducerAllGather(tideReducer_t reducer, const void* values, void* const* outs,
                                  int bucket, const tideCompressConfig_t* compress);
/* Collective; reduce-scatter mode only. tideReducerAllGather split in two:
 * Start reads this rank's elements (from values, or in place from outs)
 * before it returns and queues the gather; Wait(bucket) blocks until that
 * bucket's last started gather has written outs (-1: every started one) and
 * returns its result. outs[i] must stay valid until then. With gatherAsync 1
 * the gathers run on the reducer's gather thread and communicator, so Start
 * is allowed inside a step (the ranks start the same gathers in the same
 * order; two staging buffers: a third Start waits for the oldest); with
 * gatherAsync 0, Start gathers at once (between steps only) and Wait only
 * returns. */
tideResult_t tideReducerAllGatherStart(tideReducer_t reducer, const void* values, void* const* outs,
                                       int bucket, const tideCompressConfig_t* compress);
tideResult_t tideReducerAllGatherWait(tideReducer_t reducer, int bucket);

/* Local. The current bucket layout: *nbuckets buckets (launch order) and,
 * when bucketOf is not NULL, the bucket of each of the ngrads gradients. */
tideResult_t tideReducerGetLayout(tideReducer_t reducer, int* bucketOf, int* nbuckets);
/* Local. The bytes of the reducer's staging buffers now and at most so far
 * (reduce-scatter mode lends a bucket its buffer only while the bucket is
 * in flight, so this is what the steps needed; for memory accounting). */
tideResult_t tideReducerGetBufferBytes(tideReducer_t reducer, size_t* current, size_t* peak);

#ifdef __cplusplus
}
#endif

#endif /* TIDE_REDUCER_H_ */
