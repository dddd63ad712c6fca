// Validation, lowering, algorithm choice, groups and job submission.
#include "core/issue/enqueue.h"

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

#include "core/config.h"
#include "core/device/device_stream.h"
#include "core/exec/check.h"
#include "core/exec/job.h"
#include "core/issue/planner.h"
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

bool reduces(CollType t) {
  return t == CollType::AllReduce || t == CollType::Reduce || t == CollType::ReduceScatter;
}

// ---- Groups ----------------------------------------------------------------------

struct GroupState {
  int depth = 0;
  std::vector<OpDesc> ops;
  Status firstError;
};
thread_local GroupState tGroup;

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

// A rank's sends to itself and receives from itself in one launch pair up
// in order, each pair of one size (NCCL's rule: self send/recv are grouped).
// Checked before anything is queued, so a mismatch fails this call alone and
// leaves the communicator usable.
Status checkSelfPairs(const std::vector<OpDesc>& ops) {
  for (size_t i = 0; i < ops.size(); ++i) {
    const OpDesc& first = ops[i];
    if (first.route != Route::kP2p || first.args.root != first.comm->rank) continue;
    bool seen = false;  // this communicator was checked at an earlier op
    for (size_t j = 0; j < i && !seen; ++j) {
      seen = ops[j].comm == first.comm && ops[j].route == Route::kP2p &&
             ops[j].args.root == ops[j].comm->rank;
    }
    if (seen) continue;
    std::vector<uint64_t> sends, recvs;
    for (const OpDesc& op : ops) {
      if (op.comm != first.comm || op.route != Route::kP2p || op.args.root != op.comm->rank)
        continue;
      (op.args.type == CollType::Send ? sends : recvs).push_back(op.args.count * op.args.elemSize);
    }
    if (sends.size() != recvs.size()) {
      return invalidArgument(
          "%zu send(s) to self and %zu receive(s) from self in one launch on rank %d: each send "
          "to self needs a receive from self in the same group",
          sends.size(), recvs.size(), first.comm->rank);
    }
    for (size_t k = 0; k < sends.size(); ++k) {
      if (sends[k] != recvs[k]) {
        return invalidArgument(
            "send to self #%zu of %llu bytes is matched by a receive from self of %llu bytes on "
            "rank %d: sizes must agree",
            k, static_cast<unsigned long long>(sends[k]), static_cast<unsigned long long>(recvs[k]),
            first.comm->rank);
      }
    }
  }
  return Status::Ok();
}

// Consumes `ops` (left empty, capacity kept where possible).
Status submit(std::vector<OpDesc>& ops) {
  if (ops.empty()) return Status::Ok();
  if (Status pairs = checkSelfPairs(ops); !pairs.ok()) {
    ops.clear();
    return pairs;
  }
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
  std::shared_ptr<Job> job = newJob();
  job->ops.swap(ops);  // the pooled job's capacity goes back to the caller's vector
  ops.clear();
  thread_local std::vector<tideStream*> streams;  // capacity kept across calls
  streams.clear();
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
  // NULL-stream op, this thread has arrived too (core/exec/job.h).
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

namespace {

// ---- Small-collective lane -------------------------------------------------------------

// Runs a lane-accepted blocking collective on the calling thread, in issue
// order: it takes a ticket like a job and first waits for every earlier job
// of the communicator (host-stream work) to finish. Errors stick to the
// communicator, as they do for jobs.
Status runOnLane(tideComm* comm, Lane* lane, const OpDesc& d) {
  const LaneOp op = laneOpOf(d);
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
    waited = comm->waitTicket(lock, ticket);
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
  comm->finishTicket(ticket);
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
  return Status::Ok();
}

}  // namespace

void attachLane(tideComm* comm, std::unique_ptr<Lane> lane) { comm->lane = std::move(lane); }

void detachLane(tideComm* comm) { comm->lane.reset(); }

namespace {

// Avg is lowered here, once, for every route: floats are pre-scaled by 1/n,
// integers summed then divided by n (the lane, the job chain and the device
// engine apply what this records). Resolves the reduction kernel once.
Status lowerReduction(OpDesc* d, int op) {
  CollArgs& a = d->args;
  if (!reduces(a.type)) return Status::Ok();
  const KernelTable* k = kernelsFor(a.mem);
  if (k == nullptr) return internalError("no kernels registered for host memory");
  if (op == tideAvg) {
    a.op = RedOp::Sum;
    d->avg = true;
    if (a.codec.id != 0) {
      a.codec.avg = true;  // the compressed row scales its fp32 sum
    } else if (dtypeIsFloat(a.dtype)) {
      d->preScale = 1.0 / d->comm->nranks;
    } else {
      d->postDiv = static_cast<uint64_t>(d->comm->nranks);
    }
  } else {
    a.op = static_cast<RedOp>(op);
  }
  a.reduce = k->reduceFn(a.dtype, a.op);
  if (a.reduce == nullptr)
    return internalError("no %s kernel for %s", opName(static_cast<tideRedOp_t>(op)),
                         dtypeName(a.dtype));
  return Status::Ok();
}

}  // namespace

Status issueOp(tideComm* comm, tideStream* stream, CollType type, const void* sendbuff,
               void* recvbuff, size_t count, int dtype, int op, int root, const Codec* codec) {
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
  if (codec != nullptr) a.codec = *codec;
  TIDE_TRY(lowerReduction(&d, op));
  const bool grouped = tGroup.depth > 0;
  TIDE_TRY(planRoute(&d, !grouped));
  auto tagOf = [&](size_t n) {
    // The codec is part of the operation: ranks that disagree on it fail as
    // a mismatch, never exchange foreign wire formats.
    return opTagOf(comm->collCount++, static_cast<int>(type), n, dtype + 256 * a.codec.id,
                   reduces(type) ? op : -1,
                   (type == CollType::Broadcast || type == CollType::Reduce) ? root : -1);
  };
  // Every rank plans the same route, so sequence numbers and tags (one per
  // collective; one per chunk of a chunked one, below) stay in step.
  d.seq = comm->opCount++;
  if (d.route != Route::kP2p && d.route != Route::kHostStagedChunks) d.tag = tagOf(count);
  if (d.route == Route::kDevice) return submitDeviceEngine(d);
  switch (d.route) {
    case Route::kHostStagedChunks: {
      static const size_t chunkBytes = knobSize(Knob::CudaStageChunk);
      std::vector<OpDesc> chunks;
      for (const cuda::Chunk& c : cuda::chunkSchedule(count, a.elemSize, chunkBytes, 4096)) {
        OpDesc cd = d;
        cd.args.count = c.count;
        cd.args.sendbuff = static_cast<const char*>(sendbuff) + c.offset * a.elemSize;
        cd.args.recvbuff = static_cast<char*>(recvbuff) + c.offset * a.elemSize;
        cd.route = Route::kHostStaged;
        cd.algo = chooseAlgorithm(cd.args, comm);
        if (cd.algo == nullptr) return internalError("no algorithm implements %s", collName(type));
        chunks.push_back(cd);
      }
      // One sequence number and tag per chunk, in chunk order.
      for (size_t i = 0; i < chunks.size(); ++i) {
        if (i > 0) chunks[i].seq = comm->opCount++;
        chunks[i].tag = tagOf(chunks[i].args.count);
      }
      return submitDevicePipelined(chunks, 2);
    }
    case Route::kLane:
      // Blocking and alone: on the calling thread. On a host stream or in a
      // group the job machinery drives the same lane protocol.
      if (stream == nullptr && !grouped) return runOnLane(comm, comm->lane.get(), d);
      break;
    default:
      break;
  }
  if (grouped) {
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
  if (ops.size() == 1 && ops[0].cudaStream) {
    // A group of one (NCCL programs, nccl-tests among them, group every
    // call) is planned like an ungrouped call: the device engine may take
    // it. Its sequence number and tag were taken at issue.
    OpDesc& only = ops[0];
    TIDE_TRY(planRoute(&only, /*alone=*/true));
    if (only.route == Route::kDevice) return submitDeviceEngine(only);
    if (only.route == Route::kHostStagedChunks) only.route = Route::kHostStaged;
  }
  Status s = submit(ops);
  if (!s.ok()) {
    // tideGroupEnd names no communicator: each of the group's answers
    // tideGetLastError(comm) with the failure.
    const std::string msg = "tideGroupEnd: " + s.message();
    for (tideComm* c : comms) {
      std::lock_guard<std::mutex> lock(c->errMu);
      c->lastError = msg;
    }
  }
  return s;
}

}  // namespace tide
