#include "common/options.h"

#include <getopt.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/parse.h"

namespace tide_perf {
namespace {

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
      "  --compress <codec>      none fp16 bf16 int8 int4 topk:RATIO auto: call the\n"
      "                          compressed collective (all_reduce, reduce_scatter,\n"
      "                          all_gather; float bfloat16 half; sum avg), one fresh\n"
      "                          compressor per size and variant; adds the columns\n"
      "                          wire(B) maxabs maxrel; -c 1 checks docs/compression.md's\n"
      "                          bound\n"
      "  --block <n>             int8/int4 elements per scale (1..2^20). Default 256\n"
      "  --feedback <0/1>        error feedback in the compressors. Default 0\n"
      "  --stochastic <0/1>      stochastic rounding (int8/int4). Default 0\n"
      "  --compare <a,b,...>     per size, time these variants alternately in this one\n"
      "                          process (none: the plain collective; else a --compress\n"
      "                          codec), --rounds rounds rotating their order; prints\n"
      "                          '#  compare SIZE VARIANT ROUND TIME(us) WIRE(B)' lines\n"
      "                          and each variant's median (out-of-place only)\n"
      "  --rounds <n>            rounds of --compare. Default 5\n"
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

}  // namespace

int GuessRank() {
  for (const char* var :
       {"TIDE_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "RANK", "SLURM_PROCID"}) {
    const char* v = std::getenv(var);
    if (v != nullptr && *v != '\0') return std::atoi(v);
  }
  return -1;
}

int ParseOptions(int argc, char** argv, bool printer, const Backend& be, CompressKind kind,
                 Options* o) {
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
                                        {"compress", kArg, nullptr, 1001},
                                        {"block", kArg, nullptr, 1002},
                                        {"feedback", kArg, nullptr, 1003},
                                        {"stochastic", kArg, nullptr, 1004},
                                        {"compare", kArg, nullptr, 1005},
                                        {"rounds", kArg, nullptr, 1006},
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
      case 1001:
        if (!ParseCodec(optarg, &o->cz)) return bad("compress", optarg);
        break;
      case 1002:
        if (!ParseInt(optarg, 1, 1 << 20, &o->cz.block)) return bad("block", optarg);
        o->cz.extras_given = true;
        break;
      case 1003:
        if (!ParseInt(optarg, 0, 1, &o->cz.feedback)) return bad("feedback", optarg);
        o->cz.extras_given = true;
        break;
      case 1004:
        if (!ParseInt(optarg, 0, 1, &o->cz.stochastic)) return bad("stochastic", optarg);
        o->cz.extras_given = true;
        break;
      case 1005: {
        o->compare.clear();
        std::string list = optarg;
        for (size_t at = 0; at <= list.size();) {
          const size_t end = std::min(list.find(',', at), list.size());
          const std::string item = list.substr(at, end - at);
          CompressOptions probe;
          if (item.empty() || !ParseCodec(item.c_str(), &probe)) return bad("compare", optarg);
          o->compare.push_back(item);
          at = end + 1;
        }
        break;
      }
      case 1006:
        if (!ParseInt(optarg, 1, 1000, &o->rounds)) return bad("rounds", optarg);
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
        o->notes.emplace_back("-m (aggregated iterations) is ignored: each call is timed alone");
        break;
      case 'G':
        o->notes.emplace_back("-G (CUDA graphs) is ignored: host buffers have no graphs");
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
  if (!o->compare.empty() && !o->cz.enabled) {
    // The variants' codecs: --compress's type and op rules, its header.
    o->cz.enabled = true;
    o->cz.spec = "none";
  }
  if (o->cz.extras_given && !o->cz.enabled) {
    if (printer)
      std::fprintf(stderr, "%s: --block, --feedback and --stochastic need --compress\n", argv[0]);
    return 1;
  }
  // Why `t` and `op` cannot run: the backend's reason, or with --compress the
  // compressed collectives'.
  auto unsupported = [&](const DType& t, int op) {
    const char* why = be.Unsupported(t, op);
    if (why == nullptr && o->cz.enabled) {
      why = CompressUnsupported(kind, be, t, kind == CompressKind::kAllGather ? kOpNone : op);
    }
    return why;
  };
  if (o->cz.enabled && (!be.CanCompress() || kind == CompressKind::kNone)) {
    if (printer) {
      std::fprintf(stderr, "%s: --compress: %s\n", argv[0],
                   CompressUnsupported(kind, be, *AllDTypes().front(), kOpNone));
    }
    return 1;
  }
  // "all" means every type (op) the backend supports; naming an unsupported
  // one is an error.
  std::string skipped;
  if (type_arg == "all") {
    for (const DType* t : AllDTypes()) {
      if (unsupported(*t, kOpNone) == nullptr) {
        o->types.push_back(t);
      } else {
        skipped += std::string(" ") + t->name;
      }
    }
  } else {
    const DType* t = FindDType(type_arg);
    if (t == nullptr) return bad("datatype", type_arg.c_str());
    if (const char* why = unsupported(*t, kOpNone)) {
      if (printer) std::fprintf(stderr, "%s: datatype %s: %s\n", argv[0], t->name, why);
      return 1;
    }
    o->types.push_back(t);
  }
  if (op_arg == "all") {
    for (int op : AllOps()) {
      if (unsupported(*o->types.front(), op) == nullptr) {
        o->ops.push_back(op);
      } else {
        skipped += std::string(" ") + OpName(op);
      }
    }
  } else {
    int op = FindOp(op_arg);
    if (op < 0) return bad("op", op_arg.c_str());
    if (const char* why = unsupported(*o->types.front(), op)) {
      if (printer) std::fprintf(stderr, "%s: op %s: %s\n", argv[0], op_arg.c_str(), why);
      return 1;
    }
    o->ops.push_back(op);
  }
  if (!skipped.empty()) {
    o->notes.push_back(std::string("'all' skips what the ") + be.Name() + " backend" +
                       (o->cz.enabled ? " (compressed)" : "") + " cannot run:" + skipped);
  }
  return -1;
}
}  // namespace tide_perf
