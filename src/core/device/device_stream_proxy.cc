// The CUDA-stream path's per-communicator state and the two threads that
// are not the issuing one (see core/device/device_stream.cc for the protocol): the
// callbacks on CUDA's callback thread, which only arm the word and post (no
// CUDA calls, short locks), and the communicator's proxy thread, which runs
// the host algorithms and releases the word (no CUDA calls either).
#include <atomic>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/comm.h"
#include "core/device/device_stream.h"
#include "core/device/device_stream_state.h"
#include "core/exec/job.h"
#include "core/log.h"
#include "cuda/cuda_loader.h"
#include "cuda/stream_order.h"

namespace tide {
namespace devstream {

std::atomic<int> gEngines{0};

void CommStateDeleter::operator()(CommState* st) const { delete st; }

// ---- Callbacks (CUDA's callback thread: no CUDA calls, never waits) ----------

void postFn(void* arg) {
  auto* e = static_cast<Entry*>(arg);
  cuda::wordArm(e->word);  // every stream of the job re-arms before its wait
  if (!e->posts.arrive()) return;
  if (e->abandoned.load()) {
    cuda::wordRelease(e->word);
    return;
  }
  const bool ok = e->captured ? e->st->queue.postReplay(e) : e->st->queue.post(e->ticket, e);
  if (!ok) cuda::wordRelease(e->word);
}

void releaseFn(void* arg) {
  auto* e = static_cast<Entry*>(arg);
  if (!e->releases.arrive()) return;
  CommState* st = e->st;
  std::lock_guard<std::mutex> lock(st->mu);
  st->pool.release(e->slot);
  st->live.erase(e);  // frees e
}

namespace {

// ---- Proxy thread ---------------------------------------------------------------

std::string describeEntry(const Entry& e) {
  const OpDesc& op = e.ops.front();
  char buf[160];
  snprintf(buf, sizeof(buf), "%s #%llu%s on comm %08x rank %d", collName(op.args.type),
           static_cast<unsigned long long>(op.seq), e.captured ? " (graph)" : "",
           static_cast<unsigned>(op.comm->commHash), op.comm->rank);
  return buf;
}

// Releases the entry's streams. A receive posted as a device pointer
// (GPUDirect RDMA) is complete on the host once the NIC says so, but its
// bytes may still be on their way into GPU memory: flush them to the owning
// context first, so that the stream's next kernel reads them.
void releaseEntry(Entry* e) {
  for (const OpDesc& op : e->ops) {
    const CollArgs& a = op.args;
    if (a.type != CollType::Recv || a.mem != MemType::Device || a.count == 0) continue;
    const int rc = cuda::flushRdmaWritesTo(a.recvbuff);
    if (rc != cuda::kCudaSuccess) {
      op.comm->setAsyncError(
          driverError("GPUDirect RDMA receive (cuFlushGPUDirectRDMAWrites)", rc));
    }
  }
  cuda::wordRelease(e->word);  // e may be freed from here on (release callback)
}

// Runs one posted entry and releases its streams, whatever happens.
void runEntry(Entry* e) {
  std::shared_ptr<Job> job = e->job;
  if (e->captured) {
    job = std::make_shared<Job>();
    job->ops = e->ops;
    takeTickets(*job, {});
  }
  if (e->failed) {
    for (auto& [comm, ticket] : job->tickets) {
      comm->setAsyncError(makeStatus(tideUnhandledDeviceError, "%s: %s", describeEntry(*e).c_str(),
                                     e->why.c_str()));
    }
  }
  if (job->claim()) executeJob(*job);
  releaseEntry(e);  // e may be freed from here on
}

}  // namespace

void drain(CommState* st) {
  std::vector<std::shared_ptr<Job>> jobs;
  {
    std::lock_guard<std::mutex> lock(st->mu);
    for (auto& [p, e] : st->live) {
      e->abandoned.store(true);
      if (e->job) jobs.push_back(e->job);
    }
  }
  for (Entry* e : st->queue.stop()) {
    if (e->job && e->job->claim()) executeJob(*e->job);
    releaseEntry(e);
  }
  for (auto& job : jobs) {
    if (job->claim()) executeJob(*job);
  }
}

namespace {

void proxyLoop(CommState* st) {
  tideComm* comm = st->comm;
  bool warned = false;
  for (;;) {
    Entry* e = nullptr;
    auto r = st->queue.pop(&e, comm->timeoutSec, &comm->abortFlag);
    if (r == cuda::IssueQueue<Entry*>::Pop::kStopped) break;
    if (r == cuda::IssueQueue<Entry*>::Pop::kTimeout) {
      // The stream has not reached the next issued operation: its earlier
      // work is stuck. Later operations fail fast (sticky) and release
      // their streams; this one still runs when its stream gets there.
      if (!warned) {
        Status s = timeoutError(
            "CUDA stream path of comm %08x rank %d: the next operation's stream did not reach it "
            "within %d s (TIDE_TIMEOUT)",
            static_cast<unsigned>(comm->commHash), comm->rank, comm->timeoutSec);
        comm->setAsyncError(s);
        TIDE_WARN("%s", s.message().c_str());
        warned = true;
      }
      continue;
    }
    runEntry(e);
  }
  drain(st);
}

}  // namespace

CommState* stateOf(tideComm* comm) {
  std::lock_guard<std::mutex> lock(comm->deviceMu);
  if (!comm->device) {
    comm->device.reset(new CommState());
    comm->device->comm = comm;
    comm->device->proxy = std::thread(proxyLoop, comm->device.get());
  }
  return comm->device.get();
}

CommState* findState(tideComm* comm) {
  std::lock_guard<std::mutex> lock(comm->deviceMu);
  return comm->device.get();
}

Status driverError(const char* what, int rc) {
  return makeStatus(tideUnhandledDeviceError, "CUDA stream path: %s: %s", what,
                    cuda::driverErrorString(rc).c_str());
}

std::unique_ptr<CommState> takeState(tideComm* comm) {
  std::lock_guard<std::mutex> lock(comm->deviceMu);
  return std::unique_ptr<CommState>(comm->device.release());
}

}  // namespace devstream
}  // namespace tide
