/* tideTopoPredictTime from C (tide/tide.h only): predictions for topology
 * files and for this node without a communicator, growing with the size and
 * (across nodes) with the node count; 0 for 0 bytes; every bad argument a
 * tideInvalidArgument with a message.
 *   topo_predict_test FIXTURE_DIR */
#include <stdio.h>
#include <string.h>

#include "tide/tide.h"

static int failures = 0;

#define EXPECT(cond, ...)                         \
  do {                                            \
    if (!(cond)) {                                \
      printf("FAIL %s:%d: ", __FILE__, __LINE__); \
      printf(__VA_ARGS__);                        \
      printf("\n");                               \
      ++failures;                                 \
    }                                             \
  } while (0)

static double predict(const char* file, int nodes, int rpn, tideCollective_t c, size_t bytes) {
  double us = -1;
  tideResult_t rc = tideTopoPredictTime(file, nodes, rpn, c, bytes, &us);
  EXPECT(rc == tideSuccess, "%s %dx%d coll %d %zu bytes: %s: %s", file ? file : "(this node)",
         nodes, rpn, (int)c, bytes, tideGetErrorString(rc), tideGetLastError(NULL));
  return us;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s FIXTURE_DIR\n", argv[0]);
    return 2;
  }
  char dgx[4096], pcie[4096], missing[4096];
  snprintf(dgx, sizeof dgx, "%s/dgx_h100.tide.xml", argv[1]);
  snprintf(pcie, sizeof pcie, "%s/pcie_8gpu.nccl.xml", argv[1]);
  snprintf(missing, sizeof missing, "%s/no-such-file.xml", argv[1]);
  const tideCollective_t colls[] = {tideCollAllReduce, tideCollBroadcast,     tideCollReduce,
                                    tideCollAllGather, tideCollReduceScatter, tideCollAlltoAll,
                                    tideCollSendRecv};
  const char* files[] = {dgx, pcie, NULL};
  for (int f = 0; f < 3; ++f) {
    for (int c = 0; c < 7; ++c) {
      EXPECT(predict(files[f], 2, 8, colls[c], 0) == 0.0, "0 bytes is not 0 us");
      double prev = 0;
      for (size_t b = 1024; b <= ((size_t)256 << 20); b *= 16) {
        const double us = predict(files[f], 2, 8, colls[c], b);
        EXPECT(us > 0 && us >= prev, "coll %d: %zu bytes %.3f us after %.3f", c, b, us, prev);
        prev = us;
      }
    }
    /* One rank alone moves nothing. */
    EXPECT(predict(files[f], 1, 1, tideCollAllReduce, 1 << 20) == 0.0, "1 rank is not 0 us");
  }
  /* More nodes over the same network: a large All-Reduce takes no less. */
  const double two = predict(dgx, 2, 8, tideCollAllReduce, 256u << 20);
  const double sixteen = predict(dgx, 16, 8, tideCollAllReduce, 256u << 20);
  const double one = predict(dgx, 1, 8, tideCollAllReduce, 256u << 20);
  EXPECT(one < two && two <= sixteen, "1, 2, 16 nodes: %.1f %.1f %.1f us", one, two, sixteen);
  /* The same model as tide-topo prints, cached: the same answer again. */
  EXPECT(predict(dgx, 16, 8, tideCollAllReduce, 256u << 20) == sixteen, "not deterministic");

  double us = 0;
  int bad = 99;
  tideCollective_t badColl;
  memcpy(&badColl, &bad, sizeof bad);
  struct {
    const char* what;
    tideResult_t rc;
  } cases[] = {
      {"unknown collective", tideTopoPredictTime(dgx, 2, 8, badColl, 1024, &us)},
      {"NULL microseconds", tideTopoPredictTime(dgx, 2, 8, tideCollAllReduce, 1024, NULL)},
      {"0 nodes", tideTopoPredictTime(dgx, 0, 8, tideCollAllReduce, 1024, &us)},
      {"0 ranks per node", tideTopoPredictTime(dgx, 2, 0, tideCollAllReduce, 1024, &us)},
      {"too many ranks", tideTopoPredictTime(dgx, 1024, 1024, tideCollAllReduce, 1024, &us)},
      {"missing file", tideTopoPredictTime(missing, 2, 8, tideCollAllReduce, 1024, &us)},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    EXPECT(cases[i].rc == tideInvalidArgument, "%s: %s, not tideInvalidArgument", cases[i].what,
           tideGetErrorString(cases[i].rc));
  }
  (void)tideTopoPredictTime(missing, 2, 8, tideCollAllReduce, 1024, &us);
  EXPECT(strstr(tideGetLastError(NULL), "no-such-file") != NULL, "message: %s",
         tideGetLastError(NULL));
  printf("%s (%d failure(s)); dgx 2x8 All-Reduce 256 MiB: %.1f us, 16x8: %.1f us\n",
         failures ? "FAILED" : "passed", failures, two, sixteen);
  return failures ? 1 : 0;
}
