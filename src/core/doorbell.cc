// Process-shared futex doorbell (see core/transport.h for the protocol).
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <climits>

#include "core/transport.h"

namespace tide {

namespace {

long futex(std::atomic<uint32_t>* addr, int op, uint32_t val, const timespec* ts) {
  // Shared (not FUTEX_PRIVATE) so that waiters and wakers in different
  // processes that map the same page meet.
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), op, val, ts, nullptr, 0);
}

}  // namespace

void Doorbell::ring() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (sleepers.load(std::memory_order_seq_cst) == 0) return;
  seq.fetch_add(1, std::memory_order_seq_cst);
  futex(&seq, FUTEX_WAKE, INT_MAX, nullptr);
}

uint32_t Doorbell::prepareWait() {
  sleepers.fetch_add(1, std::memory_order_seq_cst);
  return seq.load(std::memory_order_seq_cst);
}

void Doorbell::cancelWait() { sleepers.fetch_sub(1, std::memory_order_seq_cst); }

void Doorbell::commitWait(uint32_t seen, int64_t timeoutUs) {
  timespec ts{static_cast<time_t>(timeoutUs / 1000000),
              static_cast<long>((timeoutUs % 1000000) * 1000)};
  if (seq.load(std::memory_order_seq_cst) == seen) futex(&seq, FUTEX_WAIT, seen, &ts);
  sleepers.fetch_sub(1, std::memory_order_seq_cst);
}

}  // namespace tide
