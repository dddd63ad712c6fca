/*
 * The gradient reducer from C (tide/reducer.h and what it includes, nothing
 * else): a synthetic backward pass at 1-4 ranks over shm or TCP
 * (`capi_reducer_test shm|tcp`). Twelve float32 gradients of odd sizes (one
 * larger than a bucket, one of 0 elements) in 16 KiB / 64 KiB buckets, marked
 * in reverse order with a different random interleaving on every rank, three
 * steps. Every step's result is compared with a plain tideAllReduce
 * (tideAvg) of each gradient: bit for bit at 1 and 2 ranks, within fp32
 * reduction-order rounding at 3 and 4. The layout starts in reverse index
 * order and, after step 1, follows rank 0's readiness order (checked on
 * every rank, so it is the same everywhere); the step checks are counted
 * (TIDE_REDUCER_STATS). Then an int8-compressed reducer (sum): every element
 * within the codec's documented bound (docs/compression.md).
 */
#include "reducer_common.h"

enum { kGrads = 12, kSteps = 3 };
static const size_t kCounts[kGrads] = {3001, 0,     40009, 17,  513,  4099,
                                       2047, 12345, 1,     999, 6000, 20000};
static const size_t kFirst = 16u << 10;
static const size_t kBucket = 64u << 10;

static float* g_grad[kGrads];
static float* g_in[kGrads];
static float* g_ref[kGrads];

static void Alloc(void) {
  int g;
  for (g = 0; g < kGrads; ++g) {
    const size_t n = kCounts[g] ? kCounts[g] : 1;
    g_grad[g] = (float*)calloc(n, sizeof(float));
    g_in[g] = (float*)calloc(n, sizeof(float));
    g_ref[g] = (float*)calloc(n, sizeof(float));
  }
}

static void Free(void) {
  int g;
  for (g = 0; g < kGrads; ++g) {
    free(g_grad[g]);
    free(g_in[g]);
    free(g_ref[g]);
  }
}

/* Rank g_rank's backward pass of step s: inputs, marked in its own order. */
static void Backward(tideReducer_t red, int s) {
  int order[kGrads], k;
  MarkOrder(g_rank, s, kGrads, order);
  for (k = 0; k < kGrads; ++k) {
    const int g = order[k];
    Fill(g_in[g], kCounts[g], g_rank, s, g);
    memcpy(g_grad[g], g_in[g], kCounts[g] * sizeof(float));
    MUST(tideReducerMarkReady(red, g));
  }
  MUST(tideReducerWait(red));
}

/* Both results round: each is within (n + 2) 2^-23 sum|x| / n of the mean. */
static double Tolerance(int s, int g, size_t i) {
  double a = 0;
  int r;
  for (r = 0; r < g_nranks; ++r) a += fabs(Input(r, s, g, i));
  return 2.0 * (g_nranks + 2) * ldexp(1.0, -23) * a / g_nranks;
}

static void CheckStep(int s) {
  int g;
  size_t i;
  for (g = 0; g < kGrads; ++g) {
    if (kCounts[g] == 0) continue;
    MUST(tideAllReduce(g_in[g], g_ref[g], kCounts[g], tideFloat32, tideAvg, g_comm, NULL));
    if (g_nranks <= 2) {
      CHECK(memcmp(g_grad[g], g_ref[g], kCounts[g] * sizeof(float)) == 0,
            "step %d gradient %d differs from tideAllReduce (bit for bit at %d ranks)", s, g,
            g_nranks);
      continue;
    }
    for (i = 0; i < kCounts[g]; ++i) {
      const double d = fabs((double)g_grad[g][i] - (double)g_ref[g][i]);
      if (d > Tolerance(s, g, i)) {
        CHECK(0, "step %d gradient %d element %zu: %.9g, tideAllReduce %.9g (tolerance %g)", s, g,
              i, g_grad[g][i], g_ref[g][i], Tolerance(s, g, i));
        break;
      }
    }
  }
}

static void CheckLayout(tideReducer_t red, const int* order, const char* what) {
  int want[kGrads], got[kGrads], g;
  const int nw = Pack(order, kGrads, kCounts, kFirst, kBucket, want);
  const int ng = CurrentLayout(red, kGrads, got);
  CHECK(nw == ng, "%s: %d buckets, want %d", what, ng, nw);
  for (g = 0; g < kGrads && nw == ng; ++g)
    CHECK(want[g] == got[g], "%s: gradient %d in bucket %d, want %d", what, g, got[g], want[g]);
}

static void Uncompressed(void) {
  tideReducerConfig_t config = TIDE_REDUCER_CONFIG_INITIALIZER;
  tideReducer_t red = NULL;
  int order[kGrads], s, k;
  Stats st;
  config.bucketBytes = kBucket;
  config.firstBucketBytes = kFirst;
  MUST(
      tideReducerCreate(g_comm, kGrads, (void* const*)g_grad, kCounts, tideFloat32, &config, &red));
  for (k = 0; k < kGrads; ++k) order[k] = kGrads - 1 - k;
  CheckLayout(red, order, "initial layout (reverse index order)");
  for (s = 1; s <= kSteps; ++s) {
    Backward(red, s);
    CheckStep(s);
    if (s == 1) {
      int before[kGrads], after[kGrads], g, moved = 0;
      for (k = 0; k < kGrads; ++k) order[k] = kGrads - 1 - k;
      Pack(order, kGrads, kCounts, kFirst, kBucket, before);
      MarkOrder(0, 1, kGrads, order); /* rank 0's readiness order in step 1 */
      Pack(order, kGrads, kCounts, kFirst, kBucket, after);
      for (g = 0; g < kGrads; ++g) moved += before[g] != after[g];
      CHECK(moved > 0, "the test's orders must give another layout (the rebuild would not show)");
      CheckLayout(red, order, "layout rebuilt after step 1");
    }
  }
  MarkOrder(0, 1, kGrads, order);
  CheckLayout(red, order, "layout after step 3 (fixed)");
  DestroyWithStats(red, &st);
  CHECK(st.steps == kSteps && st.synced == kSteps, "%llu steps, %llu synced", st.steps, st.synced);
  CHECK(st.checks == kSteps, "%llu step checks in %d steps (findUnused = 0: one each)", st.checks,
        kSteps);
  CHECK(st.rebuilds == 1, "%llu rebuilds", st.rebuilds);
}

static void Int8(void) {
  tideCompressConfig_t cc = TIDE_COMPRESS_CONFIG_INITIALIZER;
  tideReducerConfig_t config = TIDE_REDUCER_CONFIG_INITIALIZER;
  tideReducer_t red = NULL;
  const double n = g_nranks, step = 1.0 / 127;
  int g, r;
  size_t i;
  double worst = 0;
  cc.codec = tideCodecInt8;
  config.bucketBytes = kBucket;
  config.firstBucketBytes = kFirst;
  config.average = 0;
  config.compress = &cc;
  MUST(
      tideReducerCreate(g_comm, kGrads, (void* const*)g_grad, kCounts, tideFloat32, &config, &red));
  Backward(red, 7);
  for (g = 0; g < kGrads; ++g) {
    for (i = 0; i < kCounts[g]; ++i) {
      double sum = 0, a = 0, bound, err;
      for (r = 0; r < g_nranks; ++r) {
        sum += Input(r, 7, g, i);
        a += fabs(Input(r, 7, g, i));
      }
      /* |x| < 1: every scale <= 1/127, the output's <= (n + n/254)/127. */
      bound = n * step / 2 + (n + n * step / 2) / 127 / 2 + (n + 2) * ldexp(1.0, -23) * a;
      err = fabs(g_grad[g][i] - sum);
      if (err > worst) worst = err;
      if (!(err <= bound)) {
        CHECK(0, "int8: gradient %d element %zu: %.9g, sum %.9g (error %g > bound %g)", g, i,
              g_grad[g][i], sum, err, bound);
        break;
      }
    }
  }
  MUST(tideReducerDestroy(red));
  if (g_rank == 0) printf("int8 at %d ranks: worst error %g\n", g_nranks, worst);
}

static void Body(void) {
  Alloc();
  Uncompressed();
  Int8();
  Free();
}

int main(int argc, char** argv) {
  const int tcp = argc > 1 && strcmp(argv[1], "tcp") == 0;
  int n, failed = 0;
  setvbuf(stdout, NULL, _IOLBF, 0);
  for (n = 1; n <= 4; ++n) failed += RunGroup("reducer vs tideAllReduce", n, tcp, NULL, Body);
  printf("capi_reducer_test: %s\n", failed ? "FAILED" : "all groups passed");
  return failed ? 1 : 0;
}
