// Running a job: issue-order tickets, one chain of collectives per
// communicator plus one task per send/recv, all progressed together.
#include "core/job.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>

#include "core/executor.h"
#include "core/log.h"
#include "core/registry.h"

namespace tide {

namespace {

size_t inputCount(const CollArgs& a, int nranks) {
  return a.type == CollType::ReduceScatter ? a.count * static_cast<size_t>(nranks) : a.count;
}

// Collectives of one communicator, one after the other, on the coll channel.
Task chainTask(ExecCtx& ctx, std::vector<const OpDesc*> ops, const KernelTable* k) {
  for (const OpDesc* op : ops) {
    CollArgs a = op->args;
    size_t nin = inputCount(a, ctx.nranks());
    if (op->preScale != 0 && nin > 0 && a.sendbuff != nullptr) {
      void* tmp = ctx.scratch(nin * a.elemSize);
      if (tmp == nullptr) co_return;
      k->scale(tmp, a.sendbuff, nin, a.dtype, op->preScale);
      a.sendbuff = tmp;
    }
    ctx.setArgs(a);
    co_await op->algo->run(ctx);
    bool hasResult = a.type != CollType::Reduce || ctx.rank() == a.root;
    if (op->postDiv != 0 && hasResult && a.count > 0) {
      k->divide(a.recvbuff, a.recvbuff, a.count, a.dtype, op->postDiv);
    }
  }
}

Task p2pTask(ExecCtx& ctx) {
  const CollArgs& a = ctx.args();
  size_t bytes = a.count * a.elemSize;
  if (a.type == CollType::Send) {
    Pending p = ctx.send(a.root, a.sendbuff, bytes);
    co_await ctx.wait(p);
  } else {
    Pending p = ctx.recv(a.root, a.recvbuff, bytes);
    co_await ctx.wait(p);
  }
}

std::string describe(const OpDesc& op) {
  char buf[160];
  snprintf(buf, sizeof(buf), "%s #%llu (%zu x %s) on comm %08x rank %d/%d",
           collName(op.args.type), static_cast<unsigned long long>(op.seq), op.args.count,
           dtypeName(op.args.dtype), static_cast<unsigned>(op.comm->commHash), op.comm->rank,
           op.comm->nranks);
  return buf;
}

struct Run {
  std::unique_ptr<ExecCtx> ctx;
  ExecItem item;
};

void initItem(Run& r, tideComm* comm, Task task, std::string what) {
  r.item.ctx = r.ctx.get();
  r.item.task = std::move(task);
  r.item.what = std::move(what);
  r.item.bell = comm->bell;
  r.item.abort = &comm->abortFlag;
  r.item.timeoutSec = comm->timeoutSec;
}

Status runOps(Job& job) {
  const KernelTable* k = kernelsFor(MemType::Host);
  std::vector<std::unique_ptr<Run>> runs;
  for (auto& [comm, ticket] : job.tickets) {
    std::vector<const OpDesc*> colls;
    for (const OpDesc& op : job.ops) {
      if (op.comm == comm && op.algo != nullptr) colls.push_back(&op);
    }
    if (!colls.empty()) {
      auto r = std::make_unique<Run>();
      r->ctx = std::make_unique<ExecCtx>(colls[0]->args, comm->rank, comm->nranks,
                                         comm->conns.data(), kCollChannel, k, comm->chunkBytes);
      std::string what = describe(*colls[0]);
      if (colls.size() > 1) what += " and " + std::to_string(colls.size() - 1) + " more";
      initItem(*r, comm, chainTask(*r->ctx, colls, k), what);
      runs.push_back(std::move(r));
    }
    for (const OpDesc& op : job.ops) {
      if (op.comm != comm || op.algo != nullptr) continue;
      auto r = std::make_unique<Run>();
      r->ctx = std::make_unique<ExecCtx>(op.args, comm->rank, comm->nranks, comm->conns.data(),
                                         kP2pChannel, k, comm->chunkBytes);
      initItem(*r, comm, p2pTask(*r->ctx), describe(op));
      runs.push_back(std::move(r));
    }
  }
  std::vector<ExecItem*> items;
  for (auto& r : runs) items.push_back(&r->item);
  return runTasks(items, job.tickets.front().first->wait);
}

}  // namespace

void executeJob(Job& job) {
  Status result;
  // Issue order: wait until every earlier job of each communicator is done.
  for (auto& [comm, ticket] : job.tickets) {
    std::unique_lock<std::mutex> lock(comm->execMu);
    while (comm->doneTicket < ticket && !comm->abortFlag.load()) {
      comm->execCv.wait_for(lock, std::chrono::milliseconds(100));
    }
    if (comm->abortFlag.load() && result.ok())
      result = remoteError("communicator %08x was aborted", static_cast<unsigned>(comm->commHash));
  }
  for (auto& [comm, ticket] : job.tickets) {
    if (!result.ok()) break;
    Status sticky = comm->stickyError();
    if (!sticky.ok()) result = sticky;
  }
  if (result.ok()) {
    result = runOps(job);
    if (!result.ok()) {
      // The pipes of every communicator in the job are now in an unknown
      // state: the error sticks to all of them.
      for (auto& [comm, ticket] : job.tickets) comm->setAsyncError(result);
      TIDE_WARN("%s", result.message().c_str());
    }
  }
  for (auto& [comm, ticket] : job.tickets) {
    {
      std::lock_guard<std::mutex> lock(comm->execMu);
      comm->doneTicket = std::max(comm->doneTicket, ticket + 1);
    }
    comm->execCv.notify_all();
  }
  std::vector<tideComm*> comms;
  for (auto& t : job.tickets) comms.push_back(t.first);
  {
    std::lock_guard<std::mutex> lock(job.mu);
    job.result = result;
    job.done = true;
  }
  job.cv.notify_all();
  for (tideComm* c : comms) c->users.fetch_sub(1);
}

}  // namespace tide
