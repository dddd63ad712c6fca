/*
 * C API test, compiled as C11 against tide/tide.h alone.
 *
 * The parent forks 4 children, then creates a unique id and hands it to them
 * (tests/harness/fork_ranks.h: no fork while the root thread runs); each joins with
 * tideCommInitRank and
 *  - runs every collective on host memory with a NULL stream and checks the
 *    results (plus count 0 with NULL buffers everywhere);
 *  - checks the documented argument errors (NULL buffers with count > 0, bad
 *    datatype and op, bad root and peer, count x element size overflow, NULL
 *    communicator), each followed by a successful AllReduce to show the
 *    communicator is still usable, and that tideGetLastError explains them;
 *  - checks tideGetErrorString and tideGetVersion.
 * Every error case is made by all ranks alike, so no rank waits for a peer
 * that returned early. The parent waits under alarm() and exits non-zero if
 * any child failed or the run took too long.
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fork_ranks.h"
#include "tide/tide.h"

enum { kRanks = 4, kCount = 1000, kParentTimeoutS = 180, kChildTimeoutS = 170 };

static int g_rank = -1;
static int g_failures = 0;
static tideComm_t g_comm = NULL;
static pid_t g_pids[kRanks];

#define EXPECT(cond, ...)                                                      \
  do {                                                                         \
    if (!(cond)) {                                                             \
      printf("rank %d: line %d: check failed: %s: ", g_rank, __LINE__, #cond); \
      printf(__VA_ARGS__);                                                     \
      printf("\n");                                                            \
      g_failures++;                                                            \
    }                                                                          \
  } while (0)

/* A call that must succeed; the rank gives up otherwise (peers would hang). */
#define MUST(call)                                                                             \
  do {                                                                                         \
    tideResult_t rc_ = (call);                                                                 \
    if (rc_ != tideSuccess) {                                                                  \
      printf("rank %d: line %d: %s returned %d (%s): %s\n", g_rank, __LINE__, #call, (int)rc_, \
             tideGetErrorString(rc_), tideGetLastError(g_comm));                               \
      exit(1);                                                                                 \
    }                                                                                          \
  } while (0)

/* A call that must fail with tideInvalidArgument and leave an explanation. */
#define EXPECT_INVALID(call)                                                    \
  do {                                                                          \
    tideResult_t rc_ = (call);                                                  \
    EXPECT(rc_ == tideInvalidArgument, "%s returned %d (%s)", #call, (int)rc_,  \
           tideGetErrorString(rc_));                                            \
    if (rc_ != tideSuccess) {                                                   \
      const char* msg_ = tideGetLastError(g_comm);                              \
      EXPECT(msg_ != NULL && msg_[0] != '\0', "no last error after %s", #call); \
    }                                                                           \
    CheckAllReduce(__LINE__);                                                   \
  } while (0)

/* The communicator still works: a small sum AllReduce gives the right answer. */
static void CheckAllReduce(int line) {
  int32_t in[5], out[5];
  for (int i = 0; i < 5; ++i) in[i] = g_rank + i;
  MUST(tideAllReduce(in, out, 5, tideInt32, tideSum, g_comm, NULL));
  for (int i = 0; i < 5; ++i) {
    int32_t want = kRanks * (kRanks - 1) / 2 + kRanks * i;
    EXPECT(out[i] == want, "AllReduce after the error at line %d: [%d] = %d, want %d", line, i,
           (int)out[i], (int)want);
  }
}

static void Collectives(void) {
  const int r = g_rank, n = kRanks, next = (r + 1) % kRanks, prev = (r + kRanks - 1) % kRanks;
  static float fs[kCount * kRanks], fr[kCount * kRanks];
  static int32_t is[kCount * kRanks], ir[kCount * kRanks];
  int i, q;

  for (i = 0; i < kCount; ++i) fs[i] = (float)(r + i % 3);
  MUST(tideAllReduce(fs, fr, kCount, tideFloat32, tideSum, g_comm, NULL));
  for (i = 0; i < kCount; ++i) {
    float want = (float)(n * (n - 1) / 2 + n * (i % 3));
    if (fr[i] != want) {
      EXPECT(0, "AllReduce [%d] = %g, want %g", i, fr[i], want);
      break;
    }
  }

  for (i = 0; i < kCount; ++i) {
    is[i] = r == 2 ? 3 * i + 1 : -5;
    ir[i] = -1;
  }
  MUST(tideBroadcast(r == 2 ? is : NULL, ir, kCount, tideInt32, 2, g_comm, NULL));
  for (i = 0; i < kCount; ++i) {
    if (ir[i] != 3 * i + 1) {
      EXPECT(0, "Broadcast [%d] = %d", i, (int)ir[i]);
      break;
    }
  }

  for (i = 0; i < kCount; ++i) {
    is[i] = (i * 7 + r * 13) % 50;
    ir[i] = -1;
  }
  MUST(tideReduce(is, r == 1 ? ir : NULL, kCount, tideInt32, tideMax, 1, g_comm, NULL));
  for (i = 0; r == 1 && i < kCount; ++i) {
    int32_t want = 0;
    for (q = 0; q < n; ++q) want = (i * 7 + q * 13) % 50 > want ? (i * 7 + q * 13) % 50 : want;
    if (ir[i] != want) {
      EXPECT(0, "Reduce max [%d] = %d, want %d", i, (int)ir[i], (int)want);
      break;
    }
  }

  for (i = 0; i < kCount; ++i) is[i] = r * 100000 + i;
  MUST(tideAllGather(is, ir, kCount, tideInt32, g_comm, NULL));
  for (i = 0; i < n * kCount; ++i) {
    int32_t want = (i / kCount) * 100000 + i % kCount;
    if (ir[i] != want) {
      EXPECT(0, "AllGather [%d] = %d, want %d", i, (int)ir[i], (int)want);
      break;
    }
  }

  for (i = 0; i < n * kCount; ++i) is[i] = r + i;
  MUST(tideReduceScatter(is, ir, kCount, tideInt32, tideSum, g_comm, NULL));
  for (i = 0; i < kCount; ++i) {
    int32_t want = n * (n - 1) / 2 + n * (r * kCount + i);
    if (ir[i] != want) {
      EXPECT(0, "ReduceScatter [%d] = %d, want %d", i, (int)ir[i], (int)want);
      break;
    }
  }

  for (i = 0; i < n * kCount; ++i) is[i] = r * 10000000 + (i / kCount) * 10000 + i % kCount;
  MUST(tideAlltoAll(is, ir, kCount, tideInt32, g_comm, NULL));
  for (i = 0; i < n * kCount; ++i) {
    int32_t want = (i / kCount) * 10000000 + r * 10000 + i % kCount;
    if (ir[i] != want) {
      EXPECT(0, "AlltoAll [%d] = %d, want %d", i, (int)ir[i], (int)want);
      break;
    }
  }

  for (i = 0; i < kCount; ++i) {
    is[i] = r * 1000 + i;
    ir[i] = -1;
  }
  MUST(tideGroupStart());
  MUST(tideSend(is, kCount, tideInt32, next, g_comm, NULL));
  MUST(tideRecv(ir, kCount, tideInt32, prev, g_comm, NULL));
  MUST(tideGroupEnd());
  for (i = 0; i < kCount; ++i) {
    if (ir[i] != prev * 1000 + i) {
      EXPECT(0, "Send/Recv [%d] = %d", i, (int)ir[i]);
      break;
    }
  }

  /* count 0 with NULL buffers is allowed everywhere */
  MUST(tideAllReduce(NULL, NULL, 0, tideFloat32, tideSum, g_comm, NULL));
  MUST(tideBroadcast(NULL, NULL, 0, tideFloat32, 0, g_comm, NULL));
  MUST(tideReduce(NULL, NULL, 0, tideFloat32, tideSum, 0, g_comm, NULL));
  MUST(tideAllGather(NULL, NULL, 0, tideFloat32, g_comm, NULL));
  MUST(tideReduceScatter(NULL, NULL, 0, tideFloat32, tideSum, g_comm, NULL));
  MUST(tideAlltoAll(NULL, NULL, 0, tideFloat32, g_comm, NULL));
  MUST(tideGroupStart());
  MUST(tideSend(NULL, 0, tideFloat32, next, g_comm, NULL));
  MUST(tideRecv(NULL, 0, tideFloat32, prev, g_comm, NULL));
  MUST(tideGroupEnd());
  CheckAllReduce(__LINE__);
}

static void ArgumentErrors(void) {
  static float s[64], d[64 * kRanks];
  const int n = kRanks, peer = (g_rank + 1) % kRanks;
  const tideDataType_t bad_type = (tideDataType_t)99;
  const tideRedOp_t bad_op = (tideRedOp_t)17;
  int value = 0;

  EXPECT_INVALID(tideAllReduce(NULL, d, 8, tideFloat32, tideSum, g_comm, NULL));
  EXPECT_INVALID(tideAllReduce(s, NULL, 8, tideFloat32, tideSum, g_comm, NULL));
  EXPECT_INVALID(tideBroadcast(s, NULL, 8, tideFloat32, 0, g_comm, NULL));
  EXPECT_INVALID(tideReduce(NULL, d, 8, tideFloat32, tideSum, 0, g_comm, NULL));
  EXPECT_INVALID(tideAllGather(NULL, d, 8, tideFloat32, g_comm, NULL));
  EXPECT_INVALID(tideAllGather(s, NULL, 8, tideFloat32, g_comm, NULL));
  EXPECT_INVALID(tideReduceScatter(NULL, d, 8, tideFloat32, tideSum, g_comm, NULL));
  EXPECT_INVALID(tideReduceScatter(s, NULL, 8, tideFloat32, tideSum, g_comm, NULL));
  EXPECT_INVALID(tideAlltoAll(NULL, d, 8, tideFloat32, g_comm, NULL));
  EXPECT_INVALID(tideAlltoAll(s, NULL, 8, tideFloat32, g_comm, NULL));
  EXPECT_INVALID(tideSend(NULL, 8, tideFloat32, peer, g_comm, NULL));
  EXPECT_INVALID(tideRecv(NULL, 8, tideFloat32, peer, g_comm, NULL));

  EXPECT_INVALID(tideAllReduce(s, d, 8, bad_type, tideSum, g_comm, NULL));
  EXPECT_INVALID(tideBroadcast(s, d, 8, bad_type, 0, g_comm, NULL));
  EXPECT_INVALID(tideAllGather(s, d, 8, bad_type, g_comm, NULL));
  EXPECT_INVALID(tideSend(s, 8, bad_type, peer, g_comm, NULL));
  EXPECT_INVALID(tideAllReduce(s, d, 8, tideFloat32, bad_op, g_comm, NULL));
  EXPECT_INVALID(tideReduce(s, d, 8, tideFloat32, bad_op, 0, g_comm, NULL));
  EXPECT_INVALID(tideReduceScatter(s, d, 8, tideFloat32, bad_op, g_comm, NULL));

  EXPECT_INVALID(tideBroadcast(s, d, 8, tideFloat32, -1, g_comm, NULL));
  EXPECT_INVALID(tideBroadcast(s, d, 8, tideFloat32, n, g_comm, NULL));
  EXPECT_INVALID(tideReduce(s, d, 8, tideFloat32, tideSum, -1, g_comm, NULL));
  EXPECT_INVALID(tideReduce(s, d, 8, tideFloat32, tideSum, n, g_comm, NULL));
  EXPECT_INVALID(tideSend(s, 8, tideFloat32, -1, g_comm, NULL));
  EXPECT_INVALID(tideSend(s, 8, tideFloat32, n, g_comm, NULL));
  EXPECT_INVALID(tideRecv(d, 8, tideFloat32, -1, g_comm, NULL));
  EXPECT_INVALID(tideRecv(d, 8, tideFloat32, n, g_comm, NULL));

  /* count x element size overflows size_t (the buffers are never touched) */
  EXPECT_INVALID(tideAllReduce(s, d, SIZE_MAX / 2, tideFloat32, tideSum, g_comm, NULL));
  EXPECT_INVALID(tideBroadcast(s, d, SIZE_MAX / 2, tideFloat32, 0, g_comm, NULL));
  EXPECT_INVALID(tideSend(s, SIZE_MAX / 2, tideFloat32, peer, g_comm, NULL));
  /* sendcount x size fits, but x nranks does not */
  EXPECT_INVALID(tideAllGather(s, d, SIZE_MAX / 8, tideFloat32, g_comm, NULL));
  EXPECT_INVALID(tideAlltoAll(s, d, SIZE_MAX / 8, tideFloat32, g_comm, NULL));

  /* Inside a group the issuing call reports the argument error. */
  MUST(tideGroupStart());
  {
    tideResult_t rc = tideAllReduce(NULL, d, 8, tideFloat32, tideSum, g_comm, NULL);
    EXPECT(rc == tideInvalidArgument, "AllReduce(NULL, ...) in a group returned %d", (int)rc);
  }
  printf("rank %d: tideGroupEnd after a rejected operation returned %s\n", g_rank,
         tideGetErrorString(tideGroupEnd()));
  CheckAllReduce(__LINE__);

  /* NULL communicator */
  {
    tideResult_t rc = tideAllReduce(s, d, 8, tideFloat32, tideSum, NULL, NULL);
    EXPECT(rc == tideInvalidArgument, "AllReduce on NULL comm returned %d", (int)rc);
    const char* msg = tideGetLastError(NULL);
    EXPECT(msg != NULL && msg[0] != '\0', "no thread last error after a NULL comm");
    EXPECT(tideCommCount(NULL, &value) == tideInvalidArgument, "tideCommCount(NULL)");
    EXPECT(tideCommUserRank(NULL, &value) == tideInvalidArgument, "tideCommUserRank(NULL)");
    EXPECT(tideCommCount(g_comm, NULL) == tideInvalidArgument, "tideCommCount(comm, NULL)");
    EXPECT(tideSend(s, 8, tideFloat32, peer, NULL, NULL) == tideInvalidArgument, "Send NULL comm");
    CheckAllReduce(__LINE__);
  }
}

static void Strings(void) {
  int code, other, version = -1;
  for (code = 0; code < tideNumResults; ++code) {
    const char* s = tideGetErrorString((tideResult_t)code);
    EXPECT(s != NULL && s[0] != '\0', "tideGetErrorString(%d) empty", code);
    for (other = 0; s && other < code; ++other) {
      const char* t = tideGetErrorString((tideResult_t)other);
      EXPECT(t == NULL || strcmp(s, t) != 0, "codes %d and %d share the string '%s'", code, other,
             s);
    }
  }
  EXPECT(tideGetErrorString((tideResult_t)99) != NULL, "tideGetErrorString(99) is NULL");
  EXPECT(tideGetVersion(&version) == tideSuccess && version == TIDE_VERSION_CODE,
         "tideGetVersion gave %d, header says %d", version, TIDE_VERSION_CODE);
}

static int RunRank(int rank, tideUniqueId id) {
  int count = -1, me = -1;
  g_rank = rank;
  alarm(kChildTimeoutS);
  MUST(tideCommInitRank(&g_comm, kRanks, id, rank));
  MUST(tideCommCount(g_comm, &count));
  MUST(tideCommUserRank(g_comm, &me));
  EXPECT(count == kRanks && me == rank, "count %d rank %d", count, me);
  Collectives();
  ArgumentErrors();
  Strings();
  MUST(tideCommDestroy(g_comm));
  printf("rank %d: %s (%d failed checks)\n", rank, g_failures ? "FAILED" : "ok", g_failures);
  return g_failures ? 1 : 0;
}

static void OnAlarm(int sig) {
  static const char kMsg[] = "fork_test: timeout (or a rank failed): killing the remaining ranks\n";
  int i;
  (void)sig;
  for (i = 0; i < kRanks; ++i) {
    if (g_pids[i] > 0) kill(g_pids[i], SIGKILL);
  }
  if (write(2, kMsg, sizeof(kMsg) - 1) < 0) _exit(2);
  _exit(2);
}

static int MakeId(void* id) {
  const tideResult_t rc = tideGetUniqueId((tideUniqueId*)id);
  if (rc != tideSuccess) {
    printf("tideGetUniqueId failed: %s: %s\n", tideGetErrorString(rc), tideGetLastError(NULL));
  }
  return rc == tideSuccess ? 0 : 1;
}

static int RunChild(int rank, void* id) { return RunRank(rank, *(tideUniqueId*)id); }

int main(void) {
  tideUniqueId id;
  int i, failed = 0;
  setvbuf(stdout, NULL, _IOLBF, 0);
  /* Children first, then the id (fork_ranks.h says why). */
  if (ForkRanksShareId(kRanks, g_pids, &id, sizeof(id), MakeId, RunChild, 60) != 0) return 1;
  signal(SIGALRM, OnAlarm);
  alarm(kParentTimeoutS);
  for (i = 0; i < kRanks; ++i) {
    int status = 0, r;
    pid_t pid = waitpid(-1, &status, 0);
    if (pid < 0) {
      perror("waitpid");
      failed++;
      break;
    }
    for (r = 0; r < kRanks && g_pids[r] != pid; ++r) {
    }
    if (r < kRanks) g_pids[r] = 0;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      printf("rank %d failed: %s %d\n", r, WIFEXITED(status) ? "exit" : "signal",
             WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
      if (failed++ == 0) alarm(5); /* the others get 5 s to report, then are killed */
    }
  }
  printf("fork_test: %s\n", failed ? "FAILED" : "all ranks passed");
  return failed ? 1 : 0;
}
