// A job: the operations launched together (one call, or one group), possibly
// on several communicators and streams. On host streams it runs once every
// party has reached it: each host stream it is queued on (at the front of
// that stream's queue, so all earlier work of the stream is done) and the
// issuing thread when one of its ops uses the NULL stream; the last to arrive
// runs it and the others wait for it to be done. The CUDA-stream path
// (core/device/device_stream.cc, core/device/device_stream_proxy.cc) runs it on whoever
// claims it first.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "core/op.h"

namespace tide {

struct Job {
  std::vector<OpDesc> ops;
  // One ticket per distinct communicator, in first-use order.
  std::vector<std::pair<tideComm*, uint64_t>> tickets;
  std::atomic<bool> claimed{false};
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Status result;
  // A host-stream callback (tideStreamAddCallback) instead of operations: the
  // stream's worker calls it with the first error since the previous one.
  tideStreamCallback_t callback = nullptr;
  void* callbackData = nullptr;
  // Storage for the control block of newJob()'s shared_ptr (core/exec/job.cc).
  alignas(std::max_align_t) unsigned char controlBlock[64];

  bool claim() { return !claimed.exchange(true); }
  // Host streams: `parties` is set before the job is queued anywhere.
  std::atomic<int> arrivals{0};
  int parties = 1;
  // True for the last party to arrive (it runs the job).
  bool arrive() { return arrivals.fetch_add(1) + 1 == parties; }
  void waitDone() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done; });
  }
};

// A cleared Job for a host-stream launch, recycled from a small process-wide
// pool once its last owner let go of it (no allocation per launch in steady
// state: a training loop or a benchmark issues the same shapes again and
// again). Thread-safe.
std::shared_ptr<Job> newJob();
// Fills the pool up to `n` free jobs (at most its cap), so that a stream's
// first launches do not allocate. Thread-safe.
void reserveJobs(size_t n);

// Runs the job on the calling thread: waits for its tickets, executes every
// operation, records errors (sticky on the communicators), advances the
// tickets and marks the job done. Never throws.
void executeJob(Job& job);

// Takes the issue-order tickets of every communicator in `job` (and a user
// count each, released by executeJob) and runs `alsoLocked` under the same
// issue lock, so that the order of the streams' queues (and the CUDA proxy's
// tickets) agrees with it. Thread-safe.
void takeTickets(Job& job, const std::function<void()>& alsoLocked);

// Queues a job on a host stream (core/exec/stream.cc).
void streamEnqueue(tideStream* stream, std::shared_ptr<Job> job);

// True when `s` was made by tideStreamCreate and not destroyed yet
// (core/exec/stream.cc keeps the registry). Thread-safe.
bool isHostStream(const tideStream* s);

}  // namespace tide
