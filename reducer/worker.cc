// The reducer's communication thread (reducer/worker.h).
#include "reducer/worker.h"

#include <algorithm>
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

StagingPool::StagingPool(const std::vector<size_t>& made, size_t bufferBytes, bool wait)
    : bufferBytes_(bufferBytes), wait_(wait) {
  for (size_t n : made) {
    if (!wait_ || n == 0) continue;
    free_.emplace_back(n);
    current_ += n;
  }
  peak_ = current_;
}

std::vector<unsigned char> StagingPool::acquire(size_t bytes) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    size_t best = free_.size();
    for (size_t i = 0; i < free_.size(); ++i)
      if (free_[i].size() >= bytes &&
          (best == free_.size() || free_[i].size() < free_[best].size()))
        best = i;
    if (best != free_.size()) {
      std::vector<unsigned char> out = std::move(free_[best]);
      free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(best));
      return out;
    }
    if (!wait_ || inFlight_ == 0) break;
    cv_.wait(lock);
  }
  std::vector<unsigned char> out(wait_ ? std::max(bytes, bufferBytes_) : bytes);
  current_ += out.size();
  if (current_ > peak_) peak_ = current_;
  return out;
}

void StagingPool::inFlight() {
  std::lock_guard<std::mutex> lock(mu_);
  inFlight_++;
}

void StagingPool::release(std::vector<unsigned char> buf, bool fromJob) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (fromJob) inFlight_--;
    if (!buf.empty()) free_.push_back(std::move(buf));
  }
  cv_.notify_all();
}

void StagingPool::bytes(size_t* current, size_t* peak) {
  std::lock_guard<std::mutex> lock(mu_);
  *current = current_;
  *peak = peak_;
}

uint64_t Worker::submit(Job job) {
  uint64_t seq;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(job));
    seq = ++submitted_;
  }
  cv_.notify_one();
  return seq;
}

tideResult_t Worker::waitFor(uint64_t seq, std::string* msg) {
  std::unique_lock<std::mutex> lock(mu_);
  doneCv_.wait(lock, [&] { return finished_ >= seq; });
  const tideResult_t e = error_;
  if (msg != nullptr) *msg = errorMsg_;
  error_ = tideSuccess;
  errorMsg_.clear();
  return e;
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
    Job job = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    const double t0 = trace_ ? nowUs() : 0;
    // Blocking calls (the NULL stream): bounded by the communicator's
    // no-progress timeout, ended by tideCommAbort.
    tideResult_t rc;
    unsigned char* recv = static_cast<unsigned char*>(job.buf) + job.recvOffset;
    if (job.gather) {
      rc = job.compressor != nullptr
               ? tideAllGatherCompressed(recv, job.buf, job.recvcount, dtype_, job.compressor,
                                         comm_, nullptr)
               : tideAllGather(recv, job.buf, job.recvcount, dtype_, comm_, nullptr);
    } else if (job.scatter) {
      rc = job.compressor != nullptr
               ? tideReduceScatterCompressed(job.buf, recv, job.recvcount, dtype_, op_,
                                             job.compressor, comm_, nullptr)
               : tideReduceScatter(job.buf, recv, job.recvcount, dtype_, op_, comm_, nullptr);
    } else {
      rc = job.compressor != nullptr
               ? tideAllReduceCompressed(job.buf, job.buf, job.count, dtype_, op_, job.compressor,
                                         comm_, nullptr)
               : tideAllReduce(job.buf, job.buf, job.count, dtype_, op_, comm_, nullptr);
    }
    std::string detail;
    if (rc != tideSuccess) detail = tideGetLastError(comm_);
    if (rc == tideSuccess) {
      for (const CopyBack& c : job.copies) std::memcpy(c.dst, c.src, c.bytes);
      if (job.addTo != nullptr) addInto(job.addTo, recv, job.recvcount, dtype_);
    }
    if (job.pool != nullptr) job.pool->release(std::move(job.owned), true);
    const double t1 = trace_ ? nowUs() : 0;
    lock.lock();
    if (rc != tideSuccess && error_ == tideSuccess) {
      error_ = rc;
      char buf[64];
      snprintf(buf, sizeof(buf), "bucket %d's %s failed: ", job.bucket,
               job.gather    ? "All-Gather"
               : job.scatter ? "Reduce-Scatter"
                             : "All-Reduce");
      errorMsg_ = buf + detail;
    }
    if (trace_ && events_.size() < (size_t{1} << 20))
      events_.push_back(TraceEvent{job.bucket, job.step, job.count * elemSize_, t0, t1});
    finished_++;
    doneCv_.notify_all();
  }
}

}  // namespace tide_reducer
