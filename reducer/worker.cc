// The reducer's communication thread (reducer/worker.h).
#include "reducer/worker.h"

#include <cstdio>
#include <cstring>
#include <utility>

namespace tide_reducer {

double nowUs() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

Worker::Worker(tideComm_t comm, tideDataType_t dtype, size_t elemSize, tideRedOp_t op, bool trace)
    : comm_(comm), dtype_(dtype), elemSize_(elemSize), op_(op), trace_(trace) {
  thread_ = std::thread([this] { loop(); });
}

Worker::~Worker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Worker::submit(Job job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(job));
    submitted_++;
  }
  cv_.notify_one();
}

tideResult_t Worker::drain(std::string* msg) {
  std::unique_lock<std::mutex> lock(mu_);
  doneCv_.wait(lock, [&] { return finished_ == submitted_; });
  const tideResult_t e = error_;
  if (msg != nullptr) *msg = errorMsg_;
  error_ = tideSuccess;
  errorMsg_.clear();
  return e;
}

std::vector<TraceEvent> Worker::takeTrace() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<TraceEvent> out;
  out.swap(events_);
  return out;
}

void Worker::loop() {
  // A background thread: its waits sleep at once rather than spin or yield
  // on the cores the caller's backward pass is using (docs/overlap.md).
  tideSetThreadWaitMode(tideWaitSleep);
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_, nothing left
    const Job job = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    const double t0 = trace_ ? nowUs() : 0;
    // Blocking calls (the NULL stream): bounded by the communicator's
    // no-progress timeout, ended by tideCommAbort.
    const tideResult_t rc =
        job.compressor != nullptr
            ? tideAllReduceCompressed(job.buf, job.buf, job.count, dtype_, op_, job.compressor,
                                      comm_, nullptr)
            : tideAllReduce(job.buf, job.buf, job.count, dtype_, op_, comm_, nullptr);
    std::string detail;
    if (rc != tideSuccess) detail = tideGetLastError(comm_);
    if (rc == tideSuccess) {
      for (const CopyBack& c : job.copies) std::memcpy(c.dst, c.src, c.bytes);
    }
    const double t1 = trace_ ? nowUs() : 0;
    lock.lock();
    if (rc != tideSuccess && error_ == tideSuccess) {
      error_ = rc;
      char buf[64];
      snprintf(buf, sizeof(buf), "bucket %d's All-Reduce failed: ", job.bucket);
      errorMsg_ = buf + detail;
    }
    if (trace_ && events_.size() < (size_t{1} << 20))
      events_.push_back(TraceEvent{job.bucket, job.step, job.count * elemSize_, t0, t1});
    finished_++;
    doneCv_.notify_all();
  }
}

}  // namespace tide_reducer
