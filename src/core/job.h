// A job: the operations launched together (one call, or one group), possibly
// on several communicators and streams. Whoever claims it first runs it (the
// calling thread for a NULL stream, else a host stream's worker); everybody
// else who queued it waits for it to be done.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "core/enqueue.h"

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

  bool claim() { return !claimed.exchange(true); }
  void waitDone() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done; });
  }
};

// Runs the job on the calling thread: waits for its tickets, executes every
// operation, records errors (sticky on the communicators), advances the
// tickets and marks the job done. Never throws.
void executeJob(Job& job);

// Queues a job on a host stream (core/stream.cc).
void streamEnqueue(tideStream* stream, std::shared_ptr<Job> job);

}  // namespace tide
