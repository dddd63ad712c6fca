// The trainer's memory manager: every allocation of tide-train's tensors
// (parameters, gradients, optimizer states, activations, communication
// buffers) is made here, so the bytes of each kind are known per rank, now
// and at their peak (docs/zero.md, "Memory accounting"), and a per-rank cap
// (--mem-cap) turns an allocation that would pass it into a clear Error
// naming what did not fit.
//
// One manager per process (one rank per process). Thread-safe: the pipeline
// channels' threads may allocate. Allocations through std::vector use
// Alloc<T, Kind> (a stateless allocator, so the vector's type names its
// kind); fixed buffers use Buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tide_train::mem {

enum class Kind { kParams = 0, kGrads, kOptim, kAct, kComm };
constexpr int kKinds = 5;
// "params", "grads", "optim", "act", "comm" (the metrics keys' suffixes).
const char* name(Kind k);

struct Usage {
  size_t current[kKinds] = {};
  size_t peak[kKinds] = {};
  size_t current_total = 0, peak_total = 0;
  size_t cap = 0;  // 0: none
};

// Throws Error when bytes would take the total past the cap ("--mem-cap: ...
// <what> ..."); what: the innermost Label, else the kind's name.
void* allocate(Kind k, size_t bytes);
void release(Kind k, void* p, size_t bytes) noexcept;
// Bytes held outside the trainer's own allocations (the reducer's buckets
// inside the library): counted as `k`, checked against the cap like an
// allocation (capped false: not checked, for growth whose timing differs
// between ranks). add < 0 releases.
void account(Kind k, long long add, bool capped = true);
void set_cap(size_t bytes);
Usage usage();
// The peaks restart from the current values (a phase measured on its own).
void reset_peaks();

// Names what is being allocated while it lives (nested: the innermost wins),
// for the cap's error: Label l("the optimizer's moments of layer 3").
class Label {
 public:
  explicit Label(std::string what);
  ~Label();
  Label(const Label&) = delete;
  Label& operator=(const Label&) = delete;
};

template <class T, Kind K>
struct Alloc {
  using value_type = T;
  Alloc() noexcept = default;
  template <class U>
  Alloc(const Alloc<U, K>&) noexcept {}  // NOLINT(google-explicit-constructor)
  template <class U>
  struct rebind {
    using other = Alloc<U, K>;
  };
  T* allocate(size_t n) { return static_cast<T*>(mem::allocate(K, n * sizeof(T))); }
  void deallocate(T* p, size_t n) noexcept { mem::release(K, p, n * sizeof(T)); }
  template <class U>
  bool operator==(const Alloc<U, K>&) const noexcept {
    return true;
  }
};

template <Kind K>
using Floats = std::vector<float, Alloc<float, K>>;
using ActFloats = Floats<Kind::kAct>;
using CommFloats = Floats<Kind::kComm>;

// A fixed buffer of n zeroed elements of kind k (pages touched as written):
// Buffer of floats, HalfBuffer of 16-bit values (mixed precision).
template <class T>
class BasicBuffer {
 public:
  BasicBuffer() = default;
  BasicBuffer(Kind k, size_t n) : k_(k), p_(static_cast<T*>(allocate(k, n * sizeof(T)))), n_(n) {}
  ~BasicBuffer() { reset(); }
  BasicBuffer(BasicBuffer&& o) noexcept
      : k_(o.k_), p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  BasicBuffer& operator=(BasicBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      k_ = o.k_;
      p_ = std::exchange(o.p_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }
  BasicBuffer(const BasicBuffer&) = delete;
  BasicBuffer& operator=(const BasicBuffer&) = delete;
  T* data() { return p_; }
  const T* data() const { return p_; }
  size_t size() const { return n_; }
  void reset() {  // frees it
    release(k_, p_, n_ * sizeof(T));
    p_ = nullptr;
    n_ = 0;
  }

 private:
  Kind k_ = Kind::kComm;
  T* p_ = nullptr;
  size_t n_ = 0;
};
using Buffer = BasicBuffer<float>;
using HalfBuffer = BasicBuffer<uint16_t>;

}  // namespace tide_train::mem
