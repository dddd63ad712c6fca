/*
 * Shared pieces of the gradient reducer's C tests (reducer_test.c,
 * reducer_misc_test.c): public headers only. Each configuration (a rank
 * count and a transport) runs in a fresh "group leader" process that forks
 * its ranks (tests/harness/fork_ranks.h: no fork of a threaded process), so
 * environment knobs (TIDE_SHM_DISABLE, TIDE_TIMEOUT) apply per group.
 */
#ifndef TIDE_TESTS_CAPI_REDUCER_COMMON_H_
#define TIDE_TESTS_CAPI_REDUCER_COMMON_H_

#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fork_ranks.h"
#include "tide/reducer.h"

static int g_rank = -1;
static int g_nranks = 0;
static int g_failures = 0;
static tideComm_t g_comm = NULL;

#define MUST(call)                                                                        \
  do {                                                                                    \
    tideResult_t rc_ = (call);                                                            \
    if (rc_ != tideSuccess) {                                                             \
      printf("rank %d: line %d: %s returned %d (%s): %s | %s\n", g_rank, __LINE__, #call, \
             (int)rc_, tideGetErrorString(rc_), tideGetLastError(g_comm),                 \
             tideReducerGetLastError(NULL));                                              \
      _exit(1);                                                                           \
    }                                                                                     \
  } while (0)

#define CHECK(cond, ...)                              \
  do {                                                \
    if (!(cond)) {                                    \
      printf("rank %d: line %d: ", g_rank, __LINE__); \
      printf(__VA_ARGS__);                            \
      printf("\n");                                   \
      g_failures++;                                   \
    }                                                 \
  } while (0)

static inline double NowS(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static inline uint64_t Mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

/* Rank r's element i of gradient g in step s: 24 random bits in [-1, 1). */
static inline float Input(int r, int s, int g, size_t i) {
  const uint64_t h = Mix(((uint64_t)r << 48) ^ ((uint64_t)s << 40) ^ ((uint64_t)g << 32) ^ i);
  return (float)((double)(h >> 40) / 8388608.0 - 1.0);
}

static inline void Fill(float* x, size_t n, int r, int s, int g) {
  size_t i;
  for (i = 0; i < n; ++i) x[i] = Input(r, s, g, i);
}

/* Rank r's marking order in step s: reverse index order with adjacent pairs
 * swapped at random (a different interleaving on every rank). */
static inline void MarkOrder(int r, int s, int n, int* order) {
  uint64_t st = Mix(0x5eed0000ull + (uint64_t)r * 7919 + (uint64_t)s * 104729);
  int k;
  for (k = 0; k < n; ++k) order[k] = n - 1 - k;
  for (k = 0; k + 1 < n; ++k) {
    st = Mix(st + (uint64_t)k);
    if (st & 1) {
      const int t = order[k];
      order[k] = order[k + 1];
      order[k + 1] = t;
      ++k;
    }
  }
}

/* The packing docs/overlap.md describes: in order, a bucket takes the next
 * gradient while its bytes stay within its capacity (the first bucket:
 * firstBytes); a gradient larger than that gets a bucket of its own.
 * bucketOf[g] receives the bucket of each gradient; returns the count. */
static inline int Pack(const int* order, int n, const size_t* counts, size_t firstBytes,
                       size_t bucketBytes, int* bucketOf) {
  int nb = 0, k;
  size_t bytes = 0;
  for (k = 0; k < n; ++k) {
    const size_t b = counts[order[k]] * 4;
    const size_t cap = nb == 1 ? firstBytes : bucketBytes;
    if (nb == 0 || (bytes > 0 && bytes + b > cap)) {
      nb++;
      bytes = 0;
    }
    bucketOf[order[k]] = nb - 1;
    bytes += b;
  }
  return nb;
}

/* Reads the layout out of a tideReducerGetState blob (docs/overlap.md,
 * "Checkpoints": a 48-byte header whose int32 at byte 28 is the bucket
 * count, then per bucket int32 n, n int32 gradients, uint64 state bytes and
 * the state). bucketOf[g] receives each gradient's bucket; returns the
 * bucket count, or -1. */
static inline int LayoutOf(const unsigned char* blob, size_t bytes, int ngrads, int* bucketOf) {
  int32_t nb, b, n, k, g;
  uint64_t s;
  size_t at = 48;
  if (bytes < 56) return -1;
  memcpy(&nb, blob + 28, 4);
  for (b = 0; b < nb; ++b) {
    if (at + 4 > bytes) return -1;
    memcpy(&n, blob + at, 4);
    at += 4;
    for (k = 0; k < n; ++k) {
      memcpy(&g, blob + at, 4);
      at += 4;
      if (g < 0 || g >= ngrads) return -1;
      bucketOf[g] = b;
    }
    memcpy(&s, blob + at, 8);
    at += 8 + (size_t)s;
    if (at > bytes) return -1;
  }
  return nb;
}

/* The reducer's layout now, through GetState. */
static inline int CurrentLayout(tideReducer_t red, int ngrads, int* bucketOf) {
  size_t bytes = 0;
  unsigned char* blob;
  int nb;
  MUST(tideReducerGetState(red, NULL, &bytes));
  blob = (unsigned char*)malloc(bytes);
  MUST(tideReducerGetState(red, blob, &bytes));
  nb = LayoutOf(blob, bytes, ngrads, bucketOf);
  free(blob);
  return nb;
}

/* A reducer's TIDE_REDUCER_STATS line, read back after tideReducerDestroy. */
typedef struct {
  unsigned long long steps, synced, buckets, bucketColls, checks, setup, rebuilds;
} Stats;

static inline void StatsFile(char* path, size_t n) {
  snprintf(path, n, "/tmp/tide_reducer_stats.%d", (int)getpid());
}

static inline void DestroyWithStats(tideReducer_t red, Stats* st) {
  char path[64], line[512];
  FILE* f;
  int rank, nranks;
  StatsFile(path, sizeof(path));
  unlink(path);
  setenv("TIDE_REDUCER_STATS", path, 1);
  MUST(tideReducerDestroy(red));
  unsetenv("TIDE_REDUCER_STATS");
  memset(st, 0, sizeof(*st));
  f = fopen(path, "r");
  CHECK(f != NULL, "no TIDE_REDUCER_STATS file %s", path);
  if (f == NULL) return;
  if (fgets(line, sizeof(line), f) == NULL ||
      sscanf(line,
             "tide_reducer rank %d nranks %d steps %llu synced %llu buckets %llu bucket_colls "
             "%llu checks %llu setup %llu rebuilds %llu",
             &rank, &nranks, &st->steps, &st->synced, &st->buckets, &st->bucketColls, &st->checks,
             &st->setup, &st->rebuilds) != 9) {
    CHECK(0, "bad stats line in %s", path);
  }
  fclose(f);
  unlink(path);
}

/* ---- Groups: a leader process per configuration -------------------------- */

typedef void (*RankBody)(void);
static RankBody g_body;
static pid_t g_pids[kForkRanksMax];
static int g_group_ranks;

static inline void OnAlarm(int sig) {
  static const char kMsg[] = "reducer test: group timeout: killing its ranks\n";
  int i;
  (void)sig;
  for (i = 0; i < g_group_ranks; ++i) {
    if (g_pids[i] > 0) kill(g_pids[i], SIGKILL);
  }
  if (write(2, kMsg, sizeof(kMsg) - 1) < 0) _exit(2);
  _exit(2);
}

static inline int MakeId(void* id) {
  return tideGetUniqueId((tideUniqueId*)id) == tideSuccess ? 0 : 1;
}

static inline int RunChild(int rank, void* id) {
  g_rank = rank;
  alarm(100);
  MUST(tideCommInitRank(&g_comm, g_nranks, *(tideUniqueId*)id, rank));
  g_body();
  MUST(tideCommDestroy(g_comm));
  printf("rank %d of %d: %s\n", rank, g_nranks, g_failures ? "FAILED" : "ok");
  return g_failures ? 1 : 0;
}

/* Runs body on nranks ranks (tcp: TIDE_SHM_DISABLE=1), timeoutEnv (or NULL)
 * as TIDE_TIMEOUT; returns 0 when every rank passed. */
static inline int RunGroup(const char* name, int nranks, int tcp, const char* timeoutEnv,
                           RankBody body) {
  const pid_t leader = fork();
  int status = 0;
  if (leader < 0) return 1;
  if (leader == 0) {
    tideUniqueId id;
    int i, failed = 0;
    if (tcp) setenv("TIDE_SHM_DISABLE", "1", 1);
    if (timeoutEnv != NULL) setenv("TIDE_TIMEOUT", timeoutEnv, 1);
    g_nranks = nranks;
    g_group_ranks = nranks;
    g_body = body;
    if (ForkRanksShareId(nranks, g_pids, &id, sizeof(id), MakeId, RunChild, 60) != 0) _exit(1);
    signal(SIGALRM, OnAlarm);
    alarm(120);
    for (i = 0; i < nranks; ++i) {
      int st = 0;
      if (waitpid(-1, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) failed++;
    }
    fflush(stdout);
    _exit(failed ? 1 : 0);
  }
  if (waitpid(leader, &status, 0) < 0) return 1;
  const int bad = !WIFEXITED(status) || WEXITSTATUS(status) != 0;
  printf("== %s, %d rank(s) over %s: %s\n", name, nranks, tcp ? "TCP" : "shm",
         bad ? "FAILED" : "passed");
  return bad;
}

#endif /* TIDE_TESTS_CAPI_REDUCER_COMMON_H_ */
