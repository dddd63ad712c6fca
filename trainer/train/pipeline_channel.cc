// A pipeline direction over its own communicator and host stream
// (train/pipeline_channel.h).
#include "train/pipeline_channel.h"

#include <sched.h>

#include <utility>

#include "io/error.h"
#include "train/comm.h"

namespace tide_train {

Channel::Channel(tideComm_t comm, int peer, bool sending, std::string what)
    : comm_(comm), peer_(peer), sending_(sending), what_(std::move(what)) {
  const tideResult_t r = tideStreamCreate(&stream_);
  if (r != tideSuccess) {
    tideCommDestroy(comm_);
    check_tide(r, nullptr, "creating a pipeline stream");
  }
  // Set on the stream's thread, by a callback it runs first: it waits in the
  // background while this rank computes, so it sleeps at once instead of
  // spinning and yielding; and it may run on any CPU. A pinned rank's
  // threads inherit its one CPU (TIDE_PIN), where a woken thread waits for
  // the compute to give the core up (milliseconds) while the peer that
  // needs the message sits idle on its own core.
  tideStreamAddCallback(
      stream_,
      [](tideStream_t, tideResult_t, const char*, void*) {
        tideSetThreadWaitMode(tideWaitSleep);
        cpu_set_t all;
        CPU_ZERO(&all);
        for (int c = 0; c < CPU_SETSIZE; ++c) CPU_SET(c, &all);
        sched_setaffinity(0, sizeof(all), &all);  // restricted to the cpuset; best effort
      },
      nullptr);
}

Channel::~Channel() {
  bool clean = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    clean = error_.empty() && done_ == posted_;
  }
  if (clean) {
    tideStreamDestroy(stream_);
    tideCommDestroy(comm_);
  } else {
    // A peer failed or the step was abandoned: stop the queued operations
    // at once rather than letting each run into the timeout.
    tideCommAbort(comm_);
    tideStreamDestroy(stream_);
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
  return queued(tideRecv(buf, n, tideFloat32, peer_, comm_, stream_));
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
