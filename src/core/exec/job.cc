// Running a job: issue-order tickets, one chain of collectives per
// communicator plus one task per send/recv, all progressed together.
#include "core/exec/job.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>

#include "core/comm.h"
#include "core/exec/check.h"
#include "core/exec/executor.h"
#include "core/log.h"
#include "core/registry.h"

namespace tide {

namespace {

size_t inputCount(const CollArgs& a, int nranks) {
  return a.type == CollType::ReduceScatter ? a.count * static_cast<size_t>(nranks) : a.count;
}

// One lane-routed collective driven by the progress engine: the same
// protocol as a blocking call's Lane::run(), in steps, so other operations
// of the job (send/recv, other communicators) keep moving while it waits.
struct LanePoll {
  Lane* lane;
  const LaneOp* op;
  ExecCtx* ctx;
};

bool laneReady(void* arg) {
  auto* p = static_cast<LanePoll*>(arg);
  Status err;
  if (p->lane->poll(*p->op, &err)) return true;
  if (!err.ok()) p->ctx->setError(std::move(err));
  return false;
}

Task laneTask(ExecCtx& ctx, Lane* lane, const OpDesc& d) {
  const LaneOp op = laneOpOf(d);
  if (lane == nullptr) {
    ctx.setError(
        internalError("%s routed to a lane the communicator does not have", collName(d.args.type)));
    co_return;
  }
  Status s = lane->start(op);
  if (!s.ok()) {
    ctx.setError(std::move(s));
    co_return;
  }
  LanePoll poll{lane, &op, &ctx};
  co_await ctx.until(&laneReady, &poll, lane->doorbell());
  ctx.clearUntil();
  if (!ctx.error().ok()) co_return;
  s = lane->finish(op);
  if (!s.ok()) ctx.setError(std::move(s));
}

// Collectives of one communicator, one after the other, on the coll channel
// (or the lane, for those routed there).
Task chainTask(ExecCtx& ctx, std::vector<const OpDesc*> ops, const KernelTable* k,
               uint32_t* tagWord) {
  for (const OpDesc* op : ops) {
    if (op->route == Route::kLane) {
      co_await laneTask(ctx, op->comm->lane.get(), *op);
      if (!ctx.error().ok()) co_return;
      continue;
    }
    *tagWord = op->tag;  // read by the transports as this op posts (SetupContext::opTag)
    CollArgs a = op->args;
    size_t nin = inputCount(a, ctx.nranks());
    if (op->preScale != 0 && nin > 0 && a.sendbuff != nullptr) {
      void* tmp = ctx.scratch(nin * a.elemSize);
      if (tmp == nullptr) co_return;
      k->scale(tmp, a.sendbuff, nin, a.dtype, op->preScale);
      a.sendbuff = tmp;
    }
    ctx.setArgs(a);
    co_await runCollective(ctx, *op);  // core/exec/check.h: the algorithm (+ root confirmation)
    bool hasResult = a.type != CollType::Reduce || ctx.rank() == a.root;
    if (op->postDiv != 0 && hasResult && a.count > 0) {
      k->divide(a.recvbuff, a.recvbuff, a.count, a.dtype, op->postDiv);
    }
  }
}

bool overlaps(const char* a, size_t an, const char* b, size_t bn) {
  return an > 0 && bn > 0 && a < b + bn && b < a + an;
}

// Every send/recv of one communicator in a job, posted in issue order and
// completed together. A receive whose buffer overlaps a send of the batch
// (nccl-tests' in-place sendrecv) lands in scratch and is copied out once
// every transfer is done.
Task p2pBatchTask(ExecCtx& ctx, std::vector<const OpDesc*> ops) {
  struct Staged {
    char* tmp;
    void* dst;
    size_t bytes;
  };
  std::vector<Staged> staged;
  std::vector<Pending> all;
  for (const OpDesc* op : ops) {
    const CollArgs& a = op->args;
    size_t bytes = a.count * a.elemSize;
    if (a.type == CollType::Send) {
      all.push_back(ctx.send(a.root, a.sendbuff, bytes));
      continue;
    }
    char* dst = static_cast<char*>(a.recvbuff);
    bool clash = false;
    for (const OpDesc* other : ops) {
      const CollArgs& b = other->args;
      clash |= b.type == CollType::Send &&
               overlaps(dst, bytes, static_cast<const char*>(b.sendbuff), b.count * b.elemSize);
    }
    if (clash) {
      char* tmp = static_cast<char*>(ctx.scratch(bytes));
      if (tmp == nullptr) co_return;
      staged.push_back({tmp, dst, bytes});
      dst = tmp;
    }
    all.push_back(ctx.recv(a.root, dst, bytes));
  }
  co_await ctx.waitAll(all);
  for (const Staged& st : staged) ctx.copy(st.dst, st.tmp, st.bytes);
}

std::string describe(const OpDesc& op) {
  char buf[160];
  snprintf(buf, sizeof(buf), "%s #%llu (%zu x %s) on comm %08x rank %d/%d", collName(op.args.type),
           static_cast<unsigned long long>(op.seq), op.args.count, dtypeName(op.args.dtype),
           static_cast<unsigned>(op.comm->commHash), op.comm->rank, op.comm->nranks);
  return buf;
}

// One task of a job and its execution context. Runs are recycled per thread
// (see RunPool), so a steady stream of calls allocates nothing here.
struct Run {
  std::optional<ExecCtx> ctx;
  ExecItem item;
  std::vector<const OpDesc*> ops;
};

std::string describeRun(const void* arg) {
  const auto* r = static_cast<const Run*>(arg);
  std::string what = describe(*r->ops[0]);
  if (r->ops.size() > 1) what += " and " + std::to_string(r->ops.size() - 1) + " more";
  return what;
}

void initItem(Run& r, tideComm* comm, Task task) {
  r.item.ctx = &*r.ctx;
  r.item.task = std::move(task);
  r.item.describe = describeRun;
  r.item.describeArg = &r;
  r.item.bell = comm->bell;
  r.item.abort = &comm->abortFlag;
  r.item.timeoutSec = comm->timeoutSec;
  r.item.result = Status::Ok();
}

// Per-thread recycled Runs. Thread-safety: thread_local; `inUse` guards
// against re-entry (a nested job then uses a private pool).
struct RunPool {
  std::vector<std::unique_ptr<Run>> runs;
  std::vector<ExecItem*> items;
  size_t used = 0;
  bool inUse = false;

  Run& next() {
    if (used == runs.size()) runs.push_back(std::make_unique<Run>());
    return *runs[used++];
  }
  // Destroys the tasks and contexts of the last job; keeps the memory.
  void recycle() {
    for (size_t i = 0; i < used; ++i) {
      Run& r = *runs[i];
      r.item.task.reset();
      r.item.ctx = nullptr;
      r.ctx.reset();
      r.ops.clear();
    }
    used = 0;
    items.clear();
  }
};
thread_local RunPool tRuns;

Run& newRun(RunPool& pool, tideComm* comm, int channel, const OpDesc& first, const KernelTable* k) {
  Run& r = pool.next();
  r.ctx.emplace(first.args, comm->rank, comm->nranks, comm->conns.data(), channel, k,
                comm->chunkBytes, &comm->topo, comm->traffic.get());
  return r;
}

Status runOpsWith(Job& job, RunPool& pool) {
  const KernelTable* k = kernelsFor(MemType::Host);
  for (auto& [comm, ticket] : job.tickets) {
    Run* coll = nullptr;
    Run* p2p = nullptr;
    for (const OpDesc& op : job.ops) {
      if (op.comm != comm) continue;
      Run*& r = op.chained() ? coll : p2p;
      if (r == nullptr) r = &newRun(pool, comm, op.chained() ? kCollChannel : kP2pChannel, op, k);
      r->ops.push_back(&op);
    }
    if (coll != nullptr) {
      const OpDesc& only = *coll->ops[0];
      // A lone collective without Avg lowering runs its algorithm directly.
      bool direct = coll->ops.size() == 1 && only.route != Route::kLane && only.preScale == 0 &&
                    only.postDiv == 0;
      // Tasks start when runTasks() resumes them; one collective Run per
      // communicator per job, so the word is this op's until then.
      if (direct) comm->opTag[kCollChannel] = only.tag;
      initItem(*coll, comm,
               direct ? runCollective(*coll->ctx, only)
                      : chainTask(*coll->ctx, coll->ops, k, &comm->opTag[kCollChannel]));
      pool.items.push_back(&coll->item);
    }
    if (p2p != nullptr) {
      initItem(*p2p, comm, p2pBatchTask(*p2p->ctx, p2p->ops));
      pool.items.push_back(&p2p->item);
    }
  }
  return runTasks(pool.items, job.tickets.front().first->wait);
}

// A job made only of lane-routed collectives of one communicator (a host
// stream's small collective, the common case): each runs through the lane's
// blocking run(), on this thread, without the progress engine (nothing else
// of the job needs progress). The same protocol as the engine's steps.
bool laneOnly(const Job& job) {
  if (job.tickets.size() != 1) return false;
  for (const OpDesc& op : job.ops) {
    if (op.route != Route::kLane) return false;
  }
  return job.tickets.front().first->lane != nullptr;
}

Status runLaneOps(Job& job) {
  Lane* lane = job.tickets.front().first->lane.get();
  for (const OpDesc& op : job.ops) {
    Status s = lane->run(laneOpOf(op));
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

Status runOps(Job& job) {
  if (laneOnly(job)) return runLaneOps(job);
  if (tRuns.inUse) {
    RunPool own;
    Status s = runOpsWith(job, own);
    own.recycle();
    return s;
  }
  tRuns.inUse = true;
  Status s = runOpsWith(job, tRuns);
  tRuns.recycle();
  tRuns.inUse = false;
  return s;
}

std::mutex gIssueMu;  // ticket assignment and stream queueing happen atomically

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

void executeJob(Job& job) {
  Status result;
  // Issue order: wait until every earlier job of each communicator is done.
  for (auto& [comm, ticket] : job.tickets) {
    if (comm->doneTicket.load() < ticket) {
      std::unique_lock<std::mutex> lock(comm->execMu);
      comm->waitTicket(lock, ticket);
    }
    if (comm->abortFlag.load() && result.ok())
      result = remoteError("communicator %08x was aborted", static_cast<unsigned>(comm->commHash));
  }
  for (auto& [comm, ticket] : job.tickets) {
    if (!result.ok()) break;
    Status sticky = comm->stickyError();
    if (!sticky.ok()) result = sticky;
  }
  if (result.ok()) result = checkJob(job);  // TIDE_CHECK=1 (core/exec/check.h); not sticky
  if (result.ok()) {
    result = runOps(job);
    if (!result.ok()) {
      // The pipes of every communicator in the job are now in an unknown
      // state: the error sticks to all of them.
      for (auto& [comm, ticket] : job.tickets) comm->setAsyncError(result);
      TIDE_WARN("%s", result.message().c_str());
    }
  }
  if (!result.ok()) {
    // tideGetLastError(comm) names the failure, also when a host stream's
    // worker ran the job and the caller only sees tideStreamSynchronize fail.
    for (auto& [comm, ticket] : job.tickets) {
      const OpDesc* mine = &job.ops.front();
      for (const OpDesc& op : job.ops) {
        if (op.comm == comm) {
          mine = &op;
          break;
        }
      }
      std::string msg = describe(*mine) + ": " + result.message();
      std::lock_guard<std::mutex> lock(comm->errMu);
      comm->lastError = std::move(msg);
    }
  }
  for (auto& [comm, ticket] : job.tickets) comm->finishTicket(ticket);
  // The job may be freed as soon as it is marked done: copy the
  // communicators first (inline for the usual few).
  tideComm* few[8];
  std::vector<tideComm*> many;
  tideComm** comms = few;
  const size_t ncomms = job.tickets.size();
  if (ncomms > 8) {
    many.resize(ncomms);
    comms = many.data();
  }
  for (size_t i = 0; i < ncomms; ++i) comms[i] = job.tickets[i].first;
  {
    std::lock_guard<std::mutex> lock(job.mu);
    job.result = result;
    job.done = true;
  }
  job.cv.notify_all();
  for (size_t i = 0; i < ncomms; ++i) comms[i]->users.fetch_sub(1);
}

}  // namespace tide
