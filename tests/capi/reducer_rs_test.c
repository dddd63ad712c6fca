/*
 * The gradient reducer's reduce-scatter mode from C (tide/reducer.h only),
 * at 1-4 ranks over shm: the same twelve odd-sized float32 gradients as
 * reducer_test.c (one of 0 elements, one larger than a bucket), marked in a
 * different random interleaving on every rank.
 *  - tideReducerGetShard: every element of every gradient is owned by
 *    exactly one rank (the ranks' coverage summed with tideAllReduce), the
 *    segments tile the shard in order, the rest is padding.
 *  - Two synced steps into a shard: each shard element is the mean over the
 *    ranks of both steps' inputs (the chunk is ADDED), within fp32
 *    reduction-order rounding; the caller overwrites each gradient right
 *    after MarkReady and the reducer still reduces what was marked.
 *  - shard NULL: the elements this rank owns are written into grads (the
 *    others keep the rank's own values).
 *  - tideReducerAllGather: every rank's shard of values back into whole
 *    tensors on every rank (all buckets, then one bucket only, then bf16
 *    compressed within bf16 rounding, then in place: values NULL); the
 *    staging bytes (tideReducerGetBufferBytes) within every bucket's.
 *  Each with the reducer's worker thread and with a host stream of the caller.
 *  - gatherAsync 1 with groups: no bucket spans two groups; all-gathers
 *    started inside a step give the tensors, and the step's shard is right.
 *  - bfloat16 gradients into a bfloat16 shard (mixed precision's ZeRO 2-3):
 *    two steps' means added, each within bf16 rounding of the fp64 mean;
 *    tideReduceLocal's sums (bf16, fp16, fp32, int32) and its bad input.
 *  - Misuse: AllGather inside a step and GetShard of a plain reducer are
 *    tideInvalidUsage; rebuildBuckets 1 or int32 with reduceScatter are
 *    tideInvalidArgument on every rank; the reducer stays usable.
 */
#include "reducer_common.h"

enum { kGrads = 12 };
static const size_t kCounts[kGrads] = {3001, 0,     40009, 17,  513,  4099,
                                       2047, 12345, 1,     999, 6000, 20000};

static float* g_grad[kGrads];
static float* g_out[kGrads];

/* The whole-tensor value the all-gather checks: the same on every rank. */
static float Value(int g, size_t i) { return (float)(g * 1000003 + (int)i) * 0.001f; }

static double Tol(int s0, int s1, int g, size_t i) {
  double a = 0;
  int r, s;
  for (s = s0; s <= s1; ++s)
    for (r = 0; r < g_nranks; ++r) a += fabs(Input(r, s, g, i));
  return 2.0 * (g_nranks + 4) * ldexp(1.0, -23) * a / g_nranks;
}

static tideStream_t g_stream = NULL; /* NULL: the reducer's worker; else a host stream */

static tideReducer_t Make(void* shard, tideResult_t want) {
  tideReducerConfig_t config = TIDE_REDUCER_CONFIG_INITIALIZER;
  tideReducer_t red = NULL;
  tideResult_t rc;
  config.bucketBytes = 64u << 10;
  config.firstBucketBytes = 16u << 10;
  config.reduceScatter = 1;
  config.shard = shard;
  config.stream = g_stream;
  rc = tideReducerCreate(g_comm, kGrads, (void* const*)g_grad, kCounts, tideFloat32, &config, &red);
  CHECK(rc == want, "tideReducerCreate in reduce-scatter mode: %s, want %s", tideGetErrorString(rc),
        tideGetErrorString(want));
  return red;
}

/* A backward pass of step s; in reduce-scatter mode (rs) each gradient is
 * overwritten right after MarkReady (a plain reducer's caller must leave it
 * alone until Wait). */
static void Backward(tideReducer_t red, int s, int rs) {
  int order[kGrads], k;
  size_t i;
  MarkOrder(g_rank, s, kGrads, order);
  for (k = 0; k < kGrads; ++k) {
    const int g = order[k];
    Fill(g_grad[g], kCounts[g], g_rank, s, g);
    MUST(tideReducerMarkReady(red, g));
    for (i = 0; rs && i < kCounts[g]; ++i) g_grad[g][i] = -7.0f;
  }
  MUST(tideReducerWait(red));
}

static int Segments(tideReducer_t red, tideReducerSegment_t** segs, size_t* count) {
  int n = 0;
  MUST(tideReducerGetShard(red, NULL, &n, count));
  *segs = (tideReducerSegment_t*)calloc((size_t)n + 1, sizeof(**segs));
  MUST(tideReducerGetShard(red, *segs, &n, count));
  return n;
}

static void CheckLayout(tideReducer_t red) {
  tideReducerSegment_t* segs;
  size_t count, at = 0, total = 0, i;
  const int n = Segments(red, &segs, &count);
  float* cover[kGrads];
  int g, k;
  for (g = 0; g < kGrads; ++g) {
    cover[g] = (float*)calloc(kCounts[g] + 1, sizeof(float));
    total += kCounts[g];
  }
  for (k = 0; k < n; ++k) {
    const tideReducerSegment_t* s = &segs[k];
    CHECK(s->grad >= 0 && s->grad < kGrads && s->offset + s->count <= kCounts[s->grad] &&
              s->count > 0,
          "segment %d: gradient %d [%zu, +%zu)", k, s->grad, s->offset, s->count);
    CHECK(s->shardOffset >= at, "segment %d at shard %zu before %zu", k, s->shardOffset, at);
    at = s->shardOffset + s->count;
    if (s->grad < 0 || s->grad >= kGrads || s->offset + s->count > kCounts[s->grad]) continue;
    for (i = 0; i < s->count; ++i) cover[s->grad][s->offset + i] += 1.0f;
  }
  CHECK(at <= count, "segments end at %zu past the shard's %zu elements", at, count);
  CHECK(count <= total / (size_t)g_nranks + kGrads, "shard of %zu elements for %zu over %d ranks",
        count, total, g_nranks);
  for (g = 0; g < kGrads; ++g) {
    if (kCounts[g] == 0) continue;
    MUST(tideAllReduce(cover[g], cover[g], kCounts[g], tideFloat32, tideSum, g_comm, NULL));
    for (i = 0; i < kCounts[g]; ++i) {
      if (cover[g][i] != 1.0f) {
        CHECK(0, "gradient %d element %zu owned by %g ranks", g, i, cover[g][i]);
        break;
      }
    }
    free(cover[g]);
  }
  free(segs);
}

static void IntoShard(void) {
  tideReducerSegment_t* segs;
  size_t count, i;
  int n, k;
  float* shard;
  for (k = 0, i = kGrads; k < kGrads; ++k) i += kCounts[k]; /* at least shardCount */
  shard = (float*)calloc(i, sizeof(float));
  tideReducer_t red = Make(shard, tideSuccess);
  CheckLayout(red);
  n = Segments(red, &segs, &count);
  Backward(red, 1, 1);
  Backward(red, 2, 1); /* added to step 1's */
  for (k = 0; k < n; ++k) {
    const tideReducerSegment_t* s = &segs[k];
    for (i = 0; i < s->count; ++i) {
      const size_t e = s->offset + i;
      double want = 0;
      int r;
      for (r = 0; r < g_nranks; ++r)
        want += ((double)Input(r, 1, s->grad, e) + (double)Input(r, 2, s->grad, e)) / g_nranks;
      if (fabs(shard[s->shardOffset + i] - want) > Tol(1, 2, s->grad, e)) {
        CHECK(0, "gradient %d element %zu: shard %.9g, mean of two steps %.9g", s->grad, e,
              shard[s->shardOffset + i], want);
        break;
      }
    }
  }
  for (i = 0; i < kCounts[2]; ++i) {
    if (g_grad[2][i] != -7.0f) {
      CHECK(0, "gradient 2 element %zu changed to %g (grads are left as they were)", i,
            g_grad[2][i]);
      break;
    }
  }
  /* AllGather: every bucket, then bucket 0 only, then bf16 compressed. */
  {
    float* values = (float*)calloc(count + 1, sizeof(float));
    int g, pass, bucketOf[kGrads];
    CurrentLayout(red, kGrads, bucketOf);
    for (k = 0; k < n; ++k)
      for (i = 0; i < segs[k].count; ++i)
        values[segs[k].shardOffset + i] = Value(segs[k].grad, segs[k].offset + i);
    for (pass = 0; pass < 3; ++pass) {
      tideCompressConfig_t cc = TIDE_COMPRESS_CONFIG_INITIALIZER;
      cc.codec = tideCodecBf16;
      for (g = 0; g < kGrads; ++g)
        for (i = 0; i < kCounts[g]; ++i) g_out[g][i] = -1.0f;
      MUST(tideReducerAllGather(red, values, (void* const*)g_out, pass == 1 ? 0 : -1,
                                pass == 2 ? &cc : NULL));
      for (g = 0; g < kGrads; ++g) {
        const int written = pass != 1 || bucketOf[g] == 0;
        for (i = 0; i < kCounts[g]; ++i) {
          const float v = written ? Value(g, i) : -1.0f;
          const double tol = pass == 2 ? fabs(v) * ldexp(1.0, -8) : 0.0;
          if (fabs(g_out[g][i] - v) > tol) {
            CHECK(0, "all-gather pass %d: gradient %d (bucket %d) element %zu: %.9g, want %.9g",
                  pass, g, bucketOf[g], i, g_out[g][i], v);
            break;
          }
        }
      }
    }
    /* values NULL: each rank's elements in place in outs. */
    for (g = 0; g < kGrads; ++g)
      for (i = 0; i < kCounts[g]; ++i) g_out[g][i] = -1.0f;
    for (k = 0; k < n; ++k)
      for (i = 0; i < segs[k].count; ++i)
        g_out[segs[k].grad][segs[k].offset + i] = Value(segs[k].grad, segs[k].offset + i);
    MUST(tideReducerAllGather(red, NULL, (void* const*)g_out, -1, NULL));
    for (g = 0; g < kGrads; ++g) {
      for (i = 0; i < kCounts[g]; ++i) {
        if (g_out[g][i] != Value(g, i)) {
          CHECK(0, "in-place all-gather: gradient %d element %zu: %.9g, want %.9g", g, i,
                g_out[g][i], Value(g, i));
          break;
        }
      }
    }
    free(values);
  }
  {
    size_t now = 0, peak = 0;
    MUST(tideReducerGetBufferBytes(red, &now, &peak));
    CHECK(peak > 0 && now <= peak && peak <= 2 * (size_t)g_nranks * count * 4 + 4096,
          "staging bytes: %zu now, %zu peak (shard %zu elements at %d ranks)", now, peak, count,
          g_nranks);
    if (g_rank == 0)
      printf("reduce-scatter staging at %d ranks: peak %zu bytes of %zu for every bucket\n",
             g_nranks, peak, (size_t)g_nranks * count * 4);
  }
  /* Misuse: AllGather inside a step. */
  MUST(tideReducerMarkReady(red, 3));
  CHECK(tideReducerAllGather(red, shard, NULL, -1, NULL) == tideInvalidUsage,
        "AllGather inside a step must be tideInvalidUsage");
  for (k = 0; k < kGrads; ++k)
    if (k != 3) MUST(tideReducerMarkReady(red, k));
  MUST(tideReducerWait(red));
  MUST(tideReducerDestroy(red));
  free(segs);
  free(shard);
}

static void IntoGrads(void) {
  tideReducerSegment_t* segs;
  size_t count, i;
  int n, k;
  tideReducer_t red = Make(NULL, tideSuccess);
  n = Segments(red, &segs, &count);
  {
    int order[kGrads], g;
    MarkOrder(g_rank, 5, kGrads, order);
    for (k = 0; k < kGrads; ++k) {
      g = order[k];
      Fill(g_grad[g], kCounts[g], g_rank, 5, g);
      MUST(tideReducerMarkReady(red, g));
    }
    MUST(tideReducerWait(red));
  }
  for (k = 0; k < n; ++k) {
    const tideReducerSegment_t* s = &segs[k];
    for (i = 0; i < s->count; ++i) {
      const size_t e = s->offset + i;
      double want = 0;
      int r;
      for (r = 0; r < g_nranks; ++r) want += (double)Input(r, 5, s->grad, e) / g_nranks;
      if (fabs(g_grad[s->grad][e] - want) > Tol(5, 5, s->grad, e)) {
        CHECK(0, "shard NULL: gradient %d element %zu: %.9g, mean %.9g", s->grad, e,
              g_grad[s->grad][e], want);
        break;
      }
    }
  }
  MUST(tideReducerDestroy(red));
  free(segs);
}

/* gatherAsync 1 with groups: no bucket spans two groups; gathers started
 * inside a step (while its Reduce-Scatters run) give the same tensors, and
 * the step's shard is still the mean. */
static void Async(void) {
  tideReducerConfig_t config = TIDE_REDUCER_CONFIG_INITIALIZER;
  tideReducer_t red = NULL;
  tideReducerSegment_t* segs;
  int groups[kGrads], bucketOf[kGrads], g, k, n, nb;
  size_t count, i, total = kGrads;
  float *shard, *values;
  for (g = 0; g < kGrads; ++g) {
    groups[g] = g / 3;
    total += kCounts[g];
  }
  shard = (float*)calloc(total, sizeof(float));
  config.bucketBytes = 256u << 10;
  config.firstBucketBytes = 256u << 10;
  config.reduceScatter = 1;
  config.gatherAsync = 1;
  config.shard = shard;
  config.groups = groups;
  MUST(
      tideReducerCreate(g_comm, kGrads, (void* const*)g_grad, kCounts, tideFloat32, &config, &red));
  nb = CurrentLayout(red, kGrads, bucketOf);
  for (g = 0; g < kGrads; ++g)
    for (k = 0; k < kGrads; ++k)
      if (bucketOf[g] == bucketOf[k] && groups[g] != groups[k])
        CHECK(0, "gradients %d and %d (groups %d, %d) share bucket %d", g, k, groups[g], groups[k],
              bucketOf[g]);
  CHECK(nb >= 4, "%d buckets for 4 groups", nb);
  n = Segments(red, &segs, &count);
  values = (float*)calloc(count + 1, sizeof(float));
  for (k = 0; k < n; ++k)
    for (i = 0; i < segs[k].count; ++i)
      values[segs[k].shardOffset + i] = Value(segs[k].grad, segs[k].offset + i);
  for (g = 0; g < kGrads; ++g)
    for (i = 0; i < kCounts[g]; ++i) g_out[g][i] = -1.0f;
  {
    int order[kGrads];
    MarkOrder(g_rank, 11, kGrads, order);
    for (k = 0; k < kGrads; ++k) {
      Fill(g_grad[order[k]], kCounts[order[k]], g_rank, 11, order[k]);
      MUST(tideReducerMarkReady(red, order[k]));
      if (k == kGrads / 2)
        MUST(tideReducerAllGatherStart(red, values, (void* const*)g_out, 0, NULL));
    }
    MUST(tideReducerAllGatherStart(red, values, (void* const*)g_out, -1, NULL));
    MUST(tideReducerWait(red));
    MUST(tideReducerAllGatherWait(red, -1));
  }
  for (g = 0; g < kGrads; ++g)
    for (i = 0; i < kCounts[g]; ++i)
      if (g_out[g][i] != Value(g, i)) {
        CHECK(0, "async all-gather: gradient %d element %zu: %.9g, want %.9g", g, i, g_out[g][i],
              Value(g, i));
        break;
      }
  for (k = 0; k < n; ++k) {
    const tideReducerSegment_t* s = &segs[k];
    for (i = 0; i < s->count; ++i) {
      double want = 0;
      int r;
      for (r = 0; r < g_nranks; ++r)
        want += (double)Input(r, 11, s->grad, s->offset + i) / g_nranks;
      if (fabs(shard[s->shardOffset + i] - want) > Tol(11, 11, s->grad, s->offset + i)) {
        CHECK(0, "async: gradient %d element %zu: shard %.9g, mean %.9g", s->grad, s->offset + i,
              shard[s->shardOffset + i], want);
        break;
      }
    }
  }
  MUST(tideReducerDestroy(red));
  free(values);
  free(segs);
  free(shard);
}

static uint16_t ToBf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
static float FromBf16(uint16_t h) {
  const uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* tideReduceLocal: sums rounded once per element, the same kernels as the
 * collectives; bad arguments are tideInvalidArgument. */
static void LocalReduce(void) {
  enum { n = 1001 };
  uint16_t a[n], b[n];
  float x[n], y[n];
  int32_t p[n], q[n];
  size_t i;
  for (i = 0; i < n; ++i) {
    const float u = (float)i * 0.37f - 150.0f, v = 1.0f / ((float)i + 3.0f);
    a[i] = ToBf16(u);
    b[i] = ToBf16(v);
    x[i] = u;
    y[i] = v;
    p[i] = (int32_t)i - 500;
    q[i] = 3 * (int32_t)i;
  }
  MUST(tideReduceLocal(a, b, n, tideBfloat16, tideSum));
  MUST(tideReduceLocal(x, y, n, tideFloat32, tideSum));
  MUST(tideReduceLocal(p, q, n, tideInt32, tideSum));
  for (i = 0; i < n; ++i) {
    const float u = FromBf16(ToBf16((float)i * 0.37f - 150.0f));
    const float v = FromBf16(ToBf16(1.0f / ((float)i + 3.0f)));
    CHECK(b[i] == ToBf16(u + v), "bf16 %zu: %g, want %g", i, FromBf16(b[i]), u + v);
    CHECK(y[i] == (float)i * 0.37f - 150.0f + 1.0f / ((float)i + 3.0f), "fp32 %zu", i);
    CHECK(q[i] == 4 * (int32_t)i - 500, "int32 %zu: %d", i, q[i]);
    if (b[i] != ToBf16(u + v) || q[i] != 4 * (int32_t)i - 500) break;
  }
  {
    uint16_t h1 = 0x3c00, h2 = 0x4000; /* fp16 1 and 2 */
    MUST(tideReduceLocal(&h1, &h2, 1, tideFloat16, tideMax));
    CHECK(h2 == 0x4000, "fp16 max: %04x", h2);
    MUST(tideReduceLocal(&h1, &h2, 1, tideFloat16, tideSum));
    CHECK(h2 == 0x4200, "fp16 1 + 2: %04x, want 3 (4200)", h2);
  }
  CHECK(tideReduceLocal(NULL, y, 0, tideFloat32, tideSum) == tideSuccess, "count 0");
  CHECK(tideReduceLocal(NULL, y, 3, tideFloat32, tideSum) == tideInvalidArgument, "NULL in");
  CHECK(tideReduceLocal(x, NULL, 3, tideFloat32, tideSum) == tideInvalidArgument, "NULL inout");
  CHECK(tideReduceLocal(x, y, 3, (tideDataType_t)99, tideSum) == tideInvalidArgument, "dtype");
  CHECK(tideReduceLocal(x, y, 3, tideFloat32, (tideRedOp_t)42) == tideInvalidArgument, "op");
  CHECK(tideReduceLocal(x, y, 3, tideFloat32, tideAvg) == tideInvalidArgument, "avg");
}

/* bfloat16 gradients reduce-scattered into a bfloat16 shard, two steps. */
static void HalfShard(void) {
  tideReducerConfig_t config = TIDE_REDUCER_CONFIG_INITIALIZER;
  tideReducer_t red = NULL;
  tideReducerSegment_t* segs;
  uint16_t* hg[kGrads];
  uint16_t* shard;
  size_t count = 0, i, total = kGrads;
  int g, k, n = 0, s, r, bad = 0;
  for (g = 0; g < kGrads; ++g) {
    hg[g] = (uint16_t*)calloc(kCounts[g] + 1, sizeof(uint16_t));
    total += kCounts[g];
  }
  shard = (uint16_t*)calloc(total, sizeof(uint16_t));
  config.bucketBytes = 32u << 10;
  config.firstBucketBytes = 8u << 10;
  config.reduceScatter = 1;
  config.shard = shard;
  MUST(tideReducerCreate(g_comm, kGrads, (void* const*)hg, kCounts, tideBfloat16, &config, &red));
  for (s = 1; s <= 2; ++s) {
    int order[kGrads];
    MarkOrder(g_rank, s, kGrads, order);
    for (k = 0; k < kGrads; ++k) {
      g = order[k];
      for (i = 0; i < kCounts[g]; ++i) hg[g][i] = ToBf16(Input(g_rank, s, g, i));
      MUST(tideReducerMarkReady(red, g));
    }
    MUST(tideReducerWait(red));
  }
  n = Segments(red, &segs, &count);
  for (k = 0; k < n && !bad; ++k) {
    const tideReducerSegment_t* sg = &segs[k];
    for (i = 0; i < sg->count && !bad; ++i) {
      double want = 0, mag = 0;
      for (s = 1; s <= 2; ++s)
        for (r = 0; r < g_nranks; ++r) {
          const double v = FromBf16(ToBf16(Input(r, s, sg->grad, sg->offset + i)));
          want += v / g_nranks;
          mag += fabs(v) / g_nranks;
        }
      if (fabs(FromBf16(shard[sg->shardOffset + i]) - want) > (g_nranks + 3) * ldexp(mag, -8)) {
        CHECK(0, "bf16 shard: gradient %d element %zu is %g, want %g", sg->grad, sg->offset + i,
              FromBf16(shard[sg->shardOffset + i]), want);
        bad = 1;
      }
    }
  }
  MUST(tideReducerDestroy(red));
  for (g = 0; g < kGrads; ++g) free(hg[g]);
  free(shard);
  free(segs);
}

static void Misuse(void) {
  tideReducerConfig_t config = TIDE_REDUCER_CONFIG_INITIALIZER;
  tideReducer_t red = NULL;
  float shard[4];
  tideResult_t rc;
  int n = 0;
  size_t count = 0;
  config.reduceScatter = 1;
  config.shard = shard;
  config.rebuildBuckets = 1;
  rc = tideReducerCreate(g_comm, kGrads, (void* const*)g_grad, kCounts, tideFloat32, &config, &red);
  CHECK(rc == tideInvalidArgument, "rebuildBuckets 1 with reduceScatter: %s",
        tideGetErrorString(rc));
  config.rebuildBuckets = TIDE_CONFIG_UNDEF_INT;
  rc = tideReducerCreate(g_comm, kGrads, (void* const*)g_grad, kCounts, tideInt32, &config, &red);
  CHECK(rc == tideInvalidArgument, "int32 with reduceScatter: %s", tideGetErrorString(rc));
  CHECK(strstr(tideReducerGetLastError(NULL), "float32") != NULL, "message: %s",
        tideReducerGetLastError(NULL));
  config.reduceScatter = 0;
  MUST(
      tideReducerCreate(g_comm, kGrads, (void* const*)g_grad, kCounts, tideFloat32, &config, &red));
  CHECK(tideReducerGetShard(red, NULL, &n, &count) == tideInvalidUsage,
        "GetShard of a plain reducer must be tideInvalidUsage");
  CHECK(tideReducerAllGather(red, shard, NULL, -1, NULL) == tideInvalidUsage,
        "AllGather of a plain reducer must be tideInvalidUsage");
  Backward(red, 9, 0); /* still usable */
  MUST(tideReducerDestroy(red));
}

static void Body(void) {
  int g, pass;
  for (g = 0; g < kGrads; ++g) {
    g_grad[g] = (float*)calloc(kCounts[g] + 1, sizeof(float));
    g_out[g] = (float*)calloc(kCounts[g] + 1, sizeof(float));
  }
  for (pass = 0; pass < 2; ++pass) { /* the worker, then the caller's host stream */
    if (pass == 1) MUST(tideStreamCreate(&g_stream));
    IntoShard();
    IntoGrads();
  }
  MUST(tideStreamDestroy(g_stream));
  g_stream = NULL;
  Async();
  HalfShard();
  LocalReduce();
  Misuse();
  for (g = 0; g < kGrads; ++g) {
    free(g_grad[g]);
    free(g_out[g]);
  }
}

int main(void) {
  int n, failed = 0;
  setvbuf(stdout, NULL, _IOLBF, 0);
  for (n = 1; n <= 4; ++n) failed += RunGroup("reduce-scatter mode", n, 0, NULL, Body);
  printf("capi_reducer_rs_test: %s\n", failed ? "FAILED" : "all groups passed");
  return failed ? 1 : 0;
}
