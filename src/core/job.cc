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
  snprintf(buf, sizeof(buf), "%s #%llu (%zu x %s) on comm %08x rank %d/%d",
           collName(op.args.type), static_cast<unsigned long long>(op.seq), op.args.count,
           dtypeName(op.args.dtype), static_cast<unsigned>(op.comm->commHash), op.comm->rank,
           op.comm->nranks);
  return buf;
}

struct Run {
  std::unique_ptr<ExecCtx> ctx;
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
  r.item.ctx = r.ctx.get();
  r.item.task = std::move(task);
  r.item.describe = describeRun;
  r.item.describeArg = &r;
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
                                         comm->conns.data(), kCollChannel, k, comm->chunkBytes,
                                         &comm->topo, comm->traffic.get());
      r->ops = colls;
      initItem(*r, comm, chainTask(*r->ctx, colls, k));
      runs.push_back(std::move(r));
    }
    std::vector<const OpDesc*> p2p;
    for (const OpDesc& op : job.ops) {
      if (op.comm == comm && op.algo == nullptr) p2p.push_back(&op);
    }
    if (!p2p.empty()) {
      auto r = std::make_unique<Run>();
      r->ctx = std::make_unique<ExecCtx>(p2p[0]->args, comm->rank, comm->nranks,
                                         comm->conns.data(), kP2pChannel, k, comm->chunkBytes,
                                         &comm->topo, comm->traffic.get());
      r->ops = p2p;
      initItem(*r, comm, p2pBatchTask(*r->ctx, p2p));
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
