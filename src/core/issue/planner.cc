// The planner (core/issue/planner.h): routes and the algorithm table's choice.
#include "core/issue/planner.h"

#include <strings.h>

#include <cstdint>
#include <cstdio>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/codec.h"
#include "core/comm.h"
#include "core/config.h"
#include "core/device/device_stream.h"
#include "core/log.h"
#include "core/registry.h"
#include "cuda/device_algo_choice.h"

namespace tide {

const char* routeName(Route r) {
  switch (r) {
    case Route::kP2p:
      return "p2p";
    case Route::kLane:
      return "lane";
    case Route::kHost:
      return "host";
    case Route::kHostStaged:
      return "host-staged";
    case Route::kHostStagedChunks:
      return "host-staged-chunks";
    case Route::kDevice:
      return "device";
  }
  return "invalid";
}

namespace {

// ---- Algorithm choice ------------------------------------------------------------

void warnOnce(const std::string& msg) {
  static std::mutex mu;
  static std::set<std::string> seen;
  std::lock_guard<std::mutex> lock(mu);
  if (seen.insert(msg).second) TIDE_WARN("%s", msg.c_str());
}

const AlgorithmInfo* findAlgo(const std::string& name, CollType t) {
  for (const AlgorithmInfo* a : registeredAlgorithms()) {
    if (strcasecmp(a->name, name.c_str()) == 0 && (a->collMask & collBit(t))) return a;
  }
  return nullptr;
}

bool knownAlgoName(const std::string& name) {
  for (const AlgorithmInfo* a : registeredAlgorithms()) {
    if (strcasecmp(a->name, name.c_str()) == 0) return true;
  }
  return false;
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t");
  size_t e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

// Splits "allreduce:ring;broadcast:ring" or "ring" into (coll or "", name).
std::vector<std::pair<std::string, std::string>> parseSpec(const std::string& spec) {
  std::vector<std::pair<std::string, std::string>> out;
  size_t pos = 0;
  while (pos <= spec.size()) {
    size_t end = spec.find(';', pos);
    std::string item = trim(spec.substr(pos, end == std::string::npos ? end : end - pos));
    if (!item.empty()) {
      size_t colon = item.find(':');
      if (colon == std::string::npos) {
        out.emplace_back("", item);
      } else {
        out.emplace_back(trim(item.substr(0, colon)), trim(item.substr(colon + 1)));
      }
    }
    if (end == std::string::npos) break;
    pos = end + 1;
  }
  return out;
}

bool collFromName(const std::string& name, CollType* out) {
  for (int t = 0; t < static_cast<int>(CollType::Send); ++t) {
    if (strcasecmp(name.c_str(), collName(static_cast<CollType>(t))) == 0) {
      *out = static_cast<CollType>(t);
      return true;
    }
  }
  return false;
}

// Logs the cost model's table for a call shape once per communicator (at
// TIDE_DEBUG=INFO): every candidate's predicted time and the choice.
void logChoice(const CollArgs& args, const tideComm* comm, const std::string& table,
               const AlgorithmInfo* chosen) {
  static std::mutex mu;
  static std::set<std::tuple<uint64_t, int, size_t, int>> seen;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto key = std::make_tuple(comm->commHash, static_cast<int>(args.type), args.count,
                               static_cast<int>(args.dtype));
    if (!seen.insert(key).second) return;
  }
  TIDE_INFO("choice: %s %zu x %s on %d ranks / %d nodes:%s -> %s", collName(args.type), args.count,
            dtypeName(args.dtype), comm->nranks, comm->topo.nnodes, table.c_str(),
            chosen ? chosen->name : "none");
}

// The cost model's choice: the supporting algorithm with the smallest
// predicted time; unmodelled ones only when no modelled one supports the call.
const AlgorithmInfo* autoAlgo(const CollArgs& args, const tideComm* comm) {
  const AlgorithmInfo* best = nullptr;
  const AlgorithmInfo* fallback = nullptr;
  double bestUs = 0;
  const bool log = logLevel() >= LogLevel::Info;
  std::string table;
  for (const AlgorithmInfo* a : registeredAlgorithms()) {
    if (!(a->collMask & collBit(args.type)) || a->mem != args.mem || !a->servesCodec(args.codec))
      continue;
    if (a->supports != nullptr && !a->supports(args, comm->nranks)) continue;
    if (a->predictUs == nullptr) {
      if (fallback == nullptr) fallback = a;
      continue;
    }
    double us = a->predictUs(args, comm->topo, comm->chunkBytes);
    if (log) {
      char item[64];
      snprintf(item, sizeof(item), " %s %.1f us", a->name, us);
      table += item;
    }
    if (best == nullptr || us < bestUs) {
      best = a;
      bestUs = us;
    }
  }
  const AlgorithmInfo* chosen = best != nullptr ? best : fallback;
  if (log) logChoice(args, comm, table, chosen);
  return chosen;
}

// The cost model's answer depends only on the call's shape and the
// communicator (whose topology is immutable), so repeated shapes - a training
// loop, a benchmark - skip the model (whose predictions allocate). A small
// direct-mapped cache per thread; the communicator's address and hash both
// key it, so a new communicator at a recycled address never hits a stale entry.
struct ChoiceEntry {
  const tideComm* comm = nullptr;
  uint64_t commHash = 0;
  size_t count = 0;
  int root = 0;
  CollType type = CollType::kCount;
  tideDataType_t dtype = tideFloat32;
  RedOp op = RedOp::Sum;
  MemType mem = MemType::Host;
  int codec = 0;
  const AlgorithmInfo* algo = nullptr;
};
constexpr size_t kChoiceSlots = 32;
thread_local ChoiceEntry tChoices[kChoiceSlots];

const AlgorithmInfo* cachedAutoAlgo(const CollArgs& args, const tideComm* comm) {
  size_t h = reinterpret_cast<uintptr_t>(comm) >> 6;
  h = h * 31 + args.count;
  h = h * 31 + static_cast<size_t>(args.type);
  h = h * 31 + static_cast<size_t>(args.dtype);
  ChoiceEntry& e = tChoices[(h ^ (h >> 17)) % kChoiceSlots];
  if (e.comm == comm && e.commHash == comm->commHash && e.count == args.count &&
      e.root == args.root && e.type == args.type && e.dtype == args.dtype && e.op == args.op &&
      e.mem == args.mem && e.codec == args.codec.id && e.algo != nullptr) {
    return e.algo;
  }
  const AlgorithmInfo* algo = autoAlgo(args, comm);
  e = ChoiceEntry{comm,       comm->commHash, args.count, args.root,     args.type,
                  args.dtype, args.op,        args.mem,   args.codec.id, algo};
  return algo;
}

}  // namespace

const AlgorithmInfo* chooseAlgorithm(const CollArgs& args, const tideComm* comm, bool* wasForced) {
  const int t = static_cast<int>(args.type);
  const AlgorithmInfo* forced =
      args.mem == MemType::Device ? comm->algo.forcedDevice[t] : comm->algo.forced[t];
  const bool useForced = forced && forced->servesCodec(args.codec) &&
                         (!forced->supports || forced->supports(args, comm->nranks));
  if (wasForced != nullptr) *wasForced = useForced;
  return useForced ? forced : cachedAutoAlgo(args, comm);
}

int chooseCodec(const CollArgs& args, const tideComm* comm) {
  if (comm->topo.singleNode() || comm->nranks < 2) return kCodecNone;
  int best = kCodecNone;
  double bestUs = 0;
  for (int id : {int{kCodecNone}, int{kCodecBf16}, int{kCodecInt8}}) {
    CollArgs c = args;
    c.codec.id = id;
    const AlgorithmInfo* row = chooseAlgorithm(c, comm);
    if (row == nullptr || row->predictUs == nullptr) continue;
    const double us = row->predictUs(c, comm->topo, comm->chunkBytes);
    // A lossier codec must win clearly (by more than the model's error);
    // the candidates come in order of increasing loss. No size floor: on
    // 2 x 2 ranks over 1 Gbit/s (perf/compress_compare.sh --sweep) the
    // hierarchical rows' model orders none, bf16 and int8 as measured down
    // to 4 KiB, where int8 and bf16 tie within the noise.
    if (id == kCodecNone || us < 0.9 * bestUs) {
      best = id;
      bestUs = us;
    }
  }
  return best;
}

Status planRoute(OpDesc* op, bool alone) {
  const CollArgs& a = op->args;
  tideComm* comm = op->comm;
  op->algo = nullptr;
  op->algoForced = false;
  if (a.type == CollType::Send || a.type == CollType::Recv) {
    op->route = Route::kP2p;
    return Status::Ok();
  }
  if (op->cudaStream) {
    // Device buffers on a CUDA stream. The device engine serves a lone
    // operation on a one-node communicator (its creation is agreed by every
    // rank; a failure anywhere sends them all down the staged route).
    const bool engineColl = a.type == CollType::AllReduce || a.type == CollType::AllGather ||
                            a.type == CollType::ReduceScatter || a.type == CollType::Broadcast;
    if (alone && engineColl && a.codec.id == 0 && deviceEngineEligible(comm)) {
      // The device engine, unless its creation (on first use, agreed by
      // every rank) failed somewhere: then every rank takes the staged route.
      bool ready = false;
      TIDE_TRY(deviceEngineReady(comm, &ready));
      if (ready) {
        // A device row of the table (algorithms/device/): TIDE_ALGO's, or
        // the cost model's; the engine runs the kernel of that row.
        CollArgs dev = a;
        dev.mem = MemType::Device;
        op->route = Route::kDevice;
        op->algo = chooseAlgorithm(dev, comm, &op->algoForced);
        if (op->algo == nullptr)
          return internalError("no device row implements %s", collName(a.type));
        return Status::Ok();
      }
    }
    // A large staged All-Reduce is pipelined in chunks; the schedule depends
    // only on the call and the knob.
    static const size_t chunkBytes = knobSize(Knob::CudaStageChunk);
    op->route = (alone && a.type == CollType::AllReduce && chunkBytes > 0 &&
                 a.count * a.elemSize > chunkBytes)
                    ? Route::kHostStagedChunks
                    : Route::kHostStaged;
  } else if (comm->lane != nullptr && comm->lane->accepts(a)) {
    op->route = Route::kLane;
    return Status::Ok();
  } else {
    op->route = Route::kHost;
  }
  op->algo = chooseAlgorithm(a, comm, &op->algoForced);
  if (op->algo == nullptr) return internalError("no algorithm implements %s", collName(a.type));
  return Status::Ok();
}

namespace {

// TIDE_DEBUG=INFO: the algorithm table the planner chooses from, once per
// process (name, collectives, description of every registered row).
void logAlgorithmTable() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (logLevel() < LogLevel::Info) return;
    for (const AlgorithmInfo* a : registeredAlgorithms()) {
      std::string colls;
      for (int t = 0; t < static_cast<int>(CollType::kCount); ++t) {
        if (a->collMask & collBit(static_cast<CollType>(t))) {
          colls += (colls.empty() ? "" : ",") + std::string(collName(static_cast<CollType>(t)));
        }
      }
      TIDE_INFO("algorithm table: %-9s %-40s %s%s", a->name, colls.c_str(), a->description,
                a->predictUs != nullptr ? "" : " (unmodelled)");
    }
  });
}

}  // namespace

void parseAlgoChoice(tideComm* comm) {
  logAlgorithmTable();
  comm->algo = AlgoChoice{};
  std::string spec = knobString(Knob::Algo);
  for (auto& [coll, name] : parseSpec(spec)) {
    if (!knownAlgoName(name)) {
      warnOnce("TIDE_ALGO: unknown algorithm \"" + name + "\"; using the automatic choice");
      continue;
    }
    for (int t = 0; t < static_cast<int>(CollType::Send); ++t) {
      auto ct = static_cast<CollType>(t);
      CollType want;
      if (!coll.empty()) {
        if (!collFromName(coll, &want)) {
          warnOnce("TIDE_ALGO: unknown collective \"" + coll + "\"");
          break;
        }
        if (want != ct) continue;
      }
      const AlgorithmInfo* a = findAlgo(name, ct);
      if (a != nullptr) {
        (a->mem == MemType::Device ? comm->algo.forcedDevice : comm->algo.forced)[t] = a;
      } else {
        warnOnce("TIDE_ALGO: \"" + name + "\" does not apply to " + collName(ct) +
                 "; using the automatic choice there");
      }
    }
  }
  // TIDE_DEVICE_ALGO (oneshot | twoshot | ring): an alias of
  // TIDE_ALGO="allreduce:dev_<name>" (the engine also agrees it at creation).
  cuda::DeviceAlgo devAlgo = cuda::DeviceAlgo::kAuto;
  if (cuda::parseDeviceAlgo(knobString(Knob::DeviceAlgo), &devAlgo) &&
      devAlgo != cuda::DeviceAlgo::kAuto) {
    for (const AlgorithmInfo* a : registeredAlgorithms()) {
      if (a->mem == MemType::Device && a->deviceKernel == static_cast<int>(devAlgo) &&
          (a->collMask & collBit(CollType::AllReduce))) {
        comm->algo.forcedDevice[static_cast<int>(CollType::AllReduce)] = a;
      }
    }
  }
  for (auto& [coll, name] : parseSpec(knobString(Knob::Proto))) {
    if (strcasecmp(name.c_str(), "simple") != 0)
      warnOnce("TIDE_PROTO: protocol \"" + name + "\" is not available; using simple");
  }
}

}  // namespace tide
