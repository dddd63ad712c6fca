// The waiting/signalling half of the CPU platforms that the device engines'
// logic tests (test_device_coll_logic.cc, test_device_ring_logic.cc) run the
// kernels' step functions on: one "thread" per block, std::atomic_ref for the
// flag words (release/acquire, as the kernels' system-scope accesses), the
// steady clock for the bounded waits. A test's platform derives from it and
// adds its element work (reduce / combine / copy).
#pragma once

#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

namespace tide::cuda::testhost {

struct HostWaits {
  bool leader() const { return true; }
  uint64_t share(uint64_t v) const { return v; }
  void barrier() const {}
  void signal(uint64_t* f, uint64_t v) const {
    std::atomic_ref<uint64_t>(*f).store(v, std::memory_order_release);
  }
  uint64_t poll(const uint64_t* f) const {
    return std::atomic_ref<uint64_t>(*const_cast<uint64_t*>(f)).load(std::memory_order_acquire);
  }
  uint64_t nowNs() const {
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::steady_clock::now().time_since_epoch())
                                     .count());
  }
  bool aborted(const volatile uint32_t* w) const {
    return std::atomic_ref<uint32_t>(*const_cast<uint32_t*>(w)).load(std::memory_order_acquire) !=
           0;
  }
  // Spin briefly, then yield, then sleep: waiting threads leave the core
  // (ranks outnumber the cores here).
  void pause(uint64_t it) const {
    if (it < 64) return;
    if (it < 1024) {
      sched_yield();
      return;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  void setError(uint32_t* w, uint32_t code) const {
    uint32_t zero = 0;
    std::atomic_ref<uint32_t>(*w).compare_exchange_strong(zero, code);
  }
};

}  // namespace tide::cuda::testhost
