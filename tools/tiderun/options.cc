#include "options.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string_view>

namespace tiderun {
namespace {

// Largest rank count per node and node count accepted (keeps pipes and
// process counts sane; far above what one machine runs).
constexpr int kMaxProcs = 4096;
constexpr int kMaxNodes = 1 << 20;
constexpr int kMaxRestarts = 1000000;

bool ParseInt(std::string_view text, long lo, long hi, int* out) {
  std::string s(text);
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(s.c_str(), &end, 10);
  if (errno != 0 || end == s.c_str() || *end != '\0' || v < lo || v > hi) return false;
  *out = static_cast<int>(v);
  return true;
}

bool ParseSeconds(std::string_view text, double* out) {
  std::string s(text);
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(s.c_str(), &end);
  if (errno != 0 || end == s.c_str() || *end != '\0' || !std::isfinite(v) || v < 0) return false;
  *out = v;
  return true;
}

enum class Opt {
  kNproc,
  kNnodes,
  kNodeRank,
  kMasterAddr,
  kMasterPort,
  kTimeout,
  kMaxRestarts,
  kPrefix,
  kHelp,
  kVersion,
  kUnknown
};

// Maps a long option name (without "--", '_' already turned into '-').
Opt LongOpt(std::string_view name) {
  if (name == "nproc-per-node" || name == "np") return Opt::kNproc;
  if (name == "nnodes") return Opt::kNnodes;
  if (name == "node-rank") return Opt::kNodeRank;
  if (name == "master-addr") return Opt::kMasterAddr;
  if (name == "master-port") return Opt::kMasterPort;
  if (name == "timeout") return Opt::kTimeout;
  if (name == "max-restarts") return Opt::kMaxRestarts;
  if (name == "prefix-output" || name == "tag-output") return Opt::kPrefix;
  if (name == "help") return Opt::kHelp;
  if (name == "version") return Opt::kVersion;
  return Opt::kUnknown;
}

bool TakesValue(Opt o) { return o != Opt::kPrefix && o != Opt::kHelp && o != Opt::kVersion; }

// Applies one option with its value; false with *error set when the value is bad.
bool Apply(Opt o, const std::string& shown, std::string_view value, Options* opts,
           std::string* error) {
  auto bad = [&](const char* what) {
    *error = "invalid value '" + std::string(value) + "' for " + shown + ": expected " + what;
    return false;
  };
  switch (o) {
    case Opt::kNproc:
      return ParseInt(value, 1, kMaxProcs, &opts->nproc) || bad("a rank count between 1 and 4096");
    case Opt::kNnodes:
      return ParseInt(value, 1, kMaxNodes, &opts->nnodes) || bad("a positive node count");
    case Opt::kNodeRank:
      return ParseInt(value, 0, kMaxNodes - 1, &opts->node_rank) ||
             bad("a non-negative node index");
    case Opt::kMasterAddr:
      if (value.empty()) return bad("a host name or address");
      opts->master_addr = std::string(value);
      return true;
    case Opt::kMasterPort:
      return ParseInt(value, 0, 65535, &opts->master_port) || bad("a port number (0-65535)");
    case Opt::kTimeout:
      return ParseSeconds(value, &opts->timeout_s) || bad("a non-negative number of seconds");
    case Opt::kMaxRestarts:
      return ParseInt(value, 0, kMaxRestarts, &opts->max_restarts) ||
             bad("a restart count between 0 and 1000000");
    case Opt::kPrefix:
      opts->prefix_output = true;
      return true;
    default:
      return true;
  }
}

}  // namespace

ParseOutcome ParseOptions(int argc, const char* const* argv, Options* opts, std::string* error) {
  int i = 1;
  bool help = false;
  bool version = false;
  for (; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') break;  // first non-option: the program
    Opt o;
    std::string shown;
    std::string_view value;
    bool inline_value = false;
    if (arg[1] == '-') {
      std::string_view body = arg.substr(2);
      size_t eq = body.find('=');
      std::string name(body.substr(0, eq));
      for (char& c : name) {
        if (c == '_') c = '-';
      }
      if (eq != std::string_view::npos) {
        value = body.substr(eq + 1);
        inline_value = true;
      }
      shown = "--" + name;
      o = LongOpt(name);
    } else {
      shown = std::string(arg.substr(0, 2));
      switch (arg[1]) {
        case 'n':
          o = Opt::kNproc;
          break;
        case 'h':
          o = Opt::kHelp;
          break;
        default:
          o = Opt::kUnknown;
          break;
      }
      if (arg.size() > 2) {
        value = arg.substr(2);
        if (!value.empty() && value[0] == '=') value = value.substr(1);
        inline_value = true;
      }
    }
    if (o == Opt::kUnknown) {
      *error = "unknown option '" + std::string(arg) + "' (see tiderun --help)";
      return ParseOutcome::kError;
    }
    if (TakesValue(o)) {
      if (!inline_value) {
        if (i + 1 >= argc) {
          *error = "option " + shown + " needs a value";
          return ParseOutcome::kError;
        }
        value = argv[++i];
      }
    } else if (inline_value) {
      *error = "option " + shown + " takes no value";
      return ParseOutcome::kError;
    }
    if (o == Opt::kHelp) help = true;
    if (o == Opt::kVersion) version = true;
    if (!Apply(o, shown, value, opts, error)) return ParseOutcome::kError;
  }
  if (help) return ParseOutcome::kHelp;
  if (version) return ParseOutcome::kVersion;
  for (; i < argc; ++i) opts->command.emplace_back(argv[i]);
  if (opts->command.empty()) {
    *error = "no program given (usage: tiderun [options] program [args...])";
    return ParseOutcome::kError;
  }
  if (opts->node_rank >= opts->nnodes) {
    *error = "--node-rank " + std::to_string(opts->node_rank) + " is not below --nnodes " +
             std::to_string(opts->nnodes);
    return ParseOutcome::kError;
  }
  if (opts->max_restarts > 0 && opts->nnodes > 1) {
    // The tiderun processes of a multi-node job do not talk to each other:
    // one node could not make the others stop and meet again.
    *error =
        "--max-restarts needs a single-node job (--nnodes 1): the nodes' tiderun processes do "
        "not coordinate, so one node cannot restart the others";
    return ParseOutcome::kError;
  }
  if (static_cast<long long>(opts->nproc) * opts->nnodes > 0x7fffffffLL) {
    *error = "--nnodes times --nproc-per-node is too large";
    return ParseOutcome::kError;
  }
  return ParseOutcome::kRun;
}

std::string UsageText() {
  return "usage: tiderun [options] [--] program [args...]\n"
         "\n"
         "Starts the ranks of a Tide job on this node. Each rank runs `program args...`\n"
         "with TIDE_RANK, TIDE_WORLD_SIZE, TIDE_LOCAL_RANK, TIDE_LOCAL_WORLD_SIZE,\n"
         "TIDE_NODE_RANK, TIDE_NNODES, TIDE_MASTER_ADDR, TIDE_MASTER_PORT, TIDE_JOB_ID,\n"
         "TIDE_RESTART_COUNT and (single-node jobs) TIDE_SECRET set. Global rank =\n"
         "node_rank * nproc + local.\n"
         "torchrun's variables are set too, so PyTorch scripts start as under torchrun:\n"
         "RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, ROLE_RANK,\n"
         "ROLE_WORLD_SIZE, TORCHELASTIC_RESTART_COUNT, MASTER_ADDR and MASTER_PORT (the\n"
         "port of PyTorch's store: an exported MASTER_PORT, else on several nodes the\n"
         "port after TIDE_MASTER_PORT, else another free port).\n"
         "\n"
         "options:\n"
         "  -n, --np, --nproc-per-node N  ranks on this node (default 1)\n"
         "  --nnodes N                    nodes in the job (default 1); run one tiderun\n"
         "                                per node with the same master address and port\n"
         "  --node-rank R                 index of this node, 0 <= R < nnodes (default 0)\n"
         "  --master-addr ADDR            address of the bootstrap root (default 127.0.0.1)\n"
         "  --master-port PORT            its port (default: 29500 with --nnodes > 1,\n"
         "                                otherwise a free port)\n"
         "  --prefix-output, --tag-output prefix every output line with \"[rank] \"\n"
         "  --timeout SEC                 stop all ranks and exit 124 after SEC seconds\n"
         "                                (0: no limit, the default); with restarts, each\n"
         "                                attempt gets SEC seconds, and a timeout is not\n"
         "                                restarted\n"
         "  --max-restarts N              restart the whole job up to N times when a rank\n"
         "                                fails (default 0; single-node jobs only)\n"
         "  -h, --help                    show this text\n"
         "  --version                     show the version\n"
         "Underscores may replace dashes in long options (--nproc_per_node).\n"
         "\n"
         "When a rank fails (non-zero exit or signal) the others get SIGTERM, then SIGKILL\n"
         "1 s later, and tiderun exits with the failing rank's code (128+signal for a\n"
         "signal). SIGINT/SIGTERM/SIGHUP to tiderun are forwarded the same way (exit\n"
         "128+signal). Leftover /dev/shm/tide-<TIDE_JOB_ID>* files are removed at exit.\n"
         "\n"
         "--max-restarts N: when a rank fails and fewer than N restarts happened, the\n"
         "others are stopped as above and, once all are gone, tiderun prints one line\n"
         "  tiderun: restarting the job (restart K of N): rank R exited with status S\n"
         "(or \"rank R was killed by signal S (SIGNAME)\") and starts every rank again\n"
         "with TIDE_RESTART_COUNT=K (0 on the first start) and a fresh rendezvous: a new\n"
         "TIDE_JOB_ID, a new TIDE_SECRET (unless exported) and a new free\n"
         "TIDE_MASTER_PORT (unless --master-port fixes it). When the restarts are used\n"
         "up, tiderun exits with the failure as without them. A signal to tiderun, a\n"
         "timeout or a program that cannot be started never causes a restart.\n"
         "\n"
         "TIDE_SECRET is generated for single-node jobs unless already set; multi-node\n"
         "jobs pass it through only when set (export the same value on every node).\n"
         "Ranks run in their own process groups; when tiderun's stdin is a terminal\n"
         "they read stdin from /dev/null.\n";
}

}  // namespace tiderun
