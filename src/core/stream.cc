// Host streams: a worker thread per stream runs its jobs in order, so the
// caller's thread is free to compute while communication progresses.
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "core/job.h"
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
  std::thread worker;
};

namespace tide {

namespace {

void workerLoop(tideStream* s) {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(s->mu);
      s->cv.wait(lock, [&] { return s->stop || !s->queue.empty(); });
      if (s->queue.empty()) return;  // stop requested and drained
      job = s->queue.front();
    }
    if (job->claim()) {
      executeJob(*job);
    } else {
      job->waitDone();
    }
    {
      std::lock_guard<std::mutex> lock(s->mu);
      s->queue.pop_front();
      ++s->completed;
      if (!job->result.ok() && s->firstError.ok()) s->firstError = job->result;
    }
    s->idleCv.notify_all();
  }
}

}  // namespace

void streamEnqueue(tideStream* stream, std::shared_ptr<Job> job) {
  {
    std::lock_guard<std::mutex> lock(stream->mu);
    stream->queue.push_back(std::move(job));
    ++stream->enqueued;
  }
  stream->cv.notify_one();
}

}  // namespace tide

tide::Status tideStreamCreateImpl(tideStream** out) {
  auto* s = new tideStream();
  s->worker = std::thread(tide::workerLoop, s);
  *out = s;
  return tide::Status::Ok();
}

tide::Status tideStreamSynchronizeImpl(tideStream* s) {
  std::unique_lock<std::mutex> lock(s->mu);
  s->idleCv.wait(lock, [&] { return s->completed == s->enqueued; });
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
  tide::Status err = std::move(s->firstError);
  delete s;
  return err;
}
