/*
 * NCCL shim, functional: an NCCL program (compiled against nccl.h, linked to
 * Tide's libnccl.so.2) run as 3 processes in host-buffer mode
 * (TIDE_SHIM_HOST_BUFFERS=1, since this machine may have no GPU).
 * Each rank checks: creation inside a group with an old-size ncclConfig_t;
 * AllReduce (sum, avg, fp8), PreMulSum (host-immediate and per-call scalars,
 * fp32 and fp16), Reduce, Broadcast, Bcast, AllGather, ReduceScatter,
 * AlltoAll, Gather and Scatter (also in place), Send/Recv in a group,
 * ncclGroupSimulateEnd (drops its work), CommSplit, queries, registration,
 * MemAlloc/Free, CommShrink, and that a silent peer gives ncclRemoteError with Tide's
 * timeout explained by ncclGetLastError. Rank 0 also builds 2 more ranks in
 * one thread (ncclCommInitAll, and two inits in one group) and drives them
 * with grouped calls. The parent waits under alarm().
 */
#include <nccl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fork_ranks.h"

enum { kRanks = 3, kCount = 1024, kTimeoutS = 150 };

static int g_rank = -1;
static int g_failures = 0;
static ncclComm_t g_comm = NULL;

#define EXPECT(cond, ...)                                                      \
  do {                                                                         \
    if (!(cond)) {                                                             \
      printf("rank %d: line %d: check failed: %s: ", g_rank, __LINE__, #cond); \
      printf(__VA_ARGS__);                                                     \
      printf("\n");                                                            \
      g_failures++;                                                            \
    }                                                                          \
  } while (0)

#define MUST(call)                                                                       \
  do {                                                                                   \
    ncclResult_t rc_ = (call);                                                           \
    if (rc_ != ncclSuccess) {                                                            \
      printf("rank %d: line %d: %s -> %d (%s): %s\n", g_rank, __LINE__, #call, (int)rc_, \
             ncclGetErrorString(rc_), ncclGetLastError(NULL));                           \
      fflush(stdout);                                                                    \
      exit(1);                                                                           \
    }                                                                                    \
  } while (0)

static uint16_t floatToHalfExact(float f) { /* for small integers only */
  if (f == 0) return 0;
  uint32_t u;
  memcpy(&u, &f, 4);
  uint32_t e = ((u >> 23) & 0xff) - 127 + 15;
  return (uint16_t)(((u >> 16) & 0x8000u) | (e << 10) | ((u >> 13) & 0x3ffu));
}

static void collectives(int n) {
  const int r = g_rank;
  float* send = malloc(sizeof(float) * kCount * n);
  float* recv = malloc(sizeof(float) * kCount * n);
  for (int i = 0; i < kCount * n; ++i) send[i] = (float)(r + 1) + (float)(i % 7);

  MUST(ncclAllReduce(send, recv, kCount, ncclFloat, ncclSum, g_comm, NULL));
  for (int i = 0; i < kCount; ++i) {
    const float want = (float)(n * (n + 1) / 2) + (float)(n * (i % 7));
    if (recv[i] != want) {
      EXPECT(0, "allreduce[%d] = %g, want %g", i, recv[i], want);
      break;
    }
  }
  int32_t iv = 10 * (r + 1), iout = 0;
  MUST(ncclAllReduce(&iv, &iout, 1, ncclInt32, ncclAvg, g_comm, NULL));
  EXPECT(iout == 10 * (n + 1) / 2, "int avg %d", iout);
  uint8_t e4[4] = {0x38, 0x38, 0x40, 0x40}, e4out[4]; /* 1.0, 1.0, 2.0, 2.0 in e4m3 */
  MUST(ncclAllReduce(e4, e4out, 4, ncclFloat8e4m3, ncclSum, g_comm, NULL));
  EXPECT(e4out[0] == 0x44 && e4out[2] == 0x4c, "e4m3 sum %#x %#x", e4out[0], e4out[2]); /* 3, 6 */

  /* PreMulSum: each rank scales by (rank + 1). */
  float scalar = (float)(r + 1);
  ncclRedOp_t pm;
  MUST(ncclRedOpCreatePreMulSum(&pm, &scalar, ncclFloat, ncclScalarHostImmediate, g_comm));
  scalar = 100.f; /* immediate: the value at creation counts */
  float one = 1.f, out = 0;
  MUST(ncclAllReduce(&one, &out, 1, ncclFloat, pm, g_comm, NULL));
  EXPECT(out == (float)(n * (n + 1) / 2), "premulsum immediate %g", out);
  MUST(ncclRedOpDestroy(pm, g_comm));
  EXPECT(ncclAllReduce(&one, &out, 1, ncclFloat, pm, g_comm, NULL) == ncclInvalidArgument,
         "destroyed op accepted");
  uint16_t hs = floatToHalfExact(2.f), h1 = floatToHalfExact(1.f), hout = 0;
  MUST(ncclRedOpCreatePreMulSum(&pm, &hs, ncclFloat16, ncclScalarDevice, g_comm));
  hs = floatToHalfExact(3.f); /* read when the operation runs */
  MUST(ncclAllReduce(&h1, &hout, 1, ncclFloat16, pm, g_comm, NULL));
  EXPECT(hout == floatToHalfExact(3.f * n), "premulsum fp16 %#x", hout);
  EXPECT(ncclAllReduce(&one, &out, 1, ncclFloat, pm, g_comm, NULL) == ncclInvalidArgument,
         "premulsum used with another dtype");
  MUST(ncclRedOpDestroy(pm, g_comm));

  float v = (float)(r + 1), red = -1;
  MUST(ncclReduce(&v, &red, 1, ncclFloat, ncclMax, 1, g_comm, NULL));
  if (r == 1) EXPECT(red == (float)n, "reduce max %g", red);
  float b = r == 2 ? 42.f : 0.f, bout = 0;
  MUST(ncclBroadcast(&b, &bout, 1, ncclFloat, 2, g_comm, NULL));
  EXPECT(bout == 42.f, "broadcast %g", bout);
  b = r == 0 ? 7.f : 0.f;
  MUST(ncclBcast(&b, 1, ncclFloat, 0, g_comm, NULL));
  EXPECT(b == 7.f, "bcast %g", b);

  MUST(ncclAllGather(send, recv, kCount, ncclFloat, g_comm, NULL));
  for (int p = 0; p < n; ++p) EXPECT(recv[p * kCount] == (float)(p + 1), "allgather block %d", p);
  MUST(ncclReduceScatter(send, recv, kCount, ncclFloat, ncclSum, g_comm, NULL));
  EXPECT(recv[0] == (float)(n * (n + 1) / 2) + (float)(n * ((r * kCount) % 7)), "reducescatter %g",
         recv[0]);
  MUST(ncclAlltoAll(send, recv, kCount, ncclFloat, g_comm, NULL));
  for (int p = 0; p < n; ++p) {
    EXPECT(recv[p * kCount] == (float)(p + 1) + (float)((r * kCount) % 7), "alltoall from %d", p);
  }

  /* Gather to rank 1, in place there; Scatter from rank 2, in place there. */
  float* g = calloc((size_t)kCount * n, sizeof(float));
  for (int i = 0; i < kCount; ++i) g[r * kCount + i] = (float)(r * 1000 + i);
  MUST(ncclGather(r == 1 ? g + kCount : g + r * kCount, g, kCount, ncclFloat, 1, g_comm, NULL));
  if (r == 1) {
    for (int p = 0; p < n; ++p) EXPECT(g[p * kCount + 5] == (float)(p * 1000 + 5), "gather %d", p);
  }
  for (int i = 0; i < kCount * n; ++i) g[i] = r == 2 ? (float)i : -1.f;
  float* sc = r == 2 ? g + 2 * kCount : recv;
  MUST(ncclScatter(g, sc, kCount, ncclFloat, 2, g_comm, NULL));
  EXPECT(sc[3] == (float)(r * kCount + 3), "scatter %g", sc[3]);
  free(g);

  /* Ring exchange in a group; then a simulated group that must not run. */
  float token = (float)r, got = -1;
  MUST(ncclGroupStart());
  MUST(ncclSend(&token, 1, ncclFloat, (r + 1) % n, g_comm, NULL));
  MUST(ncclRecv(&got, 1, ncclFloat, (r + n - 1) % n, g_comm, NULL));
  MUST(ncclGroupEnd());
  EXPECT(got == (float)((r + n - 1) % n), "ring recv %g", got);
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  out = -5;
  MUST(ncclGroupStart());
  MUST(ncclAllReduce(&one, &out, 1, ncclFloat, ncclSum, g_comm, NULL));
  MUST(ncclGroupSimulateEnd(&sim));
  EXPECT(out == -5 && sim.estimatedTime > 0, "simulate ran the op (%g) or no estimate %g", out,
         sim.estimatedTime);
  free(send);
  free(recv);
}

static void queriesAndSplit(int n) {
  int count = 0, rank = -1, dev = 0;
  MUST(ncclCommCount(g_comm, &count));
  MUST(ncclCommUserRank(g_comm, &rank));
  MUST(ncclCommCuDevice(g_comm, &dev));
  EXPECT(count == n && rank == g_rank && dev == -1, "count %d rank %d dev %d", count, rank, dev);
  ncclResult_t async = ncclInternalError;
  MUST(ncclCommGetAsyncError(g_comm, &async));
  EXPECT(async == ncclSuccess, "async %d", async);
  void* handle = NULL;
  float buf[4];
  MUST(ncclCommRegister(g_comm, buf, sizeof(buf), &handle));
  MUST(ncclCommDeregister(g_comm, handle));
  void* mem = NULL;
  MUST(ncclMemAlloc(&mem, 1 << 16));
  EXPECT(mem != NULL, "MemAlloc gave NULL");
  MUST(ncclMemFree(mem));

  ncclComm_t sub = NULL;
  MUST(ncclCommSplit(g_comm, g_rank == 0 ? NCCL_SPLIT_NOCOLOR : 1, -g_rank, &sub, NULL));
  if (g_rank == 0) {
    EXPECT(sub == NULL, "NOCOLOR gave a communicator");
  } else {
    int sr = -1, sn = 0;
    MUST(ncclCommCount(sub, &sn));
    MUST(ncclCommUserRank(sub, &sr));
    EXPECT(sn == n - 1 && sr == n - 1 - g_rank, "split rank %d of %d", sr, sn);
    int x = g_rank, y = 0;
    MUST(ncclAllReduce(&x, &y, 1, ncclInt, ncclSum, sub, NULL));
    EXPECT(y == n * (n - 1) / 2, "split allreduce %d", y);
    MUST(ncclCommFinalize(sub));
    MUST(ncclCommDestroy(sub));
  }
}

/* A root or peer outside the communicator fails the call itself (inside a
 * group too), naming it; the communicator stays usable. */
static void badRanks(int n) {
  float x = 1, y[64];
  EXPECT(ncclGather(&x, y, 1, ncclFloat, n, g_comm, NULL) == ncclInvalidArgument &&
             strstr(ncclGetLastError(g_comm), "root") != NULL,
         "gather root %d: %s", n, ncclGetLastError(g_comm));
  EXPECT(ncclSend(&x, 1, ncclFloat, 99, g_comm, NULL) == ncclInvalidArgument &&
             strstr(ncclGetLastError(g_comm), "peer 99") != NULL,
         "send peer 99: %s", ncclGetLastError(g_comm));
  EXPECT(ncclReduce(&x, y, 1, ncclFloat, ncclSum, -1, g_comm, NULL) == ncclInvalidArgument,
         "reduce root -1");
  MUST(ncclGroupStart());
  EXPECT(ncclScatter(y, &x, 1, ncclFloat, n + 1, g_comm, NULL) == ncclInvalidArgument,
         "scatter root %d in a group", n + 1);
  EXPECT(ncclRecv(y, 1, ncclFloat, -2, g_comm, NULL) == ncclInvalidArgument,
         "recv peer -2 in a group");
  MUST(ncclGroupEnd());
  float one = 1, sum = 0;
  MUST(ncclAllReduce(&one, &sum, 1, ncclFloat, ncclSum, g_comm, NULL));
  EXPECT(sum == (float)n, "allreduce after bad ranks %g", sum);
}

struct BlockedCall {
  ncclComm_t comm;
  ncclResult_t result;
};

static void* blockedAllReduce(void* arg) {
  struct BlockedCall* b = (struct BlockedCall*)arg;
  float x = 1, y = 0;
  b->result = ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, b->comm, NULL);
  return NULL;
}

/* ncclCommAbort from another thread (PyTorch's watchdog) while a call waits
 * for a peer that never comes: the call returns an error, nothing is freed
 * under it (the ASan build would see it). */
static void abortUnderACall(void) {
  ncclComm_t c[2] = {NULL, NULL};
  MUST(ncclCommInitAll(c, 2, NULL));
  struct BlockedCall b = {c[0], ncclSuccess};
  pthread_t t;
  EXPECT(pthread_create(&t, NULL, blockedAllReduce, &b) == 0, "pthread_create");
  usleep(300 * 1000); /* rank 1 of c never joins the All-Reduce */
  MUST(ncclCommAbort(c[0]));
  pthread_join(t, NULL);
  EXPECT(b.result != ncclSuccess, "all-reduce aborted under it -> %d", (int)b.result);
  MUST(ncclCommAbort(c[1]));
}

/* Two ranks driven by one thread: ncclCommInitAll, then two inits in a group. */
static void oneThreadRanks(void) {
  ncclComm_t c[2] = {NULL, NULL};
  MUST(ncclCommInitAll(c, 2, NULL));
  int a[2] = {3, 4}, s[2] = {0, 0};
  MUST(ncclGroupStart());
  for (int i = 0; i < 2; ++i) MUST(ncclAllReduce(&a[i], &s[i], 1, ncclInt, ncclSum, c[i], NULL));
  MUST(ncclGroupEnd());
  EXPECT(s[0] == 7 && s[1] == 7, "InitAll allreduce %d %d", s[0], s[1]);
  for (int i = 0; i < 2; ++i) MUST(ncclCommDestroy(c[i]));

  ncclUniqueId id;
  MUST(ncclGetUniqueId(&id));
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  MUST(ncclGroupStart());
  for (int i = 0; i < 2; ++i) MUST(ncclCommInitRankConfig(&c[i], 2, id, i, &cfg));
  MUST(ncclGroupEnd());
  MUST(ncclGroupStart());
  for (int i = 0; i < 2; ++i) MUST(ncclAllReduce(&a[i], &s[i], 1, ncclInt, ncclMax, c[i], NULL));
  MUST(ncclGroupEnd());
  EXPECT(s[0] == 4 && s[1] == 4, "group-init allreduce %d %d", s[0], s[1]);
  for (int i = 0; i < 2; ++i) MUST(ncclCommDestroy(c[i]));

  /* Non-blocking creations in a group: ncclGroupEnd says ncclInProgress,
   * ncclCommGetAsyncError turns ncclSuccess once each is ready. */
  MUST(ncclGetUniqueId(&id));
  ncclConfig_t nb = NCCL_CONFIG_INITIALIZER;
  nb.blocking = 0;
  MUST(ncclGroupStart());
  for (int i = 0; i < 2; ++i) {
    ncclResult_t r = ncclCommInitRankConfig(&c[i], 2, id, i, &nb);
    EXPECT(r == ncclSuccess || r == ncclInProgress, "non-blocking init in a group -> %d", (int)r);
  }
  ncclResult_t r = ncclGroupEnd();
  EXPECT(r == ncclInProgress, "group of non-blocking inits -> %d, want ncclInProgress", (int)r);
  for (int i = 0; i < 2; ++i) {
    ncclResult_t async = ncclInProgress;
    for (int k = 0; k < 20000 && async == ncclInProgress; ++k) {
      MUST(ncclCommGetAsyncError(c[i], &async));
      if (async == ncclInProgress) usleep(1000);
    }
    EXPECT(async == ncclSuccess, "non-blocking comm %d -> %d", i, (int)async);
  }
  MUST(ncclGroupStart());
  for (int i = 0; i < 2; ++i) MUST(ncclAllReduce(&a[i], &s[i], 1, ncclInt, ncclSum, c[i], NULL));
  MUST(ncclGroupEnd());
  EXPECT(s[0] == 7 && s[1] == 7, "non-blocking comms allreduce %d %d", s[0], s[1]);
  for (int i = 0; i < 2; ++i) MUST(ncclCommDestroy(c[i]));
}

static int child(int rank, ncclUniqueId id) {
  g_rank = rank;
  alarm(kTimeoutS - 10);
  /* An NCCL 2.14-sized config (size..netName), created inside a group. */
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.size = 40;
  cfg.version = 21400;
  MUST(ncclGroupStart());
  MUST(ncclCommInitRankConfig(&g_comm, kRanks, id, rank, &cfg));
  MUST(ncclGroupEnd());
  collectives(kRanks);
  queriesAndSplit(kRanks);
  badRanks(kRanks);
  if (rank == 0) oneThreadRanks();
  if (rank == 1) abortUnderACall();
  /* Shrink away rank 2 (which does not take part). */
  if (rank != 2) {
    int excl[1] = {2};
    ncclComm_t shrunk = NULL;
    ncclResult_t r = ncclCommShrink(g_comm, excl, 1, &shrunk, NULL, NCCL_SHRINK_DEFAULT);
    if (r == ncclInvalidUsage && strstr(ncclGetLastError(NULL), "no tideCommShrink")) {
      printf("rank %d: ncclCommShrink skipped: %s\n", rank, ncclGetLastError(NULL));
    } else {
      EXPECT(r == ncclSuccess && shrunk != NULL, "shrink -> %d: %s", (int)r,
             ncclGetLastError(NULL));
      int x = rank + 1, y = 0, n = 0;
      if (shrunk != NULL) {
        MUST(ncclCommCount(shrunk, &n));
        MUST(ncclAllReduce(&x, &y, 1, ncclInt, ncclSum, shrunk, NULL));
        EXPECT(n == 2 && y == 3, "shrunk comm: %d ranks, sum %d", n, y);
        MUST(ncclCommDestroy(shrunk));
      }
    }
  }
  /* A silent peer: rank 2 skips the call; the others time out. */
  if (rank == 2) {
    sleep(8);
    ncclCommAbort(g_comm);
  } else {
    float x = 1, y = 0;
    ncclResult_t r = ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, g_comm, NULL);
    const char* msg = ncclGetLastError(g_comm);
    if (rank == 0) printf("silent peer: %d: %s\n", (int)r, msg);
    EXPECT(r == ncclRemoteError && strstr(msg, "Tide") != NULL && strstr(msg, "tideTimeout"),
           "silent peer -> %d: %s", (int)r, msg);
    ncclCommAbort(g_comm);
  }
  printf("rank %d: %s (%d failures)\n", rank, g_failures ? "FAIL" : "ok", g_failures);
  return g_failures ? 1 : 0;
}

static int makeId(void* id) { return ncclGetUniqueId((ncclUniqueId*)id) == ncclSuccess ? 0 : 1; }
static int runChild(int rank, void* id) { return child(rank, *(ncclUniqueId*)id); }

int main(void) {
  setenv("TIDE_SHIM_HOST_BUFFERS", "1", 1);
  setenv("TIDE_TIMEOUT", "3", 1);
  ncclUniqueId id;
  pid_t pids[kRanks];
  if (ForkRanksShareId(kRanks, pids, &id, sizeof(id), makeId, runChild, 60) != 0) return 1;
  alarm(kTimeoutS);
  int failed = 0;
  for (int r = 0; r < kRanks; ++r) {
    int st = 0;
    waitpid(pids[r], &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      printf("rank %d failed (status %#x)\n", r, st);
      failed++;
    }
  }
  printf("%s\n", failed ? "FAIL" : "PASS");
  return failed ? 1 : 0;
}
