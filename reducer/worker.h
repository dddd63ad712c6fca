// The reducer's communication thread (when the caller gives no stream): it
// runs the bucket All-Reduces one after another, in submission order (the
// agreed bucket order), with blocking Tide calls, so progress never depends
// on the caller and each bucket's start and end are known (the trace of
// TIDE_REDUCER_TRACE, docs/overlap.md). While a step's buckets are queued
// only this thread calls into the communicator; the reducer's own calls
// (step check, rebuild) come after drain().
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tide/compress.h"
#include "tide/tide.h"

namespace tide_reducer {

// A copy the worker makes once the job's All-Reduce succeeded (a staged
// bucket back into the caller's gradients, overlapped with later buckets).
struct CopyBack {
  void* dst = nullptr;
  const void* src = nullptr;
  size_t bytes = 0;
};

// Staging buffers of reduce-scatter mode, lent to a bucket from its first
// MarkReady (or its launch) until its Reduce-Scatter is done (the worker
// gives it back), so the staging is a few buffers made at creation (the
// same bytes on every rank), not the whole gradient size: two of the
// largest bucket's size (double buffering, one bucket in flight while the
// next fills), or one per bucket when that is less. When every buffer is lent, acquire waits for a
// bucket in flight to finish (each is bounded by the communicator's timeout); with none in flight
// (the lent ones wait for marks) it makes one more. With `wait` false (no worker: the caller's
// stream, whose buffers come back at Wait) none is made ahead and each is the bucket's size.
// Thread-safe.
class StagingPool {
 public:
  // made: the buffers made now (with wait); bufferBytes: a new one's size.
  StagingPool(const std::vector<size_t>& made, size_t bufferBytes, bool wait);
  std::vector<unsigned char> acquire(size_t bytes);
  // The buffer now belongs to a job queued on the worker.
  void inFlight();
  // Given back (by a job: fromJob).
  void release(std::vector<unsigned char> buf, bool fromJob);
  // Bytes allocated now (lent or free) and at most so far.
  void bytes(size_t* current, size_t* peak);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  size_t bufferBytes_;
  bool wait_;
  std::vector<std::vector<unsigned char>> free_;
  int inFlight_ = 0;
  size_t current_ = 0, peak_ = 0;
};

struct Job {
  void* buf = nullptr;
  size_t count = 0;
  tideCompressor_t compressor = nullptr;
  int bucket = 0;
  uint64_t step = 0;
  std::vector<CopyBack> copies;
  // Reduce-scatter mode: an in-place Reduce-Scatter of recvcount elements
  // per rank (this rank's chunk at recvOffset bytes into buf), whose result
  // is then added into addTo.
  bool scatter = false;
  bool gather = false;  // an in-place All-Gather of recvcount per rank (this rank's at recvOffset)
  size_t recvcount = 0;
  size_t recvOffset = 0;
  void* addTo = nullptr;
  // The staging buffer the job owns (buf points into it), given back to
  // `pool` once the job ran.
  std::vector<unsigned char> owned;
  StagingPool* pool = nullptr;
};

// dst[i] += src[i] for n elements of dtype (float32 or float64).
void addInto(void* dst, const void* src, size_t n, tideDataType_t dtype);

// One bucket's communication, in microseconds of std::chrono::steady_clock.
struct TraceEvent {
  int bucket = 0;
  uint64_t step = 0;
  size_t bytes = 0;
  double startUs = 0;
  double endUs = 0;
};

double nowUs();

class Worker {
 public:
  Worker(tideComm_t comm, tideDataType_t dtype, size_t elemSize, tideRedOp_t op, bool trace);
  ~Worker();  // finishes the queued jobs, then joins
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Returns the job's number (1, 2, ...: submission order).
  uint64_t submit(Job job);
  // Blocks until job `seq` and every one before it ran; the first failure
  // since the last drain or waitFor (tideSuccess: none).
  tideResult_t waitFor(uint64_t seq, std::string* msg);
  // Blocks until every submitted job has run (each is bounded by the
  // communicator's timeout); the first failure since the last drain, as
  // code and message (tideSuccess: none).
  tideResult_t drain(std::string* msg);
  std::vector<TraceEvent> takeTrace();

 private:
  void loop();

  tideComm_t comm_;
  tideDataType_t dtype_;
  size_t elemSize_;
  tideRedOp_t op_;
  bool trace_;
  std::mutex mu_;
  std::condition_variable cv_;      // jobs or stop for the thread
  std::condition_variable doneCv_;  // a job finished
  std::deque<Job> queue_;
  uint64_t submitted_ = 0, finished_ = 0;
  bool stop_ = false;
  tideResult_t error_ = tideSuccess;
  std::string errorMsg_;
  std::vector<TraceEvent> events_;
  std::thread thread_;
};

}  // namespace tide_reducer
