// Validation, lowering, algorithm choice, groups and job submission.
#include "core/enqueue.h"

#include <strings.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <tuple>

#include "core/check.h"
#include "core/config.h"
#include "core/device_stream.h"
#include "core/job.h"
#include "core/log.h"
#include "core/registry.h"
#include "cuda/cuda_loader.h"
#include "cuda/stream_order.h"

namespace tide {

const char* collName(CollType t) {
  static const char* const kNames[] = {"allreduce",     "broadcast", "reduce", "allgather",
                                       "reducescatter", "alltoall",  "send",   "recv"};
  return t < CollType::kCount ? kNames[static_cast<int>(t)] : "invalid";
}

namespace {

// ---- Algorithm choice ------------------------------------------------------------

bool reduces(CollType t) {
  return t == CollType::AllReduce || t == CollType::Reduce || t == CollType::ReduceScatter;
}

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
    if (!(a->collMask & collBit(args.type))) continue;
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
      e.algo != nullptr) {
    return e.algo;
  }
  const AlgorithmInfo* algo = autoAlgo(args, comm);
  e = ChoiceEntry{comm,      comm->commHash, args.count, args.root,
                  args.type, args.dtype,     args.op,    algo};
  return algo;
}

// ---- Groups ----------------------------------------------------------------------

struct GroupState {
  int depth = 0;
  std::vector<OpDesc> ops;
  Status firstError;
};
thread_local GroupState tGroup;

std::mutex gIssueMu;  // ticket assignment and stream queueing happen atomically

// Jobs without a host stream run only on the calling thread, so one Job per
// thread is recycled for them (no allocation in steady state). Thread-safety:
// thread_local; `tLocalBusy` guards against re-entry.
thread_local Job tLocalJob;
thread_local bool tLocalBusy = false;

Status submitLocal(std::vector<OpDesc>& ops) {
  Job& job = tLocalJob;
  job.ops.swap(ops);
  job.tickets.clear();
  job.claimed.store(true, std::memory_order_relaxed);
  job.done = false;
  job.result = Status::Ok();
  takeTickets(job, {});
  tLocalBusy = true;
  executeJob(job);
  tLocalBusy = false;
  job.ops.swap(ops);  // hands the capacity back to the caller's vector
  ops.clear();
  return job.result;
}

// Consumes `ops` (left empty, capacity kept where possible).
Status submit(std::vector<OpDesc>& ops) {
  if (ops.empty()) return Status::Ok();
  bool anyStream = false;
  size_t cudaOps = 0;
  for (const OpDesc& op : ops) {
    anyStream |= op.stream != nullptr;
    cudaOps += op.cudaStream ? 1 : 0;
  }
  if (cudaOps > 0) {
    if (cudaOps != ops.size()) {
      ops.clear();
      return invalidUsage("a group mixes CUDA streams with host streams or the NULL stream");
    }
    return submitDevice(ops);
  }
  if (!anyStream && !tLocalBusy) return submitLocal(ops);
  auto job = std::make_shared<Job>();
  job->ops = std::move(ops);
  std::vector<tideStream*> streams;
  bool anyNull = false;
  for (const OpDesc& op : job->ops) {
    if (op.stream == nullptr) {
      anyNull = true;
    } else if (std::find(streams.begin(), streams.end(), op.stream) == streams.end()) {
      streams.push_back(op.stream);
    }
  }
  // The streams get the job under the issue lock, so their order agrees
  // with the tickets (one global order: no two streams wait on each other).
  // It runs once it is at the front of each of its streams and, with a
  // NULL-stream op, this thread has arrived too (core/job.h).
  job->parties = static_cast<int>(streams.size()) + (anyNull ? 1 : 0);
  takeTickets(*job, [&] {
    for (tideStream* s : streams) streamEnqueue(s, job);
  });
  if (!anyNull) return Status::Ok();
  if (job->arrive()) {
    executeJob(*job);
  } else {
    job->waitDone();
  }
  return job->result;
}

}  // namespace

void takeTickets(Job& job, const std::function<void()>& alsoLocked) {
  std::lock_guard<std::mutex> lock(gIssueMu);
  for (OpDesc& op : job.ops) {
    bool seen = false;
    for (auto& t : job.tickets) seen |= (t.first == op.comm);
    if (!seen) {
      std::lock_guard<std::mutex> cl(op.comm->execMu);
      job.tickets.emplace_back(op.comm, op.comm->nextTicket++);
      op.comm->users.fetch_add(1);
    }
  }
  if (alsoLocked) alsoLocked();
}

namespace {

// ---- Small-collective lane -------------------------------------------------------------

Lane* laneOf(const tideComm* comm) { return comm->lane.get(); }

// Runs a lane-accepted blocking collective on the calling thread, in issue
// order: it takes a ticket like a job and first waits for every earlier job
// of the communicator (host-stream work) to finish. Errors stick to the
// communicator, as they do for jobs.
Status runOnLane(tideComm* comm, Lane* lane, const OpDesc& d) {
  LaneOp op;
  op.args = d.args;
  op.preScale = d.preScale;
  op.postDiv = d.postDiv;
  op.tag = d.tag;
  op.seq = d.seq;
  // Every queued job holds a user count until it is done, and this call
  // holds one: when the count is 1, nothing of this communicator is in
  // flight and (one issuing thread per communicator) nothing can be queued
  // until this call returns, so issue order needs no ticket.
  if (comm->users.load(std::memory_order_acquire) == 1) {
    Status s = lane->run(op);
    if (!s.ok()) {
      comm->setAsyncError(s);
      TIDE_WARN("%s", s.message().c_str());
    }
    return s;
  }
  uint64_t ticket;
  bool waited = false;
  {
    std::unique_lock<std::mutex> lock(comm->execMu);
    ticket = comm->nextTicket++;
    while (comm->doneTicket < ticket && !comm->abortFlag.load()) {
      waited = true;
      comm->execCv.wait_for(lock, std::chrono::milliseconds(100));
    }
  }
  Status s;
  if (comm->abortFlag.load()) {
    s = remoteError("communicator %08x was aborted", static_cast<unsigned>(comm->commHash));
  } else if (waited) {
    s = comm->stickyError();
  }
  if (s.ok()) {
    s = lane->run(op);
    if (!s.ok()) {
      comm->setAsyncError(s);
      TIDE_WARN("%s", s.message().c_str());
    }
  }
  {
    std::lock_guard<std::mutex> lock(comm->execMu);
    comm->doneTicket = std::max(comm->doneTicket, ticket + 1);
  }
  comm->execCv.notify_all();
  return s;
}

// ---- Validation ---------------------------------------------------------------------

Status validate(tideComm* comm, CollType type, const void* sendbuff, void* recvbuff, size_t count,
                int dtype, int op, int root) {
  if (comm == nullptr) return invalidArgument("%s: comm is NULL", collName(type));
  int st = comm->initState.load();
  if (st == tideInProgress)
    return invalidUsage("%s: communicator initialization is still in progress", collName(type));
  if (st != tideSuccess)
    return makeStatus(static_cast<tideResult_t>(st), "%s: communicator failed to initialize",
                      collName(type));
  Status sticky = comm->stickyError();
  if (!sticky.ok()) return sticky;
  if (comm->abortFlag.load()) return invalidUsage("%s: communicator was aborted", collName(type));
  if (!dtypeValid(dtype)) return invalidArgument("%s: invalid datatype %d", collName(type), dtype);
  if (reduces(type) && !opValid(op))
    return invalidArgument("%s: invalid reduction op %d", collName(type), op);
  int n = comm->nranks;
  bool rooted = type == CollType::Broadcast || type == CollType::Reduce;
  bool p2p = type == CollType::Send || type == CollType::Recv;
  if ((rooted || p2p) && (root < 0 || root >= n))
    return invalidArgument("%s: %s %d out of range [0, %d)", collName(type), p2p ? "peer" : "root",
                           root, n);
  size_t esize = dtypeSize(static_cast<tideDataType_t>(dtype));
  size_t mult =
      (type == CollType::AllGather || type == CollType::ReduceScatter || type == CollType::AlltoAll)
          ? static_cast<size_t>(n)
          : 1;
  if (count > SIZE_MAX / esize / mult || count * esize * mult > (SIZE_MAX >> 1))
    return invalidArgument("%s: count %zu x %zu bytes x %zu overflows", collName(type), count,
                           esize, mult);
  if (count == 0) return Status::Ok();
  bool me = comm->rank == root;
  bool needSend = type != CollType::Recv && (type != CollType::Broadcast || me);
  bool needRecv = type != CollType::Send && (type != CollType::Reduce || me);
  if (needSend && sendbuff == nullptr)
    return invalidArgument("%s: sendbuff is NULL with count %zu", collName(type), count);
  if (needRecv && recvbuff == nullptr)
    return invalidArgument("%s: recvbuff is NULL with count %zu", collName(type), count);
  if (type == CollType::AlltoAll && sendbuff == recvbuff)
    return invalidArgument("alltoall: in-place operation is not supported");
  return Status::Ok();
}

}  // namespace

void parseAlgoChoice(tideComm* comm) {
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
        comm->algo.forced[t] = a;
      } else {
        warnOnce("TIDE_ALGO: \"" + name + "\" does not apply to " + collName(ct) +
                 "; using the automatic choice there");
      }
    }
  }
  for (auto& [coll, name] : parseSpec(knobString(Knob::Proto))) {
    if (strcasecmp(name.c_str(), "simple") != 0)
      warnOnce("TIDE_PROTO: protocol \"" + name + "\" is not available; using simple");
  }
}

void attachLane(tideComm* comm, std::unique_ptr<Lane> lane) { comm->lane = std::move(lane); }

void detachLane(tideComm* comm) { comm->lane.reset(); }

Status issueOp(tideComm* comm, tideStream* stream, CollType type, const void* sendbuff,
               void* recvbuff, size_t count, int dtype, int op, int root) {
  Status v = validate(comm, type, sendbuff, recvbuff, count, dtype, op, root);
  if (!v.ok()) {
    if (tGroup.depth > 0 && tGroup.firstError.ok()) tGroup.firstError = v;
    return v;
  }
  StreamKind kind = StreamKind::kHost;
  Status c;
  if (stream != nullptr) {
    c = classifyStream(stream, &kind);
  } else if (cuda::driverIfProbed() != nullptr &&
             (cuda::isDevicePointer(sendbuff) || cuda::isDevicePointer(recvbuff))) {
    c = invalidArgument(
        "%s: device buffers need a CUDA stream (the NULL stream runs blocking "
        "on host buffers)",
        collName(type));
  }
  if (!c.ok()) {
    if (tGroup.depth > 0 && tGroup.firstError.ok()) tGroup.firstError = c;
    return c;
  }
  OpDesc d;
  d.comm = comm;
  d.stream = stream;
  d.cudaStream = kind == StreamKind::kCuda;
  CollArgs& a = d.args;
  a.type = type;
  a.sendbuff = sendbuff;
  a.recvbuff = recvbuff;
  a.count = count;
  a.dtype = static_cast<tideDataType_t>(dtype);
  a.elemSize = dtypeSize(a.dtype);
  a.root = root;
  a.mem = MemType::Host;
  const KernelTable* k = kernelsFor(a.mem);
  if (k == nullptr) return internalError("no kernels registered for host memory");
  if (reduces(type)) {
    if (op == tideAvg) {
      a.op = RedOp::Sum;
      if (dtypeIsFloat(a.dtype)) {
        d.preScale = 1.0 / comm->nranks;
      } else {
        d.postDiv = static_cast<uint64_t>(comm->nranks);
      }
    } else {
      a.op = static_cast<RedOp>(op);
    }
    a.reduce = k->reduceFn(a.dtype, a.op);
    if (a.reduce == nullptr)
      return internalError("no %s kernel for %s", opName(static_cast<tideRedOp_t>(op)),
                           dtypeName(a.dtype));
  }
  const bool coll = type != CollType::Send && type != CollType::Recv;
  auto tagOf = [&](size_t n = SIZE_MAX) {
    return opTagOf(comm->collCount++, static_cast<int>(type), n == SIZE_MAX ? count : n, dtype,
                   reduces(type) ? op : -1,
                   (type == CollType::Broadcast || type == CollType::Reduce) ? root : -1);
  };
  auto chooseAlgo = [&](const CollArgs& args) {
    const AlgorithmInfo* forced = comm->algo.forced[static_cast<int>(type)];
    return (forced && (!forced->supports || forced->supports(args, comm->nranks)))
               ? forced
               : cachedAutoAlgo(args, comm);
  };
  if (kind == StreamKind::kCuda && type == CollType::AllReduce && tGroup.depth == 0 &&
      deviceEngineEligible(comm)) {
    // One-node communicator: the device All-Reduce engine (kernels on the
    // caller's stream), unless its creation failed on some rank. Same choice
    // on every rank: the call shape and communicator facts only.
    bool used = false;
    Status s = submitDeviceAllReduce(d, op == tideAvg, &used);
    if (used || !s.ok()) {
      if (s.ok()) {
        d.seq = comm->opCount++;
        (void)tagOf();  // keeps the op-tag sequence in step with the other paths
      }
      return s;
    }
  }
  if (kind == StreamKind::kCuda && type == CollType::AllReduce && tGroup.depth == 0) {
    // Large All-Reduce on a CUDA stream: a pipeline of chunks. The same
    // schedule on every rank: it depends only on the call and the knob (not
    // on where this rank's buffers live).
    static const size_t chunkBytes = knobSize(Knob::CudaStageChunk);
    if (chunkBytes > 0 && count * a.elemSize > chunkBytes) {
      std::vector<OpDesc> chunks;
      for (const cuda::Chunk& c : cuda::chunkSchedule(count, a.elemSize, chunkBytes, 4096)) {
        OpDesc cd = d;
        cd.args.count = c.count;
        cd.args.sendbuff = static_cast<const char*>(sendbuff) + c.offset * a.elemSize;
        cd.args.recvbuff = static_cast<char*>(recvbuff) + c.offset * a.elemSize;
        cd.algo = chooseAlgo(cd.args);
        if (cd.algo == nullptr) return internalError("no algorithm implements %s", collName(type));
        cd.seq = comm->opCount++;
        cd.tag = tagOf(c.count);
        chunks.push_back(cd);
      }
      return submitDevicePipelined(chunks, 2);
    }
  }
  if (coll && stream == nullptr && tGroup.depth == 0) {
    // Blocking and alone: the lane takes it when the shape fits (the same
    // decision on every rank).
    Lane* lane = laneOf(comm);
    if (lane != nullptr && lane->accepts(a)) {
      d.seq = comm->opCount++;
      d.tag = tagOf();
      return runOnLane(comm, lane, d);
    }
  }
  if (coll) {
    d.algo = chooseAlgo(a);
    if (d.algo == nullptr) return internalError("no algorithm implements %s", collName(type));
  }
  d.seq = comm->opCount++;
  if (d.algo != nullptr) d.tag = tagOf();
  if (tGroup.depth > 0) {
    tGroup.ops.push_back(d);
    return Status::Ok();
  }
  // The single-op vector keeps its capacity across calls on this thread.
  thread_local std::vector<OpDesc> one;
  one.clear();
  one.push_back(d);
  return submit(one);
}

Status groupStart() {
  ++tGroup.depth;
  return Status::Ok();
}

Status groupEnd() {
  if (tGroup.depth <= 0) return invalidUsage("tideGroupEnd without tideGroupStart");
  if (--tGroup.depth > 0) return Status::Ok();
  std::vector<OpDesc> ops = std::move(tGroup.ops);
  Status first = std::move(tGroup.firstError);
  tGroup = GroupState{};
  if (!first.ok()) {
    return makeStatus(first.code(), "group not launched: an operation in it failed: %s",
                      first.message().c_str());
  }
  // The ops' communicators must still exist (one may have been destroyed or
  // aborted while the group was open); held as users until they are issued.
  std::vector<tideComm*> comms;
  for (const OpDesc& op : ops) {
    if (std::find(comms.begin(), comms.end(), op.comm) == comms.end()) comms.push_back(op.comm);
  }
  if (!liveHold(comms)) {
    return invalidUsage(
        "group not launched: a communicator of its %zu operation(s) was destroyed or aborted "
        "before tideGroupEnd",
        ops.size());
  }
  struct Release {
    std::vector<tideComm*>& comms;
    ~Release() {
      for (tideComm* c : comms) c->users.fetch_sub(1);
    }
  } release{comms};
  if (ops.size() == 1 && ops[0].args.type == CollType::AllReduce && ops[0].cudaStream &&
      deviceEngineEligible(ops[0].comm)) {
    // A group of one All-Reduce (NCCL programs, nccl-tests among them, group
    // every call) takes the device engine like an ungrouped call; its
    // sequence number and tag were taken at issue, as on the other paths.
    bool used = false;
    const bool avg = ops[0].preScale != 0 || ops[0].postDiv != 0;
    Status s = submitDeviceAllReduce(ops[0], avg, &used);
    if (used || !s.ok()) return s;
  }
  return submit(ops);
}

}  // namespace tide
