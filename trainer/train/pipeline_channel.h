// One direction of point-to-point traffic between two pipeline ranks, over a
// two-rank communicator of its own (split from the pipeline group), so that
// each direction stays one FIFO whose order both ends agree on (the
// schedule's per-pair message order, pipeline/schedule.h).
//
// The sending end queues its sends on a Tide host stream, so that they never
// wait behind the rank's receives or compute (the simulator's timing: eager
// sends). The receiving end has no thread of its own: the compute thread that
// needs a message receives it, and the ones queued before it, itself (a
// blocking tideRecv, which spins briefly, then yields, then sleeps; or sleeps
// at once when the node has more ranks than CPUs): in a
// steady 1F1B phase every hand-off is on the critical path, and a receive
// completed on a background thread costs two more wake-ups (that thread's and
// the compute thread's) before the compute can start.
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
#include <utility>
#include <vector>

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
  // returns its ticket (0, 1, ... over the channel's life). Never blocks: a
  // receive is made by the wait that needs it.
  size_t send(const float* buf, size_t n);
  size_t receive(float* buf, size_t n);
  // Blocks until operation `ticket` has completed (on a receiving end: makes
  // the queued receives up to it, in order).
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
  int avoid_cpu_ = -1;
  bool sleep_wait_ = false;  // receiving: sleep at once in tideRecv (ranks share cores)  // the CPU
                             // the rank's compute thread is pinned to, if one
  std::vector<std::pair<float*, size_t>> pending_;  // receiving end: ticket done_ + i
};

}  // namespace tide_train
