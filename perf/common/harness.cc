#include "common/harness.h"

#include <getopt.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/parse.h"

#ifdef TIDE_PERF_MPI
namespace tide_perf {
Backend* MpiBackend();  // perf/mpi/mpi_backend.cc
}  // namespace tide_perf
#else
#include "common/tide_backend.h"
#endif

namespace tide_perf {
namespace {

struct Options {
  size_t min_bytes = 32u << 20;
  size_t max_bytes = 32u << 20;
  size_t step_bytes = 1u << 20;
  size_t step_factor = 1;
  bool step_by_factor = false;
  int iters = 20;
  int warmup = 1;
  int check = 1;
  int blocking = 0;
  int average = 1;
  std::vector<const DType*> types;
  std::vector<int> ops;
  int root = 0;  // -1: every root
  bool traffic = false;
  std::vector<std::string> notes;
};

// Rank 0 of the job prints; before the communicator exists the launcher's
// environment tells which process that is. Returns -1 when unknown (then
// every process prints).
int GuessRank() {
  for (const char* var :
       {"TIDE_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "RANK", "SLURM_PROCID"}) {
    const char* v = std::getenv(var);
    if (v != nullptr && *v != '\0') return std::atoi(v);
  }
  return -1;
}

void Usage(const char* prog) {
  std::printf(
      "Usage: %s [options]\n"
      "  -b, --minbytes <n>      smallest size in bytes (K/M/G suffixes). Default 32M\n"
      "  -e, --maxbytes <n>      largest size in bytes. Default 32M\n"
      "  -i, --stepbytes <n>     add this many bytes between sizes. Default 1M\n"
      "  -f, --stepfactor <n>    multiply sizes by this factor (excludes -i)\n"
      "  -n, --iters <n>         timed iterations. Default 20\n"
      "  -w, --warmup_iters <n>  warmup iterations. Default 1\n"
      "  -c, --check <0/1>       check results. Default 1\n"
      "  -d, --datatype <type>   int8 uint8 int32 uint32 int64 uint64 half float double\n"
      "                          bfloat16 f8e4m3 f8e5m2, or all. Default float\n"
      "  -o, --op <op>           sum prod max min avg, or all. Default sum\n"
      "  -r, --root <n>          root rank, or all. Default 0\n"
      "  -z, --blocking <0/1>    1: every call completes before returning (NULL stream);\n"
      "                          0: calls go to a host stream, synchronized after the loop.\n"
      "                          Default 0\n"
      "  -a, --average <0..3>    report time of rank 0 / average / min / max. Default 1\n"
      "  -t, --nthreads <1>      threads per process (only 1)\n"
      "  -g, --ngpus <1>         devices per thread (only 1)\n"
      "  -m, --agg_iters <n>     accepted and ignored\n"
      "  -G, --cudagraph <n>     accepted and ignored\n"
      "  --traffic               after each size, print this rank's payload bytes per\n"
      "                          out-of-place call by link class (intra-/inter-node)\n"
      "  -h, --help              this text\n"
      "Ranks come from the launcher (tiderun, mpirun, torchrun); alone it runs 1 rank.\n",
      prog);
}

bool ParseInt(const char* s, int lo, int hi, int* out) {
  size_t v;
  if (!ParseSize(s, &v) || v < static_cast<size_t>(lo) || v > static_cast<size_t>(hi)) {
    return false;
  }
  *out = static_cast<int>(v);
  return true;
}

// Returns -1 to continue, else an exit status.
int ParseOptions(int argc, char** argv, bool printer, const Backend& be, Options* o) {
  constexpr int kArg = required_argument;
  static const struct option kLong[] = {{"nthreads", kArg, nullptr, 't'},
                                        {"ngpus", kArg, nullptr, 'g'},
                                        {"minbytes", kArg, nullptr, 'b'},
                                        {"maxbytes", kArg, nullptr, 'e'},
                                        {"stepbytes", kArg, nullptr, 'i'},
                                        {"stepfactor", kArg, nullptr, 'f'},
                                        {"iters", kArg, nullptr, 'n'},
                                        {"agg_iters", kArg, nullptr, 'm'},
                                        {"warmup_iters", kArg, nullptr, 'w'},
                                        {"check", kArg, nullptr, 'c'},
                                        {"op", kArg, nullptr, 'o'},
                                        {"datatype", kArg, nullptr, 'd'},
                                        {"root", kArg, nullptr, 'r'},
                                        {"blocking", kArg, nullptr, 'z'},
                                        {"average", kArg, nullptr, 'a'},
                                        {"cudagraph", kArg, nullptr, 'G'},
                                        {"help", no_argument, nullptr, 'h'},
                                        {"traffic", no_argument, nullptr, 1000},
                                        {nullptr, 0, nullptr, 0}};
  std::string type_arg = "float", op_arg = "sum";
  bool saw_i = false, saw_f = false;
  auto bad = [&](const char* what, const char* val) {
    if (printer) std::fprintf(stderr, "%s: invalid %s '%s' (see -h)\n", argv[0], what, val);
    return 1;
  };
  int c, v;
  opterr = printer ? 1 : 0;
  while ((c = getopt_long(argc, argv, "t:g:b:e:i:f:n:m:w:c:o:d:r:z:a:G:h", kLong, nullptr)) != -1) {
    switch (c) {
      case 't':
      case 'g':
        if (!ParseInt(optarg, 1, 1, &v)) {
          if (printer) {
            std::fprintf(stderr,
                         "%s: -%c %s is not supported: Tide perf tools run one rank per "
                         "process with one thread; launch more ranks with tiderun -n N\n",
                         argv[0], c, optarg);
          }
          return 1;
        }
        break;
      case 'b':
        if (!ParseSize(optarg, &o->min_bytes)) return bad("minbytes", optarg);
        break;
      case 'e':
        if (!ParseSize(optarg, &o->max_bytes)) return bad("maxbytes", optarg);
        break;
      case 'i':
        if (!ParseSize(optarg, &o->step_bytes)) return bad("stepbytes", optarg);
        saw_i = true;
        break;
      case 'f':
        if (!ParseSize(optarg, &o->step_factor) || o->step_factor < 1) {
          return bad("stepfactor", optarg);
        }
        saw_f = true;
        break;
      case 'n':
        if (!ParseInt(optarg, 1, 1 << 30, &o->iters)) return bad("iters", optarg);
        break;
      case 'w':
        if (!ParseInt(optarg, 0, 1 << 30, &o->warmup)) return bad("warmup", optarg);
        break;
      case 'c':
        if (!ParseInt(optarg, 0, 1, &o->check)) return bad("check", optarg);
        break;
      case 'z':
        if (!ParseInt(optarg, 0, 1, &o->blocking)) return bad("blocking", optarg);
        break;
      case 'a':
        if (!ParseInt(optarg, 0, 3, &o->average)) return bad("average", optarg);
        break;
      case 'o':
        op_arg = optarg;
        break;
      case 1000:
        o->traffic = true;
        break;
      case 'd':
        type_arg = optarg;
        break;
      case 'r':
        if (std::strcmp(optarg, "all") == 0 || std::strcmp(optarg, "-1") == 0) {
          o->root = -1;
        } else if (!ParseInt(optarg, 0, 1 << 30, &o->root)) {
          return bad("root", optarg);
        }
        break;
      case 'm':
        o->notes.push_back("-m (aggregated iterations) is ignored: each call is timed alone");
        break;
      case 'G':
        o->notes.push_back("-G (CUDA graphs) is ignored: host buffers have no graphs");
        break;
      case 'h':
        if (printer) Usage(argv[0]);
        return 0;
      default:
        if (printer) Usage(argv[0]);
        return 1;
    }
  }
  if (optind < argc) return bad("argument", argv[optind]);
  if (saw_i && saw_f) {
    if (printer) std::fprintf(stderr, "%s: -i and -f are mutually exclusive\n", argv[0]);
    return 1;
  }
  o->step_by_factor = saw_f && o->step_factor > 1;
  if (o->min_bytes > o->max_bytes) {
    if (printer) std::fprintf(stderr, "%s: minbytes is larger than maxbytes\n", argv[0]);
    return 1;
  }
  // "all" means every type (op) the backend supports; naming an unsupported
  // one is an error.
  std::string skipped;
  if (type_arg == "all") {
    for (const DType* t : AllDTypes()) {
      if (be.Unsupported(*t, kOpNone) == nullptr) {
        o->types.push_back(t);
      } else {
        skipped += std::string(" ") + t->name;
      }
    }
  } else {
    const DType* t = FindDType(type_arg);
    if (t == nullptr) return bad("datatype", type_arg.c_str());
    if (const char* why = be.Unsupported(*t, kOpNone)) {
      if (printer) std::fprintf(stderr, "%s: datatype %s: %s\n", argv[0], t->name, why);
      return 1;
    }
    o->types.push_back(t);
  }
  if (op_arg == "all") {
    for (int op : AllOps()) {
      if (be.Unsupported(*o->types.front(), op) == nullptr) {
        o->ops.push_back(op);
      } else {
        skipped += std::string(" ") + OpName(op);
      }
    }
  } else {
    int op = FindOp(op_arg);
    if (op < 0) return bad("op", op_arg.c_str());
    if (const char* why = be.Unsupported(*o->types.front(), op)) {
      if (printer) std::fprintf(stderr, "%s: op %s: %s\n", argv[0], op_arg.c_str(), why);
      return 1;
    }
    o->ops.push_back(op);
  }
  if (!skipped.empty()) {
    o->notes.push_back(std::string("'all' skips what the ") + be.Name() +
                       " backend cannot run:" + skipped);
  }
  return -1;
}

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
  std::printf("#\n# Using devices\n");
  for (int r = 0; r < run.nranks; ++r) {
    std::printf("#  Rank %2d Group  0 Pid %6d on %10s device  0 [host] CPU\n", r,
                static_cast<int>(all[r].pid), all[r].host);
  }
  std::printf("#\n");
  std::printf("# %10s  %12s  %8s  %6s  %6s  %31s  %31s\n", "", "", "", "", "", "out-of-place",
              "in-place");
  std::printf("# %10s  %12s  %8s  %6s  %6s", "size", "count", "type", "redop", "root");
  std::printf("  %7s  %6s  %6s  %6s", "time", "algbw", "busbw", "#wrong");
  std::printf("  %7s  %6s  %6s  %6s\n", "time", "algbw", "busbw", "#wrong");
  std::printf("# %10s  %12s  %8s  %6s  %6s", "(B)", "(elements)", "", "", "");
  std::printf("  %7s  %6s  %6s  %6s", "(us)", "(GB/s)", "(GB/s)", "");
  std::printf("  %7s  %6s  %6s  %6s\n", "(us)", "(GB/s)", "(GB/s)", "");
  std::fflush(stdout);
}

// Times and checks one variant (out-of-place or in-place); prints its columns.
void Measure(Run& run, Bench& b, size_t bytes) {
  const Collective& coll = *run.coll;
  coll.set_pointers(&b);
  Barrier(run);
  unsigned long long before[4] = {}, after[4] = {};
  const bool count = run.opt.traffic && !b.in_place && run.be->Traffic(before);
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < run.opt.iters; ++i) Try(run, coll.name, coll.issue(b));
  Sync(run);
  auto t1 = std::chrono::steady_clock::now();
  if (count && run.be->Traffic(after)) {
    run.have_traffic = true;
    for (int k = 0; k < 4; ++k) run.traffic[k] = (after[k] - before[k]) / run.opt.iters;
  }
  double us = std::chrono::duration<double, std::micro>(t1 - t0).count() / run.opt.iters;
  if (run.opt.average != 0) {
    static const tideRedOp_t kAgg[] = {tideSum, tideSum, tideMin, tideMax};
    HostAllReduce(run, &us, 1, tideFloat64, kAgg[run.opt.average]);
    if (run.opt.average == 1) us /= run.nranks;
  }
  uint64_t wrong = 0;
  if (run.opt.check) {
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

void BenchSize(Run& run, const DType* dt, int op, int root, size_t req_bytes, char* send_base,
               char* recv_base) {
  const Collective& coll = *run.coll;
  Bench b;
  b.be = run.be;
  b.rank = run.rank;
  b.nranks = run.nranks;
  b.dt = dt;
  b.op = op;
  b.root = root;
  b.send_base = send_base;
  b.recv_base = recv_base;
  const size_t bytes = coll.sizes(req_bytes, dt->size, run.nranks, &b);
  if (run.rank == 0) {
    std::printf("%12zu  %12zu  %8s  %6s  %6d", bytes, b.count, dt->name,
                coll.uses_op ? OpName(op) : "none", coll.uses_root ? root : -1);
  }
  b.in_place = false;
  coll.set_pointers(&b);
  for (int i = 0; i < run.opt.warmup; ++i) Try(run, coll.name, coll.issue(b));
  Sync(run);
  Measure(run, b, bytes);
  if (coll.in_place_ok) {
    b.in_place = true;
    Measure(run, b, bytes);
  } else if (run.rank == 0) {
    std::printf("  %7s  %6s  %6s  %6s", "N/A", "N/A", "N/A", "N/A");
  }
  if (run.rank == 0) {
    std::printf("\n");
    if (run.have_traffic) {
      std::printf(
          "#  traffic %12zu  intra-sent %llu intra-recv %llu inter-sent %llu "
          "inter-recv %llu\n",
          bytes, run.traffic[0], run.traffic[1], run.traffic[2], run.traffic[3]);
    }
    std::fflush(stdout);
  }
  run.have_traffic = false;
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

int PerfMain(int argc, char** argv, const Collective& coll) {
#ifdef TIDE_PERF_MPI
  Backend* be = MpiBackend();
#else
  static TideBackend tide_backend;
  Backend* be = &tide_backend;
#endif
  Run run;
  run.coll = &coll;
  run.be = be;
  run.rank = GuessRank();
  const int parsed = ParseOptions(argc, argv, run.rank <= 0, *be, &run.opt);
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
          BenchSize(run, dt, op, root, size, send_base, recv_base);
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
