#include "common/harness.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/options.h"

#ifdef TIDE_PERF_MPI
namespace tide_perf {
Backend* MpiBackend();  // perf/mpi/mpi_backend.cc
}  // namespace tide_perf
#else
#include "common/tide_backend.h"
#endif

namespace tide_perf {
namespace {

// Process-wide state of one run.
struct Run {
  const Collective* coll = nullptr;
  Options opt;
  Backend* be = nullptr;
  int rank = 0;
  int nranks = 1;
  uint64_t total_wrong = 0;
  double bw_sum = 0;
  int bw_count = 0;
  uint64_t checks = 0;
  // --traffic: bytes per out-of-place call of the last size measured.
  bool have_traffic = false;
  unsigned long long traffic[4] = {};
  // --compress: the tool's compressed form and, for the size being measured,
  // the out-of-place call's bytes sent (max and sum over ranks: everything,
  // inter-node) and the largest errors of both variants' checks.
  CompressKind kind = CompressKind::kNone;
  CompressNodes nodes;  // which node each rank is on
  unsigned long long wire[4] = {};
  double err[2] = {};
};

[[noreturn]] void Fail(const Run& run, const char* what, tideResult_t res) {
  char host[256] = "?";
  gethostname(host, sizeof(host) - 1);
  std::fflush(stdout);
  std::fprintf(stderr, "%s: rank %d pid %d: %s failure in %s: '%s' : %s\n", host, run.rank,
               static_cast<int>(getpid()), run.be->Name(), what, run.be->ErrorString(res),
               run.be->LastError());
  std::fflush(stderr);
  run.be->Abort();
  std::_Exit(2);
}

void Try(const Run& run, const char* what, tideResult_t res) {
  if (res != tideSuccess) Fail(run, what, res);
}

void Sync(const Run& run) { Try(run, "synchronize", run.be->Sync()); }

// The measured call: the compressed collective when b has a compressor.
tideResult_t Issue(const Run& run, const Bench& b) {
  return b.compressor != nullptr ? CompressIssue(run.kind, b) : run.coll->issue(b);
}

// Blocking all-reduce of host values (nothing else in flight).
void HostAllReduce(const Run& run, void* data, size_t count, tideDataType_t type, tideRedOp_t op) {
  Try(run, "AllReduce (harness)", run.be->HostAllReduce(data, count, type, op));
}

void Barrier(const Run& run) {
  int32_t one = 1;
  HostAllReduce(run, &one, 1, tideInt32, tideSum);
}

void PrintHeader(const Run& run) {
  struct Info {
    int32_t pid;
    char host[60];
  };
  Info mine{};
  mine.pid = static_cast<int32_t>(getpid());
  gethostname(mine.host, sizeof(mine.host) - 1);
  std::vector<Info> all(static_cast<size_t>(run.nranks));
  Try(run, "AllGather (header)", run.be->HostAllGather(&mine, all.data(), sizeof(Info)));
  if (run.rank != 0) return;
  const Options& o = run.opt;
  std::printf("# Tide perf tests: %s, %s\n", run.coll->name, run.be->Describe().c_str());
  std::printf(
      "# nThread 1 nGpus 1 minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d "
      "iters: %d agg iters: 1 validation: %d graph: 0\n",
      o.min_bytes, o.max_bytes, o.step_by_factor ? o.step_factor : o.step_bytes,
      o.step_by_factor ? "factor" : "bytes", o.warmup, o.iters, o.check);
  for (const std::string& n : o.notes) std::printf("# Note: %s\n", n.c_str());
  if (!o.compare.empty()) {
    std::string list;
    for (const std::string& v : o.compare) list += (list.empty() ? "" : ",") + v;
    std::printf(
        "# Compare: %s alternating in this process, %d rounds (order rotating), %d calls per "
        "round and variant, out-of-place; lines '#  compare SIZE VARIANT ROUND TIME(us) "
        "WIRE(B)', then each variant's median per size\n",
        list.c_str(), o.rounds, o.iters);
  }
  if (o.cz.enabled) {
    std::printf(
        "# Compression: %s; one compressor per size and variant.\n"
        "#   wire(B): bytes a rank sent per out-of-place call (traffic counters, max over\n"
        "#   ranks); maxabs, maxrel: largest |error| and |error|/|exact| against the fp64\n"
        "#   reference over the -c 1 calls of both variants and every rank; #wrong: elements\n"
        "#   beyond the bound of docs/compression.md.\n",
        CompressDescribe(o.cz).c_str());
  }
  std::printf("#\n# Using devices\n");
  for (int r = 0; r < run.nranks; ++r) {
    std::printf("#  Rank %2d Group  0 Pid %6d on %10s device  0 [host] CPU\n", r,
                static_cast<int>(all[r].pid), all[r].host);
  }
  std::printf("#\n");
  const bool cz = o.cz.enabled;
  std::printf("# %10s  %12s  %8s  %6s  %6s  %31s  %31s%s\n", "", "", "", "", "", "out-of-place",
              "in-place", cz ? "                     compression" : "");
  std::printf("# %10s  %12s  %8s  %6s  %6s", "size", "count", "type", "redop", "root");
  std::printf("  %7s  %6s  %6s  %6s", "time", "algbw", "busbw", "#wrong");
  std::printf("  %7s  %6s  %6s  %6s", "time", "algbw", "busbw", "#wrong");
  if (cz) std::printf("  %10s  %9s  %9s", "wire(B)", "maxabs", "maxrel");
  std::printf("\n# %10s  %12s  %8s  %6s  %6s", "(B)", "(elements)", "", "", "");
  std::printf("  %7s  %6s  %6s  %6s", "(us)", "(GB/s)", "(GB/s)", "");
  std::printf("  %7s  %6s  %6s  %6s", "(us)", "(GB/s)", "(GB/s)", "");
  if (cz) std::printf("  %10s  %9s  %9s", "", "", "");
  std::printf("\n");
  std::fflush(stdout);
}

// Times and checks one variant (out-of-place or in-place); prints its columns.
void Measure(Run& run, Bench& b, size_t bytes) {
  const Collective& coll = *run.coll;
  coll.set_pointers(&b);
  Barrier(run);
  unsigned long long before[4] = {}, after[4] = {};
  const bool cz = b.compressor != nullptr;
  const bool count = (run.opt.traffic || cz) && !b.in_place && run.be->Traffic(before);
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < run.opt.iters; ++i) Try(run, coll.name, Issue(run, b));
  Sync(run);
  auto t1 = std::chrono::steady_clock::now();
  if (count && run.be->Traffic(after)) {
    run.have_traffic = run.opt.traffic;
    for (int k = 0; k < 4; ++k) run.traffic[k] = (after[k] - before[k]) / run.opt.iters;
  }
  if (cz && !b.in_place) {
    // Bytes sent per call: {all, inter-node}, max and sum over ranks.
    unsigned long long mx[2] = {run.traffic[0] + run.traffic[2], run.traffic[2]};
    unsigned long long sum[2] = {mx[0], mx[1]};
    HostAllReduce(run, mx, 2, tideUint64, tideMax);
    HostAllReduce(run, sum, 2, tideUint64, tideSum);
    run.wire[0] = mx[0], run.wire[1] = sum[0], run.wire[2] = mx[1], run.wire[3] = sum[1];
  }
  double us = std::chrono::duration<double, std::micro>(t1 - t0).count() / run.opt.iters;
  if (run.opt.average != 0) {
    static const tideRedOp_t kAgg[] = {tideSum, tideSum, tideMin, tideMax};
    HostAllReduce(run, &us, 1, tideFloat64, kAgg[run.opt.average]);
    if (run.opt.average == 1) us /= run.nranks;
  }
  uint64_t wrong = 0;
  if (run.opt.check && cz) {
    // A first call of the compressor (residual zero), as the bound assumes.
    b.seed = Mix64(0x7469646570657266ull + run.checks++);
    Try(run, "tideCompressorReset", run.be->CompressorReset(b.compressor));
    CompressPrepare(run.kind, b, b.seed);
    Try(run, coll.name, Issue(run, b));
    Sync(run);
    const CompressCheck c = CompressVerify(run.kind, b, run.opt.cz, run.nodes, b.seed);
    wrong = c.wrong;
    double err[2] = {c.maxabs, c.maxrel};
    HostAllReduce(run, &wrong, 1, tideUint64, tideSum);
    HostAllReduce(run, err, 2, tideFloat64, tideMax);
    run.err[0] = std::max(run.err[0], err[0]);
    run.err[1] = std::max(run.err[1], err[1]);
    run.total_wrong += wrong;
  } else if (run.opt.check) {
    b.seed = Mix64(0x7469646570657266ull + run.checks++);
    Pattern pattern(*b.dt, coll.uses_op ? b.op : kOpNone, run.nranks, b.seed);
    coll.prepare(b, pattern);
    Try(run, coll.name, coll.issue(b));
    Sync(run);
    wrong = coll.check(b, pattern);
    HostAllReduce(run, &wrong, 1, tideUint64, tideSum);
    run.total_wrong += wrong;
  }
  const double algbw = us > 0 ? static_cast<double>(bytes) / 1e9 / (us * 1e-6) : 0;
  const double busbw = algbw * coll.bus_factor(run.nranks);
  run.bw_sum += busbw;
  run.bw_count++;
  if (run.rank != 0) return;
  std::printf("  %7.2f  %6.2f  %6.2f", us, algbw, busbw);
  if (run.opt.check) {
    std::printf("  %6llu", static_cast<unsigned long long>(wrong));
  } else {
    std::printf("  %6s", "N/A");
  }
}

// --compress: a fresh compressor for b's variant, gradient-like input in its
// send buffer, then the warmup calls (the plain path warms up out-of-place only).
void StartCompressed(Run& run, Bench& b) {
  run.coll->set_pointers(&b);
  Try(run, "tideCompressorCreate",
      run.be->CompressorCreate(CompressConfig(run.opt.cz), &b.compressor));
  CompressPrepare(run.kind, b, Mix64(0x74696d696e67ull ^ b.count));
  for (int i = 0; i < run.opt.warmup; ++i) Try(run, run.coll->name, Issue(run, b));
  Sync(run);
}

void EndCompressed(Run& run, Bench& b) {
  Try(run, "tideCompressorDestroy", run.be->CompressorDestroy(b.compressor));
  b.compressor = nullptr;
}

// One size's call description, before the collective sizes it.
Bench BenchOf(const Run& run, const DType* dt, int op, int root, char* send_base, char* recv_base) {
  Bench b;
  b.be = run.be;
  b.rank = run.rank;
  b.nranks = run.nranks;
  b.dt = dt;
  b.op = op;
  b.root = root;
  b.send_base = send_base;
  b.recv_base = recv_base;
  return b;
}

void BenchSize(Run& run, const DType* dt, int op, int root, size_t req_bytes, char* send_base,
               char* recv_base) {
  const Collective& coll = *run.coll;
  Bench b = BenchOf(run, dt, op, root, send_base, recv_base);
  const size_t bytes = coll.sizes(req_bytes, dt->size, run.nranks, &b);
  if (run.rank == 0) {
    std::printf("%12zu  %12zu  %8s  %6s  %6d", bytes, b.count, dt->name,
                coll.uses_op ? OpName(op) : "none", coll.uses_root ? root : -1);
  }
  const bool cz = run.opt.cz.enabled;
  run.err[0] = run.err[1] = 0;
  b.in_place = false;
  if (cz) {
    StartCompressed(run, b);
  } else {
    coll.set_pointers(&b);
    for (int i = 0; i < run.opt.warmup; ++i) Try(run, coll.name, coll.issue(b));
    Sync(run);
  }
  Measure(run, b, bytes);
  if (cz) EndCompressed(run, b);
  if (coll.in_place_ok) {
    b.in_place = true;
    if (cz) StartCompressed(run, b);
    Measure(run, b, bytes);
    if (cz) EndCompressed(run, b);
  } else if (run.rank == 0) {
    std::printf("  %7s  %6s  %6s  %6s", "N/A", "N/A", "N/A", "N/A");
  }
  if (run.rank == 0) {
    if (cz && run.opt.check) {
      std::printf("  %10llu  %9.3g  %9.3g", run.wire[0], run.err[0], run.err[1]);
    } else if (cz) {
      std::printf("  %10llu  %9s  %9s", run.wire[0], "N/A", "N/A");
    }
    std::printf("\n");
    if (run.have_traffic) {
      std::printf(
          "#  traffic %12zu  intra-sent %llu intra-recv %llu inter-sent %llu "
          "inter-recv %llu\n",
          bytes, run.traffic[0], run.traffic[1], run.traffic[2], run.traffic[3]);
      if (cz) {
        std::printf(
            "#  compress %12zu  wire-max %llu wire-sum %llu inter-max %llu inter-sum %llu\n", bytes,
            run.wire[0], run.wire[1], run.wire[2], run.wire[3]);
      }
    }
    std::fflush(stdout);
  }
  run.have_traffic = false;
}

// --compare: every variant of o.compare at one size, alternating in this
// process (out-of-place): a compressor per codec variant made once, warmed
// up, then --rounds rounds of `iters` calls each, the order rotating by one
// per round. Each round's time (mean per call, aggregated over ranks as -a
// says) and bytes sent per call (max over ranks) are printed as
// "#  compare SIZE VARIANT ROUND TIME WIRE" lines, then the medians; -c 1
// then checks each codec's first call against the bound.
void CompareSize(Run& run, const DType* dt, int op, int root, size_t req_bytes, char* send_base,
                 char* recv_base) {
  const Collective& coll = *run.coll;
  const std::vector<std::string>& names = run.opt.compare;
  const size_t nv = names.size();
  Bench b = BenchOf(run, dt, op, root, send_base, recv_base);
  b.in_place = false;
  const size_t bytes = coll.sizes(req_bytes, dt->size, run.nranks, &b);
  coll.set_pointers(&b);
  std::vector<CompressOptions> cz(nv, run.opt.cz);
  std::vector<tideCompressor_t> comp(nv, nullptr);
  for (size_t v = 0; v < nv; ++v) {
    ParseCodec(names[v].c_str(), &cz[v]);
    if (names[v] != "none")
      Try(run, "tideCompressorCreate", run.be->CompressorCreate(CompressConfig(cz[v]), &comp[v]));
  }
  CompressPrepare(run.kind, b, Mix64(0x74696d696e67ull ^ b.count));
  for (size_t v = 0; v < nv; ++v) {
    b.compressor = comp[v];
    for (int i = 0; i < run.opt.warmup; ++i) Try(run, coll.name, Issue(run, b));
  }
  Sync(run);
  std::vector<std::vector<double>> times(nv);
  std::vector<unsigned long long> wire(nv, 0);
  for (int round = 0; round < run.opt.rounds; ++round) {
    for (size_t k = 0; k < nv; ++k) {
      const size_t v = (k + static_cast<size_t>(round)) % nv;
      b.compressor = comp[v];
      Barrier(run);
      unsigned long long before[4] = {}, after[4] = {};
      const bool counted = run.be->Traffic(before);
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < run.opt.iters; ++i) Try(run, coll.name, Issue(run, b));
      Sync(run);
      const auto t1 = std::chrono::steady_clock::now();
      unsigned long long sent = 0;  // read before the harness's own All-Reduces
      if (counted && run.be->Traffic(after))
        sent = (after[0] - before[0] + after[2] - before[2]) / run.opt.iters;
      double us = std::chrono::duration<double, std::micro>(t1 - t0).count() / run.opt.iters;
      if (run.opt.average != 0) {
        static const tideRedOp_t kAgg[] = {tideSum, tideSum, tideMin, tideMax};
        HostAllReduce(run, &us, 1, tideFloat64, kAgg[run.opt.average]);
        if (run.opt.average == 1) us /= run.nranks;
      }
      HostAllReduce(run, &sent, 1, tideUint64, tideMax);
      times[v].push_back(us);
      wire[v] = sent;
      if (run.rank == 0)
        std::printf("#  compare %zu %s %d %.3f %llu\n", bytes, names[v].c_str(), round, us, sent);
    }
  }
  uint64_t wrong = 0;
  for (size_t v = 0; v < nv && run.opt.check; ++v) {
    if (comp[v] == nullptr) continue;
    b.compressor = comp[v];
    b.seed = Mix64(0x7469646570657266ull + run.checks++);
    Try(run, "tideCompressorReset", run.be->CompressorReset(comp[v]));
    CompressPrepare(run.kind, b, b.seed);
    Try(run, coll.name, Issue(run, b));
    Sync(run);
    uint64_t w = CompressVerify(run.kind, b, cz[v], run.nodes, b.seed).wrong;
    HostAllReduce(run, &w, 1, tideUint64, tideSum);
    wrong += w;
  }
  run.total_wrong += wrong;
  for (size_t v = 0; v < nv; ++v)
    if (comp[v] != nullptr) Try(run, "tideCompressorDestroy", run.be->CompressorDestroy(comp[v]));
  if (run.rank != 0) return;
  std::printf("%12zu  %12zu  %8s  %6s", bytes, b.count, dt->name, OpName(op));
  for (size_t v = 0; v < nv; ++v) {
    std::vector<double> t = times[v];
    std::sort(t.begin(), t.end());
    const double median =
        t.size() % 2 ? t[t.size() / 2] : 0.5 * (t[t.size() / 2 - 1] + t[t.size() / 2]);
    std::printf("  %s %.2f us %llu B", names[v].c_str(), median, wire[v]);
  }
  std::printf("  #wrong %llu\n", static_cast<unsigned long long>(wrong));
  std::fflush(stdout);
}

char* AllocTouched(size_t bytes) {
  bytes = (std::max<size_t>(bytes, 64) + 63) / 64 * 64;
  char* p = static_cast<char*>(std::aligned_alloc(64, bytes));
  if (p != nullptr) std::memset(p, 0, bytes);
  return p;
}

}  // namespace

size_t ElemSize(const Bench& b) { return b.dt->size; }

void GarbageRecv(const Bench& b) { FillGarbage(b.recv_base, b.recv_count * b.dt->size, b.seed); }

void SamePointerInPlace(Bench* b) {
  b->recv = b->recv_base;
  b->send = b->in_place ? b->recv_base : b->send_base;
}

int PerfMain(int argc, char** argv, const Collective& coll, CompressKind compress) {
#ifdef TIDE_PERF_MPI
  Backend* be = MpiBackend();
#else
  static TideBackend tide_backend;
  Backend* be = &tide_backend;
#endif
  Run run;
  run.coll = &coll;
  run.be = be;
  run.kind = compress;
  run.rank = GuessRank();
  const int parsed = ParseOptions(argc, argv, run.rank <= 0, *be, compress, &run.opt);
  if (parsed >= 0) return parsed;
  for (std::string& n : be->Notes(run.opt.blocking != 0)) run.opt.notes.push_back(std::move(n));
  Try(run, "init", be->Init(run.opt.blocking != 0, &run.rank, &run.nranks));
  const Options& o = run.opt;
  if (coll.uses_root && o.root >= run.nranks) {
    if (run.rank == 0) {
      std::fprintf(stderr, "%s: root %d is not a rank (%d ranks)\n", argv[0], o.root, run.nranks);
    }
    be->Finalize();
    return 1;
  }
  PrintHeader(run);
  if (o.cz.enabled) {
    std::vector<uint64_t> keys(static_cast<size_t>(run.nranks));
    const uint64_t mine = CompressNodeKey();
    Try(run, "AllGather (nodes)", be->HostAllGather(&mine, keys.data(), sizeof(mine)));
    run.nodes = CompressNodesOf(keys);
  }

  char* send_base = AllocTouched(o.max_bytes);
  char* recv_base = AllocTouched(o.max_bytes);
  if (send_base == nullptr || recv_base == nullptr) {
    std::fprintf(stderr, "%s: rank %d: cannot allocate 2 x %zu bytes\n", argv[0], run.rank,
                 o.max_bytes);
    be->Abort();
    return 2;
  }
  std::vector<int> ops = coll.uses_op ? o.ops : std::vector<int>{kOpNone};
  std::vector<int> roots;
  if (!coll.uses_root) {
    roots.push_back(-1);
  } else if (o.root < 0) {
    for (int r = 0; r < run.nranks; ++r) roots.push_back(r);
  } else {
    roots.push_back(o.root);
  }
  for (const DType* dt : o.types) {
    for (int op : ops) {
      for (int root : roots) {
        size_t size = o.min_bytes;
        while (true) {
          if (o.compare.empty())
            BenchSize(run, dt, op, root, size, send_base, recv_base);
          else
            CompareSize(run, dt, op, root, size, send_base, recv_base);
          const size_t next = o.step_by_factor ? size * o.step_factor : size + o.step_bytes;
          if (next <= size || next > o.max_bytes) break;
          size = next;
        }
      }
    }
  }
  Sync(run);
  const double avg_bw = run.bw_count ? run.bw_sum / run.bw_count : 0;
  if (run.rank == 0) {
    std::printf("# Out of bounds values : %llu %s\n",
                static_cast<unsigned long long>(run.total_wrong),
                run.total_wrong ? "FAILED" : "OK");
    std::printf("# Avg bus bandwidth    : %g \n", avg_bw);
    std::printf("#\n");
    std::fflush(stdout);
  }
  Try(run, "finalize", be->Finalize());
  std::free(send_base);
  std::free(recv_base);
  return run.total_wrong ? 1 : 0;
}

}  // namespace tide_perf
