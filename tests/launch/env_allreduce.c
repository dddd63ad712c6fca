/* Launcher smoke test: builds a communicator with tideCommInitFromEnv, runs
 * all-reduces of a few sizes and checks the results. Public API only.
 * Usage: env_allreduce [expected_world_size]. Exit status 0 on success. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* tide.h names struct tideComm in a prototype before declaring it; declaring
 * the tag first keeps C compilers from scoping it to that prototype. */
struct tideComm;
#include "tide/tide.h"

#define CHECK(call)                                                                        \
  do {                                                                                     \
    tideResult_t r_ = (call);                                                              \
    if (r_ != tideSuccess) {                                                               \
      fprintf(stderr, "env_allreduce: %s failed: %s: %s\n", #call, tideGetErrorString(r_), \
              tideGetLastError(NULL));                                                     \
      return 1;                                                                            \
    }                                                                                      \
  } while (0)

static int checkFloatSum(tideComm_t comm, int rank, int nranks, size_t count) {
  float* buf = (float*)malloc(count * sizeof(float));
  if (buf == NULL) return 1;
  for (size_t i = 0; i < count; ++i) buf[i] = (float)((rank + 1) * (int)(i % 7 + 1));
  CHECK(tideAllReduce(buf, buf, count, tideFloat32, tideSum, comm, NULL));
  int bad = 0;
  for (size_t i = 0; i < count && !bad; ++i) {
    float want = (float)(nranks * (nranks + 1) / 2 * (int)(i % 7 + 1));
    if (buf[i] != want) {
      fprintf(stderr, "rank %d: sum of %zu floats: [%zu] = %g, want %g\n", rank, count, i,
              (double)buf[i], (double)want);
      bad = 1;
    }
  }
  free(buf);
  return bad;
}

static int checkInt64Max(tideComm_t comm, int rank, int nranks) {
  int64_t send[3] = {rank, -rank, (int64_t)rank << 40};
  int64_t recv[3] = {0, 0, 0};
  CHECK(tideAllReduce(send, recv, 3, tideInt64, tideMax, comm, NULL));
  if (recv[0] != nranks - 1 || recv[1] != 0 || recv[2] != (int64_t)(nranks - 1) << 40) {
    fprintf(stderr, "rank %d: int64 max gave %lld %lld %lld\n", rank, (long long)recv[0],
            (long long)recv[1], (long long)recv[2]);
    return 1;
  }
  return 0;
}

int main(int argc, char** argv) {
  tideComm_t comm = NULL;
  int nranks = 0, rank = -1;
  CHECK(tideCommInitFromEnv(&comm));
  CHECK(tideCommCount(comm, &nranks));
  CHECK(tideCommUserRank(comm, &rank));
  if (argc > 1 && nranks != atoi(argv[1])) {
    fprintf(stderr, "rank %d: world size %d, want %s\n", rank, nranks, argv[1]);
    return 1;
  }
  static const size_t kCounts[] = {1, 1000, 300000};
  for (size_t c = 0; c < sizeof(kCounts) / sizeof(kCounts[0]); ++c) {
    if (checkFloatSum(comm, rank, nranks, kCounts[c]) != 0) return 1;
  }
  if (checkInt64Max(comm, rank, nranks) != 0) return 1;
  CHECK(tideCommDestroy(comm));
  printf("env_allreduce: rank %d of %d ok\n", rank, nranks);
  return 0;
}
