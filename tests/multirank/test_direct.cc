// Forced "direct" algorithm (algorithms/pairwise.cc) and the shm transport's
// single-copy path: coll_worker's serial reference checks with TIDE_ALGO
// naming direct for the four collectives it implements, at 2-4 ranks, with
// single copy on (default threshold and a small one, so FIFO and single-copy
// messages mix inside one operation) and off (TIDE_SHM_CMA=0). Sizes below
// direct's minimum fall back to the cost model's choice.
#include <cstdlib>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "rank_harness.h"

namespace tide_test {
namespace {

const char kAlgo[] = "allreduce:direct;allgather:direct;reducescatter:direct;broadcast:direct";
// 1 MiB / elemsize + 3 and an odd mid size, in and out of place, end roots.
const char kSpec[] =
    "colls=allreduce,allgather,reducescatter,broadcast;dtypes=float32,int8,bfloat16;"
    "ops=sum,min;counts=large,65537;roots=ends";

std::string WorkerPath() {
  if (const char* p = getenv("TIDE_COLL_WORKER")) return p;
  return SelfDir() + "coll_worker";
}

void RunDirect(int nranks, const EnvList& extra) {
  ProcessRunOptions o;
  o.exe = WorkerPath();
  o.nranks = nranks;
  o.args = {kSpec};
  o.timeout_ms = 240000;
  o.env = {{"TIDE_TIMEOUT", "60"}, {"TIDE_ALGO", kAlgo}};
  for (const auto& kv : extra) o.env.push_back(kv);
  RunResult r = RunProcesses(o);
  std::string env;
  for (const auto& kv : extra) env += " " + kv.first + "=" + kv.second;
  EXPECT_TRUE(r.AllOk()) << "n=" << nranks << env << "\n" << r.Describe();
  printf("n=%d%s: %.1f s\n", nranks, env.c_str(), r.elapsed_s);
}

TEST(Direct, SingleCopy) {
  for (int n : {2, 3, 4}) RunDirect(n, {});
}
TEST(Direct, SmallSingleCopyThreshold) { RunDirect(3, {{"TIDE_SHM_CMA_MIN", "4K"}}); }
TEST(Direct, WithoutSingleCopy) { RunDirect(4, {{"TIDE_SHM_CMA", "0"}}); }

}  // namespace
}  // namespace tide_test
