// Multi-process collective correctness: launches coll_worker through the rank
// harness with 1, 2, 3, 4 and 8 ranks, over shared memory and over TCP
// (TIDE_SHM_DISABLE=1). Each TEST is one meson test() entry (see
// meson.build), so the batches run in parallel and time out separately.
//
// The worker is found through TIDE_COLL_WORKER or next to this executable.
// A failure prints the failing ranks' output (one line per failing case) and
// the worker command line to reproduce it.
#include <cstdlib>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "rank_harness.h"

namespace tide_test {
namespace {

// Every dtype x op x collective at counts 0, 1, 7, 4097, every root.
const char kSmall[] = "counts=small";
// 1 MiB / elemsize + 3 elements; roots 0 and n-1.
const char kLarge[] = "counts=large;roots=ends";
// Large sizes with 8 ranks oversubscribing the cores: a few types only.
const char kLarge8[] = "dtypes=float32,int8,bfloat16;counts=large;roots=ends";
// TCP moves bytes the same way for every type: large sizes for one type per
// element size (and both fp8 codecs' neighbours are covered over shm).
const char kLargeTcp[] = "dtypes=int8,float16,float32,float64,fp8e5m2;counts=large;roots=ends";
// A sample on a host stream (asynchronous path), small and large.
const char kStream[] =
    "dtypes=float32,int8,float16;ops=sum,max;counts=0,7,4097,large;roots=ends;stream=1";

// Buffers one element past alignment (unaligned kernel heads and tails).
const char kOffset[] =
    "dtypes=int8,float16,float32,float64,fp8e5m2;ops=sum,avg;counts=7,4097,large;roots=ends;"
    "offset=1";
// Counts around pipeline chunk and FIFO slot boundaries.
const char kBoundary[] =
    "dtypes=float32,int8;ops=sum,min;counts=32767,32768,32769,65537,196609;roots=ends";
// Knobs that force many small pipeline steps and FIFO wrap-arounds.
const EnvList kShmStress = {
    {"TIDE_SHM_SLOTS", "2"}, {"TIDE_SHM_SLOT_SIZE", "8K"}, {"TIDE_CHUNK_SIZE", "16K"}};
const EnvList kTcpStress = {{"TIDE_SOCKET_BUFSIZE", "64K"}, {"TIDE_CHUNK_SIZE", "4K"}};

std::string WorkerPath() {
  if (const char* p = getenv("TIDE_COLL_WORKER")) return p;
  return SelfDir() + "coll_worker";
}

void RunWorker(int nranks, bool tcp, const std::vector<std::string>& specs, int timeout_s,
               const EnvList& extra_env = {}) {
  ProcessRunOptions o;
  o.exe = WorkerPath();
  o.nranks = nranks;
  o.args = specs;
  o.timeout_ms = timeout_s * 1000;
  // A hung collective should fail inside the library before the harness kills it.
  o.env.emplace_back("TIDE_TIMEOUT", "60");
  if (tcp) o.env.emplace_back("TIDE_SHM_DISABLE", "1");
  for (const auto& kv : extra_env) o.env.push_back(kv);
  RunResult r = RunProcesses(o);

  std::string repro =
      "reproduce: TIDE_MASTER_ADDR=127.0.0.1 TIDE_MASTER_PORT=<port> TIDE_WORLD_SIZE=" +
      std::to_string(nranks) + (tcp ? " TIDE_SHM_DISABLE=1" : "");
  for (const auto& kv : extra_env) repro += " " + kv.first + "=" + kv.second;
  repro += " TIDE_RANK=<r> " + o.exe;
  for (const auto& s : specs) repro += " '" + s + "'";
  EXPECT_TRUE(r.AllOk()) << repro << "\n" << r.Describe();
  if (r.AllOk()) {
    EXPECT_TRUE(r.leftover_shm.empty())
        << "shared-memory files left behind, e.g. /dev/shm/" << r.leftover_shm[0];
  }
  // Rank 0's summary line (cases and timings) for the log.
  if (!r.ranks.empty()) printf("%s(%.1f s total)\n", r.ranks[0].output.c_str(), r.elapsed_s);
}

// ---- Shared memory (default transports) --------------------------------------
TEST(CollShm, Ranks1) { RunWorker(1, false, {kSmall, kLarge}, 240); }
TEST(CollShm, Ranks2) { RunWorker(2, false, {kSmall, kLarge, kStream}, 400); }
TEST(CollShm, Ranks3) { RunWorker(3, false, {kSmall, kLarge}, 400); }
TEST(CollShm, Ranks4) { RunWorker(4, false, {kSmall, kLarge, kStream}, 500); }
TEST(CollShm, Ranks8Small) { RunWorker(8, false, {kSmall}, 500); }
TEST(CollShm, Ranks8Large) { RunWorker(8, false, {kLarge8}, 500); }
TEST(CollShm, Ranks3Stress) { RunWorker(3, false, {kSmall, kBoundary, kOffset}, 400, kShmStress); }

// ---- TCP only --------------------------------------------------------------------
TEST(CollTcp, Ranks2) { RunWorker(2, true, {kSmall, kLargeTcp}, 400); }
TEST(CollTcp, Ranks3) { RunWorker(3, true, {kSmall, kLargeTcp}, 400); }
TEST(CollTcp, Ranks4) { RunWorker(4, true, {kSmall, kLargeTcp}, 500); }
TEST(CollTcp, Ranks8Small) { RunWorker(8, true, {kSmall}, 500); }
TEST(CollTcp, Ranks8Large) { RunWorker(8, true, {kLarge8}, 500); }
TEST(CollTcp, Ranks3Stress) {
  RunWorker(3, true, {"colls=all;dtypes=float32,uint8;counts=small", kBoundary, kOffset}, 400,
            kTcpStress);
}

}  // namespace
}  // namespace tide_test
