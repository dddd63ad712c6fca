// Host streams: a worker thread per stream runs its jobs in order, so the
// caller's thread is free to compute while communication progresses. The
// registry of live host streams tells them apart from CUDA streams passed as
// tideStream_t (core/device/device_stream.h).
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <iterator>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "core/exec/job.h"
#include "core/log.h"

struct tideStream {
  std::mutex mu;
  std::condition_variable cv;      // work queued or stop
  std::condition_variable idleCv;  // a job finished
  std::deque<std::shared_ptr<tide::Job>> queue;
  uint64_t enqueued = 0;
  uint64_t completed = 0;
  tide::Status firstError;
  bool stop = false;
  bool workerIdle = false;  // the worker waits on cv (so enqueue must wake it)
  // enqueued and completed, readable without the lock (the brief waits below).
  std::atomic<uint64_t> enqueuedA{0};
  std::atomic<uint64_t> completedA{0};
  // The first error since the last callback (tideStreamAddCallback); only the
  // worker touches it.
  tide::Status sinceCallback;
  int syncWaiters = 0;  // threads in Synchronize/Destroy (so the worker must wake them)
  std::thread worker;
};

namespace tide {

namespace {

std::mutex gStreamsMu;
std::set<const tideStream*> gStreams;  // made by tideStreamCreate, not destroyed

// How long a stream's worker, or a thread synchronizing it, yields before it
// sleeps: launches that follow one another closely (a training step's
// buckets, a benchmark's iterations) then cost no wake-up (a futex wake and a
// context switch, several microseconds on a loaded or virtual machine).
// Yielding, not spinning: a rank that needs this core gets it at once.
constexpr auto kBriefWait = std::chrono::microseconds(50);

template <class Pred>
bool waitBriefly(Pred done) {
  const auto end = std::chrono::steady_clock::now() + kBriefWait;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= end) return false;
    sched_yield();
  }
  return true;
}

void workerLoop(tideStream* s) {
  pthread_setname_np(pthread_self(), "tide-stream");  // for top, perf and gdb
  // The jobs queued so far, taken in one go: one lock per batch, not two
  // per job, so the issuing thread rarely finds the queue's lock held.
  std::vector<std::shared_ptr<Job>> batch;
  for (;;) {
    waitBriefly([&] {
      return s->enqueuedA.load(std::memory_order_acquire) !=
             s->completedA.load(std::memory_order_relaxed);
    });
    {
      std::unique_lock<std::mutex> lock(s->mu);
      s->workerIdle = true;
      s->cv.wait(lock, [&] { return s->stop || !s->queue.empty(); });
      s->workerIdle = false;
      if (s->queue.empty()) return;  // stop requested and drained
      batch.assign(std::make_move_iterator(s->queue.begin()),
                   std::make_move_iterator(s->queue.end()));
      s->queue.clear();
    }
    Status firstError;
    for (std::shared_ptr<Job>& job : batch) {
      // Every earlier job of this stream is done.
      if (job->callback != nullptr) {
        Status seen = std::move(s->sinceCallback);
        s->sinceCallback = Status::Ok();
        job->callback(s, seen.code(), seen.message().c_str(), job->callbackData);
        job.reset();
        s->completedA.fetch_add(1, std::memory_order_release);
        continue;
      }
      if (job->arrive()) {
        executeJob(*job);
      } else {
        job->waitDone();
      }
      if (!job->result.ok() && firstError.ok()) firstError = job->result;
      if (!job->result.ok() && s->sinceCallback.ok()) s->sinceCallback = job->result;
      job.reset();  // back to the pool
      s->completedA.fetch_add(1, std::memory_order_release);
    }
    bool wake;
    {
      std::lock_guard<std::mutex> lock(s->mu);
      s->completed += batch.size();
      if (!firstError.ok() && s->firstError.ok()) s->firstError = firstError;
      // Waking a synchronizing thread per job would steal the CPU from the
      // ranks doing the work: wake it only when the stream drains.
      wake = s->syncWaiters > 0 && s->completed == s->enqueued;
    }
    batch.clear();
    if (wake) s->idleCv.notify_all();
  }
}

}  // namespace

bool isHostStream(const tideStream* s) {
  std::lock_guard<std::mutex> lock(gStreamsMu);
  return gStreams.count(s) != 0;
}

void streamEnqueue(tideStream* stream, std::shared_ptr<Job> job) {
  bool wake;
  {
    std::lock_guard<std::mutex> lock(stream->mu);
    stream->queue.push_back(std::move(job));
    ++stream->enqueued;
    stream->enqueuedA.store(stream->enqueued, std::memory_order_release);
    wake = stream->workerIdle;
  }
  if (wake) stream->cv.notify_one();
}

}  // namespace tide

tide::Status tideStreamCreateImpl(tideStream** out) {
  // Jobs for the first launches of a stream (a benchmark's or a training
  // step's worth queued at once) made here, not on the per-call path.
  tide::reserveJobs(128);
  auto* s = new tideStream();
  s->worker = std::thread(tide::workerLoop, s);
  {
    std::lock_guard<std::mutex> lock(tide::gStreamsMu);
    tide::gStreams.insert(s);
  }
  *out = s;
  return tide::Status::Ok();
}

tide::Status tideStreamAddCallbackImpl(tideStream* s, tideStreamCallback_t callback, void* data) {
  std::shared_ptr<tide::Job> job = tide::newJob();
  job->callback = callback;
  job->callbackData = data;
  tide::streamEnqueue(s, std::move(job));
  return tide::Status::Ok();
}

tide::Status tideStreamSynchronizeImpl(tideStream* s) {
  // A brief wait only for the last job or two: with more queued the wait is
  // long, and a yielding thread would take the CPU from the ranks doing the
  // work (with more ranks than cores, every yield is a context switch).
  const uint64_t queued =
      s->enqueuedA.load(std::memory_order_relaxed) - s->completedA.load(std::memory_order_relaxed);
  if (queued <= 2) {
    tide::waitBriefly([&] {
      return s->completedA.load(std::memory_order_acquire) ==
             s->enqueuedA.load(std::memory_order_relaxed);
    });
  }
  std::unique_lock<std::mutex> lock(s->mu);
  ++s->syncWaiters;
  s->idleCv.wait(lock, [&] { return s->completed == s->enqueued; });
  --s->syncWaiters;
  tide::Status err = std::move(s->firstError);
  s->firstError = tide::Status::Ok();
  return err;
}

tide::Status tideStreamQueryImpl(tideStream* s) {
  std::lock_guard<std::mutex> lock(s->mu);
  if (s->completed != s->enqueued) return tide::Status(tideInProgress, "");
  return s->firstError;
}

tide::Status tideStreamDestroyImpl(tideStream* s) {
  {
    std::lock_guard<std::mutex> lock(s->mu);
    s->stop = true;
  }
  s->cv.notify_all();
  s->worker.join();
  {
    std::lock_guard<std::mutex> lock(tide::gStreamsMu);
    tide::gStreams.erase(s);
  }
  tide::Status err = std::move(s->firstError);
  delete s;
  return err;
}
