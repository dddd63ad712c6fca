/*
 * Compressed collectives from C: a C11 program that includes only
 * tide/tide.h and tide/compress.h. Three ranks (forked, fork_ranks.h) run a
 * compressed All-Reduce with every codec (and tideCodecNone and
 * tideCodecAuto) on float32 input and check each element against the
 * documented bound (docs/compression.md), written here in its simplest
 * form for inputs in [-1, 1]:
 *   fp16/bf16:   u sum|x| + u |S| + (n + 2) 2^-23 sum|x| (+ (n + 1) 2^-25, fp16)
 *   int8/int4:   n s/2 + s_out/2 + slack, s = 1/qmax (every |x| <= 1), and
 *                s_out = (n + n s/2)/qmax (every |S| <= n)
 *   top-k:       the sum of each rank's k-th largest magnitude (<= n)
 *   none, auto (one node: none): exact for these inputs (small integers / 8).
 */
#include "tide/compress.h"

#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fork_ranks.h"
#include "tide/tide.h"

enum { kRanks = 3, kCount = 5003, kParentTimeoutS = 120, kChildTimeoutS = 110 };

static int g_rank = -1;
static int g_failures = 0;
static tideComm_t g_comm = NULL;
static pid_t g_pids[kRanks];

#define MUST(call)                                                                             \
  do {                                                                                         \
    tideResult_t rc_ = (call);                                                                 \
    if (rc_ != tideSuccess) {                                                                  \
      printf("rank %d: line %d: %s returned %d (%s): %s\n", g_rank, __LINE__, #call, (int)rc_, \
             tideGetErrorString(rc_), tideGetLastError(g_comm));                               \
      exit(1);                                                                                 \
    }                                                                                          \
  } while (0)

/* Rank r's element i: a multiple of 1/8 in [-1, 1] (exact sums in fp32). */
static float Input(int r, int i) { return (float)(((i * 7 + r * 5) % 17) - 8) / 8.0f; }

static double Bound(tideCodec_t codec, double sumAbs, double s) {
  const double n = kRanks, slack = (n + 2) * ldexp(1.0, -23) * sumAbs;
  switch (codec) {
    case tideCodecFp16:
      return ldexp(1.0, -11) * (sumAbs + fabs(s)) + slack + (n + 1) * ldexp(1.0, -25);
    case tideCodecBf16:
      return ldexp(1.0, -8) * (sumAbs + fabs(s)) + slack;
    case tideCodecInt8:
    case tideCodecInt4: {
      const double qmax = codec == tideCodecInt8 ? 127 : 7;
      const double step = 1.0 / qmax;
      return n * step / 2 + (n + n * step / 2) / qmax / 2 + slack;
    }
    case tideCodecTopK:
      return n + slack;
    default:
      return 0;
  }
}

static void RunCodec(tideCodec_t codec) {
  static float in[kCount], out[kCount];
  tideCompressConfig_t config = TIDE_COMPRESS_CONFIG_INITIALIZER;
  tideCompressor_t k = NULL;
  double worst = 0;
  int i, q;
  config.codec = codec;
  config.topkRatio = 0.1;
  config.seed = 7;
  MUST(tideCompressorCreate(g_comm, &config, &k));
  for (i = 0; i < kCount; ++i) in[i] = Input(g_rank, i);
  MUST(tideAllReduceCompressed(in, out, kCount, tideFloat32, tideSum, k, g_comm, NULL));
  for (i = 0; i < kCount; ++i) {
    double s = 0, sumAbs = 0, err;
    for (q = 0; q < kRanks; ++q) {
      s += Input(q, i);
      sumAbs += fabs(Input(q, i));
    }
    err = fabs(out[i] - s);
    if (err > worst) worst = err;
    if (!(err <= Bound(codec, sumAbs, s))) {
      printf("rank %d: codec %d: element %d is %g, want %g (error %g > bound %g)\n", g_rank,
             (int)codec, i, out[i], s, err, Bound(codec, sumAbs, s));
      g_failures++;
      break;
    }
  }
  MUST(tideCompressorDestroy(k));
  printf("rank %d: codec %d within its bound (worst error %g)\n", g_rank, (int)codec, worst);
}

static int RunRank(int rank, tideUniqueId id) {
  const tideCodec_t codecs[] = {tideCodecNone, tideCodecFp16, tideCodecBf16, tideCodecInt8,
                                tideCodecInt4, tideCodecTopK, tideCodecAuto};
  size_t c;
  g_rank = rank;
  alarm(kChildTimeoutS);
  MUST(tideCommInitRank(&g_comm, kRanks, id, rank));
  for (c = 0; c < sizeof(codecs) / sizeof(codecs[0]); ++c) RunCodec(codecs[c]);
  MUST(tideCommDestroy(g_comm));
  printf("rank %d: %s\n", rank, g_failures ? "FAILED" : "ok");
  return g_failures ? 1 : 0;
}

static void OnAlarm(int sig) {
  static const char kMsg[] = "compress_test: timeout: killing the remaining ranks\n";
  int i;
  (void)sig;
  for (i = 0; i < kRanks; ++i) {
    if (g_pids[i] > 0) kill(g_pids[i], SIGKILL);
  }
  if (write(2, kMsg, sizeof(kMsg) - 1) < 0) _exit(2);
  _exit(2);
}

static int MakeId(void* id) { return tideGetUniqueId((tideUniqueId*)id) == tideSuccess ? 0 : 1; }

static int RunChild(int rank, void* id) { return RunRank(rank, *(tideUniqueId*)id); }

int main(void) {
  tideUniqueId id;
  int i, failed = 0;
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (ForkRanksShareId(kRanks, g_pids, &id, sizeof(id), MakeId, RunChild, 60) != 0) return 1;
  signal(SIGALRM, OnAlarm);
  alarm(kParentTimeoutS);
  for (i = 0; i < kRanks; ++i) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, 0);
    if (pid < 0) {
      failed++;
      break;
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failed++;
  }
  printf("compress_test: %s\n", failed ? "FAILED" : "all ranks passed");
  return failed ? 1 : 0;
}
