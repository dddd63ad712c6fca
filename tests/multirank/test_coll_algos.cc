// Forced-algorithm correctness: coll_worker (serial reference checks) with
// TIDE_ALGO naming an algorithm for every collective it runs, so each of
// ring, tree, rhd and hier is checked for every collective it implements, at
// 1-6 and 8 ranks, over shared memory and over the network transport
// (TIDE_SHM_DISABLE=1), and with ranks spread over fake nodes (TIDE_HOSTID
// per rank: different "hosts" talk over the network transport), contiguous,
// interleaved (the ring order then differs from rank order) and of unequal
// sizes. Each TEST is one meson test() (see meson.build).
#include <cstdlib>
#include <string>
#include <vector>

#include "coll_check.h"
#include "gtest/gtest.h"
#include "rank_harness.h"

namespace tide_test {
namespace {

// Algorithm sets: together they force every (collective, algorithm) pair.
const char kSetA[] = "allreduce:tree;allgather:rhd;reducescatter:rhd;broadcast:hier;reduce:hier";
const char kSetB[] = "allreduce:rhd;allgather:hier;reducescatter:hier;broadcast:ring;reduce:ring";
const char kSetC[] = "allreduce:hier;allgather:ring;reducescatter:ring;broadcast:hier;reduce:ring";
const std::vector<std::string> kAllSets = {kSetA, kSetB, kSetC};
// One node only: direct (single-node, >= 64 KiB messages; smaller calls fall
// back to the automatic choice) and oneshot (small; larger ones fall back).
const char kSetD[] =
    "allreduce:direct;allgather:direct;reducescatter:direct;broadcast:direct;reduce:oneshot";

const char kColls[] = "colls=allreduce,allgather,reducescatter,broadcast,reduce;";
// Every dtype x op at counts 0, 1, 7, 4097, in and out of place, every root.
// Reduced mode (TIDE_TEST_REDUCED=1, the sanitizer stages) keeps every
// collective, count, in/out-of-place mode and root end, but crosses types and
// ops only where an algorithm can tell them apart: float32 with every op (avg's
// final scaling is the algorithm's), and one type of each other element size
// (how counts split into chunks and per-rank pieces) with sum and avg. About a
// fifth of the cases; every dtype x op pair stays in multirank_coll_*.
std::vector<std::string> Small() {
  if (!tide_test::ReducedMode()) return {std::string(kColls) + "counts=small"};
  return {std::string(kColls) + "dtypes=float32;counts=small",
          std::string(kColls) + "dtypes=int8,bfloat16,float64;ops=sum,avg;counts=small"};
}
// Small() followed by `more`.
std::vector<std::string> Small(const std::vector<std::string>& more) {
  std::vector<std::string> v = Small();
  v.insert(v.end(), more.begin(), more.end());
  return v;
}
// 1 MiB / elemsize + 3 and an odd mid size, a few types.
const std::string kLarge =
    std::string(kColls) + "dtypes=float32,int8,bfloat16;ops=sum,min;counts=large,65537;roots=ends";
const std::string kMid = std::string(kColls) +
                         "dtypes=float32,uint8;ops=sum,max;counts=65537;"
                         "roots=ends";

struct Layout {
  int nodes = 0;  // 0: no TIDE_HOSTID (one real node)
  bool interleave = false;
  // Node of each rank: contiguous blocks (rank * nodes / n) or rank % nodes.
  int NodeOf(int rank, int n) const { return interleave ? rank % nodes : rank * nodes / n; }
};

std::string WorkerPath() {
  if (const char* p = getenv("TIDE_COLL_WORKER")) return p;
  return SelfDir() + "coll_worker";
}

void Run(int nranks, bool tcp, Layout layout, const std::string& algo,
         const std::vector<std::string>& specs, int timeout_s, const EnvList& extra = {}) {
  ProcessRunOptions o;
  o.exe = WorkerPath();
  o.nranks = nranks;
  o.args = specs;
  o.timeout_ms = timeout_s * 1000;
  o.env.emplace_back("TIDE_TIMEOUT", "60");
  o.env.emplace_back("TIDE_ALGO", algo);
  if (tcp) o.env.emplace_back("TIDE_SHM_DISABLE", "1");
  for (const auto& kv : extra) o.env.push_back(kv);
  if (layout.nodes > 0) {
    o.rank_env = [layout, nranks](int r) {
      return EnvList{{"TIDE_HOSTID", "algos-node-" + std::to_string(layout.NodeOf(r, nranks))}};
    };
  }
  RunResult r = RunProcesses(o);
  std::string repro =
      "reproduce: TIDE_MASTER_ADDR=127.0.0.1 TIDE_MASTER_PORT=<port> "
      "TIDE_WORLD_SIZE=" +
      std::to_string(nranks) + " TIDE_ALGO='" + algo + "'" + (tcp ? " TIDE_SHM_DISABLE=1" : "");
  if (layout.nodes > 0) repro += " TIDE_HOSTID=<node of rank>";
  for (const auto& kv : extra) repro += " " + kv.first + "=" + kv.second;
  repro += " TIDE_RANK=<r> " + o.exe;
  for (const auto& s : specs) repro += " '" + s + "'";
  EXPECT_TRUE(r.AllOk()) << repro << "\n" << r.Describe();
  if (!r.ranks.empty()) {
    printf("n=%d nodes=%d%s tcp=%d %s: %.1f s\n", nranks, layout.nodes,
           layout.interleave ? " interleaved" : "", tcp, algo.c_str(), r.elapsed_s);
  }
}

void RunSets(int nranks, bool tcp, Layout layout, const std::vector<std::string>& specs,
             int timeout_s, const EnvList& extra = {}) {
  for (const auto& algo : kAllSets) Run(nranks, tcp, layout, algo, specs, timeout_s, extra);
}

void RunSetD(int nranks, const std::vector<std::string>& specs, int timeout_s) {
  Run(nranks, false, {}, kSetD, specs, timeout_s);
}

// ---- One node, shared memory ----------------------------------------------------------
TEST(AlgosShm, Ranks1To4) {
  for (int n : {1, 2, 3, 4}) {
    RunSets(n, false, {}, Small({n >= 3 ? kLarge : kMid}), 200);
    RunSetD(n, Small({kMid}), 200);
  }
}
TEST(AlgosShm, Ranks5And6) {
  for (int n : {5, 6}) {
    RunSets(n, false, {}, Small({kMid}), 200);
    RunSetD(n, Small({kMid}), 200);
  }
}
TEST(AlgosShm, Ranks8Small) {
  RunSets(8, false, {}, Small(), 300);
  RunSetD(8, Small({kMid}), 300);
}

// ---- One node, network transport --------------------------------------------------------
TEST(AlgosNet, Ranks3And5) {
  for (int n : {3, 5}) RunSets(n, true, {}, Small({kMid}), 200);
}

// ---- Fake nodes (hier's inter-node paths, ring order != rank order) ---------------------
TEST(AlgosNodes, TwoByTwo) { RunSets(4, false, {2, false}, Small({kLarge}), 300); }
TEST(AlgosNodes, ThreeByTwoInterleaved) { RunSets(6, false, {3, true}, Small({kMid}), 300); }
TEST(AlgosNodes, Unequal) {
  RunSets(5, false, {2, false}, Small({kMid}), 300);  // 3 + 2 ranks
  RunSets(5, false, {3, true}, Small(), 300);         // 2 + 2 + 1 ranks
}
// Many pipeline chunks per operation (tree's out-of-order streams, hier's blocks).
TEST(AlgosNodes, SmallChunks) {
  RunSets(4, false, {2, true}, {kMid}, 300, {{"TIDE_CHUNK_SIZE", "4K"}});
  RunSets(6, false, {2, false}, {kMid}, 300, {{"TIDE_CHUNK_SIZE", "4K"}});
}

}  // namespace
}  // namespace tide_test
