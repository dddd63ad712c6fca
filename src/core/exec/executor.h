// Progress engine: runs a batch of operation tasks to completion on the
// calling thread.
//
// Each sweep progresses every connection an operation has posted on and
// resumes tasks whose awaited transfers are done. When a sweep moves nothing
// the thread backs off: spin (TIDE_SPIN_US), then sched_yield (TIDE_YIELD_US),
// then sleep on the communicator's doorbell (futex, rung by shared-memory
// peers) or poll() the socket connections. Bounded by the abort flags and by
// the no-progress timeout.
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "core/algorithm.h"
#include "core/status.h"
#include "core/task.h"
#include "core/types.h"

namespace tide {

struct ExecItem {
  ExecCtx* ctx = nullptr;
  Task task;
  // Names the operation in error messages ("allreduce #12 (...) on comm
  // 3f2a..."); called only when an error is reported.
  std::string (*describe)(const void* arg) = nullptr;
  const void* describeArg = nullptr;
  std::string what() const { return describe ? describe(describeArg) : "operation"; }
  Doorbell* bell = nullptr;                  // sleep here when idle
  const std::atomic<bool>* abort = nullptr;  // raised by tideCommAbort
  int timeoutSec = 0;                        // no-progress timeout; 0: none
  Status result;                             // filled by runTasks
};

// The calling thread's wait mode (tideSetThreadWaitMode): true: runTasks
// sleeps as soon as it is idle (no spin, no yield).
void setThreadWaitSleep(bool sleep);

// Runs all items; returns the first error (each item's own result is set).
// On error or abort the remaining tasks are destroyed (cancelled).
Status runTasks(std::vector<ExecItem*>& items, const WaitTuning& tuning);

}  // namespace tide
