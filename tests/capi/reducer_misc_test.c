/*
 * The gradient reducer's other contracts from C (public headers only):
 *   unused0   findUnused = 0, one rank leaves a gradient unmarked: Wait fails
 *             on every rank with tideInvalidUsage naming "gradient <i>" and the
 *             step, within TIDE_TIMEOUT + 1 s; the next step works.
 *   unused1   findUnused = 1, each rank leaves other gradients unmarked, the set
 *             changing between steps: results are the average with zeros for
 *             them, and no step adds a collective (TIDE_REDUCER_STATS).
 *   accum     SetSync(0) for 2 local steps, then a synced one: the average of
 *             the accumulated sums, no collective in the local steps.
 *   state     int8 with error feedback: a reducer restored from GetState into a
 *             new reducer continues bit-identical to one never destroyed; a
 *             corrupt blob on one rank fails SetState on every rank.
 *   stream    config->stream (a host stream) gives the worker's results.
 *   bad       NULL pointers, index out of range, double mark, counts that
 *             differ across ranks at creation (fails on every rank), and
 *             tideCommPredictTime's checks and monotonicity.
 *   dies      (a group of its own) a rank exits mid-step: the others' Wait
 *             fails within the timeout + 1 s.
 * `capi_reducer_misc_test shm|tcp NRANKS` runs them all in one group.
 */
#include "reducer_common.h"

enum { kGrads = 6 };
static const size_t kCounts[kGrads] = {1000, 7, 0, 5000, 300, 2049};
static float* g_g[2][kGrads];
static float* g_x[kGrads];

static void Alloc(void) {
  int g, k;
  for (g = 0; g < kGrads; ++g) {
    for (k = 0; k < 2; ++k) g_g[k][g] = (float*)calloc(kCounts[g] + 1, sizeof(float));
    g_x[g] = (float*)calloc(kCounts[g] + 1, sizeof(float));
  }
}

static tideReducer_t Make(int set, int findUnused, const tideCompressConfig_t* cc) {
  tideReducerConfig_t config = TIDE_REDUCER_CONFIG_INITIALIZER;
  tideReducer_t red = NULL;
  config.bucketBytes = 8192;
  config.firstBucketBytes = 4096;
  config.findUnused = findUnused;
  config.compress = cc;
  MUST(tideReducerCreate(g_comm, kGrads, (void* const*)g_g[set], kCounts, tideFloat32, &config,
                         &red));
  return red;
}

/* Whether rank r leaves gradient g unmarked in step s (unused tests). */
static int Skips(int r, int s, int g) { return (g + r + s) % 4 == 0 && kCounts[g] > 0; }

static void Unused0(void) {
  tideReducer_t red = Make(0, 0, NULL);
  const int victim = g_nranks - 1;
  int g;
  double t0, dt;
  tideResult_t rc;
  Stats st;
  for (g = kGrads - 1; g >= 0; --g) {
    Fill(g_g[0][g], kCounts[g], g_rank, 1, g);
    if (g_rank == victim && g == 3) continue;
    MUST(tideReducerMarkReady(red, g));
  }
  t0 = NowS();
  rc = tideReducerWait(red);
  dt = NowS() - t0;
  CHECK(rc == tideInvalidUsage, "Wait returned %d, want tideInvalidUsage", (int)rc);
  CHECK(strstr(tideReducerGetLastError(red), "gradient 3 ") != NULL &&
            strstr(tideReducerGetLastError(red), "step 1") != NULL,
        "message does not name gradient 3 and step 1: %s", tideReducerGetLastError(red));
  CHECK(dt < 5 + 1, "Wait took %.2f s (TIDE_TIMEOUT 5)", dt);
  if (g_rank == 0) printf("unused0: %.3f s: %s\n", dt, tideReducerGetLastError(red));
  /* The next step, every gradient marked, works. */
  for (g = kGrads - 1; g >= 0; --g) MUST(tideReducerMarkReady(red, g));
  MUST(tideReducerWait(red));
  DestroyWithStats(red, &st);
  CHECK(st.checks == 2, "%llu step checks in 2 steps", st.checks);
}

static void Unused1(void) {
  tideReducer_t red = Make(0, 1, NULL);
  int s, g, r;
  size_t i;
  Stats st;
  for (s = 1; s <= 4; ++s) {
    for (g = kGrads - 1; g >= 0; --g) {
      Fill(g_g[0][g], kCounts[g], g_rank, s, g);
      if (!Skips(g_rank, s, g)) MUST(tideReducerMarkReady(red, g));
    }
    MUST(tideReducerWait(red));
    for (g = 0; g < kGrads; ++g) {
      for (i = 0; i < kCounts[g]; ++i) {
        double want = 0;
        for (r = 0; r < g_nranks; ++r) want += Skips(r, s, g) ? 0 : Input(r, s, g, i);
        want /= g_nranks;
        if (fabs(g_g[0][g][i] - want) > 1e-5) {
          CHECK(0, "unused1 step %d gradient %d element %zu: %g, want %g", s, g, i, g_g[0][g][i],
                want);
          break;
        }
      }
    }
  }
  DestroyWithStats(red, &st);
  CHECK(st.checks == 0, "findUnused = 1: %llu extra collectives in 4 steps", st.checks);
  CHECK(st.synced == 4 && st.rebuilds == 1, "%llu synced, %llu rebuilds", st.synced, st.rebuilds);
}

static void Accum(void) {
  tideReducer_t red = Make(0, 0, NULL);
  int s, g, r;
  size_t i;
  Stats st;
  for (g = 0; g < kGrads; ++g) memset(g_g[0][g], 0, kCounts[g] * sizeof(float));
  MUST(tideReducerSetSync(red, 0));
  for (s = 1; s <= 3; ++s) {
    if (s == 3) MUST(tideReducerSetSync(red, 1));
    for (g = kGrads - 1; g >= 0; --g) {
      for (i = 0; i < kCounts[g]; ++i) g_g[0][g][i] += Input(g_rank, s, g, i);
      MUST(tideReducerMarkReady(red, g));
    }
    MUST(tideReducerWait(red));
  }
  for (g = 0; g < kGrads; ++g) {
    for (i = 0; i < kCounts[g]; ++i) {
      double want = 0;
      for (r = 0; r < g_nranks; ++r) {
        float acc = 0; /* the same fp32 accumulation as the rank's */
        for (s = 1; s <= 3; ++s) acc += Input(r, s, g, i);
        want += acc;
      }
      want /= g_nranks;
      if (fabs(g_g[0][g][i] - want) > 1e-5) {
        CHECK(0, "accum gradient %d element %zu: %g, want %g", g, i, g_g[0][g][i], want);
        break;
      }
    }
  }
  DestroyWithStats(red, &st);
  CHECK(st.steps == 3 && st.synced == 1 && st.checks == 1,
        "%llu steps, %llu synced, %llu checks (local steps communicate nothing)", st.steps,
        st.synced, st.checks);
}

static void Step(tideReducer_t red, int set, int s) {
  int g;
  for (g = kGrads - 1; g >= 0; --g) {
    Fill(g_g[set][g], kCounts[g], g_rank, s, g);
    MUST(tideReducerMarkReady(red, g));
  }
  MUST(tideReducerWait(red));
}

static void State(void) {
  tideCompressConfig_t cc = TIDE_COMPRESS_CONFIG_INITIALIZER;
  tideReducer_t a, b, c;
  unsigned char* blob;
  size_t bytes = 0;
  int s, g;
  tideResult_t rc;
  cc.codec = tideCodecInt8;
  c = Make(1, 0, &cc); /* never destroyed */
  a = Make(0, 0, &cc);
  for (s = 1; s <= 2; ++s) {
    Step(c, 1, s);
    Step(a, 0, s);
  }
  MUST(tideReducerGetState(a, NULL, &bytes));
  blob = (unsigned char*)malloc(bytes);
  MUST(tideReducerGetState(a, blob, &bytes));
  MUST(tideReducerDestroy(a));
  b = Make(0, 0, &cc);
  /* A corrupt blob on rank 0 fails every rank's SetState. */
  if (g_rank == 0) blob[bytes / 2] ^= 0x40;
  rc = tideReducerSetState(b, blob, bytes);
  if (g_rank == 0) blob[bytes / 2] ^= 0x40;
  CHECK(rc == tideInvalidArgument, "SetState with a corrupt blob on rank 0 returned %d", (int)rc);
  MUST(tideReducerSetState(b, blob, bytes));
  CHECK(tideReducerSetState(b, blob, bytes - 1) == tideInvalidArgument, "short blob accepted");
  for (s = 3; s <= 4; ++s) {
    Step(c, 1, s);
    Step(b, 0, s);
    for (g = 0; g < kGrads; ++g)
      CHECK(memcmp(g_g[0][g], g_g[1][g], kCounts[g] * sizeof(float)) == 0,
            "restored reducer differs from the uninterrupted one: step %d gradient %d", s, g);
  }
  free(blob);
  MUST(tideReducerDestroy(b));
  MUST(tideReducerDestroy(c));
}

/* config->stream: the buckets run on the caller's host stream (no worker);
 * the results equal those of the reducer's own worker, bit for bit. */
static void OnStream(void) {
  tideReducerConfig_t config = TIDE_REDUCER_CONFIG_INITIALIZER;
  tideReducer_t a, b;
  tideStream_t stream;
  int s, g;
  MUST(tideStreamCreate(&stream));
  config.bucketBytes = 8192;
  config.firstBucketBytes = 4096;
  config.stream = stream;
  MUST(tideReducerCreate(g_comm, kGrads, (void* const*)g_g[1], kCounts, tideFloat32, &config, &b));
  a = Make(0, 0, NULL);
  for (s = 1; s <= 2; ++s) {
    Step(a, 0, s);
    Step(b, 1, s);
    for (g = 0; g < kGrads; ++g)
      CHECK(memcmp(g_g[0][g], g_g[1][g], kCounts[g] * sizeof(float)) == 0,
            "stream reducer differs from the worker one: step %d gradient %d", s, g);
  }
  MUST(tideReducerDestroy(a));
  MUST(tideReducerDestroy(b));
  MUST(tideStreamDestroy(stream));
}

static void Bad(void) {
  tideReducer_t red = NULL;
  size_t counts[kGrads];
  double us = 0, prev = 0;
  size_t bytes;
  int g;
  tideResult_t rc;
  CHECK(tideReducerMarkReady(NULL, 0) == tideInvalidArgument, "MarkReady(NULL)");
  CHECK(tideReducerWait(NULL) == tideInvalidArgument, "Wait(NULL)");
  CHECK(tideReducerDestroy(NULL) == tideInvalidArgument, "Destroy(NULL)");
  CHECK(tideReducerGetLastError(NULL) != NULL, "GetLastError(NULL) is NULL");
  CHECK(tideReducerCreate(NULL, kGrads, (void* const*)g_g[0], kCounts, tideFloat32, NULL, &red) ==
            tideInvalidArgument,
        "Create(comm NULL)");
  /* Collective failures: every rank fails when one rank's arguments differ
   * or are bad. */
  memcpy(counts, kCounts, sizeof(counts));
  if (g_rank == g_nranks - 1) counts[3] += 1;
  rc = tideReducerCreate(g_comm, kGrads, (void* const*)g_g[0], counts, tideFloat32, NULL, &red);
  CHECK(g_nranks == 1 ? rc == tideSuccess : rc == tideInvalidArgument,
        "counts differing across ranks: Create returned %d", (int)rc);
  if (rc == tideSuccess) MUST(tideReducerDestroy(red));
  if (g_nranks > 1)
    CHECK(strstr(tideReducerGetLastError(NULL), "different arguments") != NULL ||
              g_rank == g_nranks - 1,
          "mismatch message: %s", tideReducerGetLastError(NULL));
  rc = tideReducerCreate(g_comm, kGrads, g_rank == 0 ? NULL : (void* const*)g_g[0], kCounts,
                         tideFloat32, NULL, &red);
  CHECK(rc == tideInvalidArgument, "grads NULL on rank 0: Create returned %d", (int)rc);
  rc = tideReducerCreate(g_comm, kGrads, (void* const*)g_g[0], kCounts, tideFloat32, NULL,
                         g_rank == 0 ? NULL : &red);
  CHECK(rc == tideInvalidArgument, "reducer NULL on rank 0: Create returned %d", (int)rc);
  red = Make(0, 0, NULL);
  CHECK(tideReducerMarkReady(red, kGrads) == tideInvalidArgument, "index out of range");
  CHECK(tideReducerMarkReady(red, -1) == tideInvalidArgument, "index -1");
  MUST(tideReducerMarkReady(red, 5));
  CHECK(tideReducerMarkReady(red, 5) == tideInvalidArgument, "double mark");
  CHECK(strstr(tideReducerGetLastError(red), "gradient 5") != NULL, "double mark message: %s",
        tideReducerGetLastError(red));
  CHECK(tideReducerSetSync(red, 0) == tideInvalidUsage, "SetSync inside a step");
  CHECK(tideReducerGetState(red, NULL, &bytes) == tideInvalidUsage, "GetState inside a step");
  for (g = kGrads - 2; g >= 0; --g) MUST(tideReducerMarkReady(red, g));
  MUST(tideReducerWait(red));
  CHECK(tideReducerGetState(red, NULL, NULL) == tideInvalidArgument, "GetState bytes NULL");
  MUST(tideReducerDestroy(red));
  /* tideCommPredictTime */
  CHECK(tideCommPredictTime(g_comm, (tideCollective_t)7, 1024, &us) == tideInvalidArgument,
        "PredictTime(collective 7)");
  CHECK(strstr(tideGetLastError(g_comm), "collective") != NULL, "PredictTime message: %s",
        tideGetLastError(g_comm));
  CHECK(tideCommPredictTime(g_comm, tideCollAllReduce, 1024, NULL) == tideInvalidArgument,
        "PredictTime(NULL)");
  CHECK(tideCommPredictTime(NULL, tideCollAllReduce, 1024, &us) == tideInvalidArgument,
        "PredictTime(comm NULL)");
  MUST(tideCommPredictTime(g_comm, tideCollAllReduce, 0, &us));
  CHECK(us == 0, "0 bytes predicted %g us", us);
  for (bytes = 1024; bytes <= (64u << 20); bytes *= 4) {
    MUST(tideCommPredictTime(g_comm, tideCollAllReduce, bytes, &us));
    CHECK(g_nranks == 1 || (us > 0 && us >= prev * 0.999), "AllReduce %zu bytes: %g us after %g",
          bytes, us, prev);
    prev = us;
  }
  for (g = tideCollAllReduce; g <= tideCollSendRecv; ++g) {
    MUST(tideCommPredictTime(g_comm, (tideCollective_t)g, 1 << 20, &us));
    CHECK(g_nranks == 1 || us > 0, "collective %d: %g us", g, us);
  }
}

/* The last rank dies in the middle of step 2: the others' Wait fails within
 * TIDE_TIMEOUT (5 s) + 1 s, never hangs. The survivors abort the
 * communicator and leave (no collective destroy with a dead peer). */
static void Dies(void) {
  tideReducer_t red;
  int g;
  double t0, dt;
  tideResult_t rc;
  Alloc();
  red = Make(0, 0, NULL);
  Step(red, 0, 1);
  for (g = kGrads - 1; g >= 0; --g) {
    if (g_rank == g_nranks - 1 && g == kGrads / 2) _exit(0);
    MUST(tideReducerMarkReady(red, g));
  }
  t0 = NowS();
  rc = tideReducerWait(red);
  dt = NowS() - t0;
  CHECK(rc != tideSuccess, "Wait with a dead rank returned success");
  CHECK(dt < 5 + 1, "Wait with a dead rank took %.2f s (TIDE_TIMEOUT 5)", dt);
  if (g_rank == 0)
    printf("dead rank: Wait failed in %.3f s: %s\n", dt, tideReducerGetLastError(red));
  tideReducerDestroy(red);
  tideCommAbort(g_comm);
  printf("rank %d of %d: %s\n", g_rank, g_nranks, g_failures ? "FAILED" : "ok");
  fflush(stdout);
  _exit(g_failures ? 1 : 0);
}

/* tideSetThreadWaitMode: the two modes, a bad value rejected; collectives
 * still right from a thread that sleeps at once. */
static void WaitMode(void) {
  float x[3] = {1.0f, 2.0f, 3.0f};
  CHECK(tideSetThreadWaitMode((tideWaitMode_t)7) == tideInvalidArgument, "wait mode 7 accepted");
  CHECK(tideSetThreadWaitMode(tideWaitSleep) == tideSuccess, "tideWaitSleep refused");
  CHECK(tideAllReduce(x, x, 3, tideFloat32, tideSum, g_comm, NULL) == tideSuccess,
        "All-Reduce under tideWaitSleep failed");
  CHECK(x[2] == 3.0f * (float)g_nranks, "All-Reduce under tideWaitSleep: %g", x[2]);
  CHECK(tideSetThreadWaitMode(tideWaitDefault) == tideSuccess, "tideWaitDefault refused");
}

static void Body(void) {
  Alloc();
  WaitMode();
  if (g_nranks > 1) Unused0();
  Unused1();
  Accum();
  State();
  OnStream();
  Bad();
}

int main(int argc, char** argv) {
  const int tcp = argc > 1 && strcmp(argv[1], "tcp") == 0;
  const int n = argc > 2 ? atoi(argv[2]) : 3;
  int failed;
  setvbuf(stdout, NULL, _IOLBF, 0);
  failed = RunGroup("reducer contracts", n, tcp, "5", Body);
  if (n > 1) failed += RunGroup("a rank dies mid-step", n, tcp, "5", Dies);
  printf("capi_reducer_misc_test: %s\n", failed ? "FAILED" : "all groups passed");
  return failed ? 1 : 0;
}
