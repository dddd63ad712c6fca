// A pipeline direction over its own communicator and host stream
// (train/pipeline_channel.h).
#include "train/pipeline_channel.h"

#include <sched.h>
#include <unistd.h>

#include <cstdlib>
#include <utility>

#include "io/error.h"
#include "train/comm.h"

namespace tide_train {

namespace {

// More ranks on this node (as the launcher says) than CPUs to run them.
bool oversubscribed() {
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof(mask), &mask) == 0 && CPU_COUNT(&mask) > 1)
    cpus = CPU_COUNT(&mask);
  for (const char* v :
       {"TIDE_LOCAL_WORLD_SIZE", "LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"}) {
    const char* s = std::getenv(v);
    if (s != nullptr && std::atoi(s) > 0) return std::atol(s) > cpus;
  }
  return false;
}

}  // namespace

Channel::Channel(tideComm_t comm, int peer, bool sending, std::string what)
    : comm_(comm), peer_(peer), sending_(sending), what_(std::move(what)) {
  // A receiving end waits in the compute thread: briefly spinning, then
  // yielding, when every rank has a core; sleeping at once when ranks share
  // cores (a yielding waiter takes half the core from the rank computing on it).
  sleep_wait_ = oversubscribed();
  if (!sending_) return;  // received by the waiting thread itself
  const tideResult_t r = tideStreamCreate(&stream_);
  if (r != tideSuccess) {
    tideCommDestroy(comm_);
    check_tide(r, nullptr, "creating a pipeline stream");
  }
  // The compute thread's CPU, when the rank is pinned to one (TIDE_PIN).
  cpu_set_t mine;
  CPU_ZERO(&mine);
  if (sched_getaffinity(0, sizeof(mine), &mine) == 0 && CPU_COUNT(&mine) == 1)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &mine)) avoid_cpu_ = c;
  // Set on the stream's thread, by a callback it runs first: it waits in the
  // background while this rank computes, so it sleeps at once instead of
  // spinning and yielding; and it runs on any CPU but the compute thread's.
  // A pinned rank's threads inherit its one CPU, and even unpinned, the
  // kernel wakes a thread near its waker: there it waits behind the compute
  // (milliseconds, the scheduler's wake-up granularity) while the peer that
  // needs the message sits idle on its own core.
  tideStreamAddCallback(
      stream_,
      [](tideStream_t, tideResult_t, const char*, void* self) {
        tideSetThreadWaitMode(tideWaitSleep);
        cpu_set_t all;
        CPU_ZERO(&all);
        for (int c = 0; c < CPU_SETSIZE; ++c) CPU_SET(c, &all);
        sched_setaffinity(0, sizeof(all), &all);  // restricted to the cpuset; best effort
        const int avoid = static_cast<Channel*>(self)->avoid_cpu_;
        cpu_set_t now;
        CPU_ZERO(&now);
        if (avoid >= 0 && sched_getaffinity(0, sizeof(now), &now) == 0 && CPU_COUNT(&now) > 1) {
          CPU_CLR(avoid, &now);
          sched_setaffinity(0, sizeof(now), &now);
        }
      },
      this);
}

Channel::~Channel() {
  bool clean = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    clean = error_.empty() && done_ == posted_;
  }
  if (clean) {
    if (stream_ != nullptr) tideStreamDestroy(stream_);
    tideCommDestroy(comm_);
  } else {
    // A peer failed or the step was abandoned: stop the queued operations
    // at once rather than letting each run into the timeout.
    tideCommAbort(comm_);
    if (stream_ != nullptr) tideStreamDestroy(stream_);
  }
}

void Channel::completed(tideStream_t /*stream*/, tideResult_t status, const char* message,
                        void* self) {
  auto* c = static_cast<Channel*>(self);
  std::lock_guard<std::mutex> lock(c->mu_);
  ++c->done_;
  if (status != tideSuccess && c->error_.empty()) {
    c->error_ = std::string(tideGetErrorString(status));
    if (message != nullptr && *message != '\0') c->error_ += std::string(" (") + message + ")";
  }
  c->cv_.notify_all();
}

size_t Channel::send(const float* buf, size_t n) {
  if (!sending_) throw Error("pipeline channel from " + what_ + " only receives");
  return queued(tideSend(buf, n, tideFloat32, peer_, comm_, stream_));
}

size_t Channel::receive(float* buf, size_t n) {
  if (sending_) throw Error("pipeline channel to " + what_ + " only sends");
  pending_.emplace_back(buf, n);
  return posted_++;
}

size_t Channel::queued(tideResult_t issued) {
  check_tide(issued, comm_,
             std::string(sending_ ? "pipeline send to " : "pipeline receive from ") + what_);
  check_tide(tideStreamAddCallback(stream_, &Channel::completed, this), comm_,
             "tideStreamAddCallback");
  std::lock_guard<std::mutex> lock(mu_);
  return posted_++;
}

void Channel::wait(size_t ticket) {
  if (!sending_) {
    if (!error_.empty()) throw Error("pipeline receive from " + what_ + ": " + error_);
    while (done_ <= ticket && done_ < posted_) {
      auto [buf, n] = pending_[done_ - (posted_ - pending_.size())];
      if (sleep_wait_) tideSetThreadWaitMode(tideWaitSleep);
      const tideResult_t r = tideRecv(buf, n, tideFloat32, peer_, comm_, nullptr);
      if (sleep_wait_) tideSetThreadWaitMode(tideWaitDefault);
      if (r != tideSuccess) {
        error_ = tideGetErrorString(r);
        const char* m = tideGetLastError(comm_);
        if (m != nullptr && *m != '\0') error_ += std::string(" (") + m + ")";
        throw Error("pipeline receive from " + what_ + ": " + error_);
      }
      ++done_;
    }
    if (done_ == posted_) pending_.clear();
    return;
  }
  std::unique_lock<std::mutex> lock(mu_);
  // The stream's operations carry the library's no-progress timeout, so the
  // callback always comes: with success, or with the error that ends this.
  cv_.wait(lock, [&] { return done_ > ticket || !error_.empty(); });
  if (!error_.empty())
    throw Error(std::string(sending_ ? "pipeline send to " : "pipeline receive from ") + what_ +
                ": " + error_);
}

void Channel::drain() {
  size_t n = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    n = posted_;
  }
  if (n > 0) wait(n - 1);
}

}  // namespace tide_train
