// One direction of point-to-point traffic between two pipeline ranks: a
// two-rank communicator of its own (split from the pipeline group) and a Tide
// host stream on each side, so that a rank's sends never wait behind its
// receives or its compute (the simulator's timing: eager sends), while each
// direction stays one FIFO whose order both ends agree on (the schedule's
// per-pair message order, pipeline/schedule.h).
//
// Threads: post/wait/drain from the thread that owns the runner; the
// completion callback runs on the stream's thread.
// Errors: a failed send or receive (a dead peer: the library's no-progress
// timeout) makes wait/drain throw Error naming the peer with Tide's message;
// the destructor then aborts the communicator instead of waiting on it.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <string>

#include "tide/tide.h"

namespace tide_train {

class Channel {
 public:
  // comm: the two-rank communicator (owned); peer: the other end's rank in
  // it; sending: this end sends (else receives). what: the peer as the
  // messages name it ("pipeline rank 1 (world rank 3)").
  Channel(tideComm_t comm, int peer, bool sending, std::string what);
  ~Channel();
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;

  // Queues a send (on a sending end) or a receive (on a receiving end) of n
  // floats at buf, which must stay valid until the operation completed;
  // returns its ticket (0, 1, ... over the channel's life). Never blocks.
  size_t send(const float* buf, size_t n);
  size_t receive(float* buf, size_t n);
  // Blocks until operation `ticket` has completed.
  void wait(size_t ticket);
  // Blocks until every posted operation has completed.
  void drain();

 private:
  size_t queued(tideResult_t issued);
  static void completed(tideStream_t stream, tideResult_t status, const char* message, void* self);

  tideComm_t comm_;
  tideStream_t stream_ = nullptr;
  int peer_;
  bool sending_;
  std::string what_;
  std::mutex mu_;
  std::condition_variable cv_;
  size_t posted_ = 0, done_ = 0;
  std::string error_;  // the first failure's message
};

}  // namespace tide_train
