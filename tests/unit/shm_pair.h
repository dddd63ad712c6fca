// Helpers shared by the shared-memory transport's unit tests (test_shm.cc,
// test_shm_transport.cc, test_cma.cc, test_ll.cc): one FIFO in private
// memory that a producer view and a consumer view share, the byte pattern
// the tests send, and an int32 sum kernel for reducing receives.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "transports/shm/fifo.h"

namespace tide::shmtest {

// A FIFO of `slots` slots of `slotSize` bytes in 64-byte aligned heap memory,
// initialised; `view` is a view of it. Owns the memory; not copyable. Both
// sides of a test may use views of it from different threads (the FIFO is
// single-producer, single-consumer).
class FifoMem {
 public:
  FifoMem(uint32_t slots, size_t slotSize) : slots_(slots), slotSize_(slotSize) {
    size_t n = shm::alignUp(shm::FifoView::footprint(slots, slotSize), 64);
    mem = static_cast<char*>(std::aligned_alloc(64, n));
    shm::FifoView::initialize(mem, slots, slotSize);
    view = newView();
  }
  ~FifoMem() { std::free(mem); }
  FifoMem(const FifoMem&) = delete;
  FifoMem& operator=(const FifoMem&) = delete;

  // Another view of the same FIFO; it resumes from the shared state.
  shm::FifoView newView() const { return shm::FifoView(mem, slots_, slotSize_); }

  char* mem;
  shm::FifoView view;

 private:
  uint32_t slots_;
  size_t slotSize_;
};

// Byte i of the test message with seed `seed`.
inline unsigned char pattern(uint32_t seed, size_t i) {
  return static_cast<unsigned char>(seed * 131 + i * 7 + (i >> 9));
}

inline std::vector<unsigned char> makeData(uint32_t seed, size_t n) {
  std::vector<unsigned char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = pattern(seed, i);
  return v;
}

// dst[i] = a[i] + b[i] over `count` int32 elements (a ReduceFn).
inline void sumInt32(void* dst, const void* a, const void* b, size_t count) {
  auto* d = static_cast<int32_t*>(dst);
  auto* x = static_cast<const int32_t*>(a);
  auto* y = static_cast<const int32_t*>(b);
  for (size_t i = 0; i < count; ++i) d[i] = x[i] + y[i];
}

}  // namespace tide::shmtest
