// The driver-free logic of Tide's stream-ordered device path
// (core/device/device_stream.cc): the completion-word protocol, the issue-order
// queue the communicator's proxy thread pops, the re-armable fan-in of a job
// that spans several CUDA streams, the pinned slot pool and the chunk
// schedule of a pipelined All-Reduce. Header-only, no CUDA types, so the unit
// test (tests/unit/test_stream_order.cc) runs it with threads standing in for
// CUDA's callback thread, the proxy and the GPU's stream-wait.
//
// The protocol, per operation on a CUDA stream S:
//   S: [copy device input -> pinned slot]   (only for device buffers)
//   S: host callback: wordArm(word); queue.post(ticket) -- never blocks
//   S: wait until *word == kWordDone          (cuStreamWaitValue32 EQ)
//   S: [copy pinned slot -> device output]
//   proxy: pops in ticket order, runs the host collective, wordRelease(word)
// A CUDA graph replays the same nodes: the callback re-arms the word before
// every post, so a replay waits for its own run, never for a stale "done".
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <vector>

namespace tide::cuda {

// ---- Completion word (pinned, device-mapped host memory) ----------------------
inline constexpr uint32_t kWordPending = 0;
inline constexpr uint32_t kWordDone = 1;

// Callback side, before posting: the stream will wait for this run's release.
inline void wordArm(uint32_t* w) {
  std::atomic_ref<uint32_t>(*w).store(kWordPending, std::memory_order_release);
}
// Proxy side, after the results are in the slot (release: the stream's copy
// of the results happens after it observes the word).
inline void wordRelease(uint32_t* w) {
  std::atomic_ref<uint32_t>(*w).store(kWordDone, std::memory_order_release);
}
inline bool wordIsDone(uint32_t* w) {
  return std::atomic_ref<uint32_t>(*w).load(std::memory_order_acquire) == kWordDone;
}

// ---- Fan-in of a job spanning several streams --------------------------------
// Each stream's callback arrives once per run; the last arrival of a run is
// told so and re-arms the count for the next run (a graph replay). Arrivals
// of the next run cannot start before the current run was released, since
// every stream waits for the word after its callback.
class Fanin {
 public:
  explicit Fanin(int n = 1) : n_(n), left_(n) {}
  void reset(int n) {
    n_ = n;
    left_.store(n);
  }
  // True for the last arrival of a run (which then owns the run).
  bool arrive() {
    if (left_.fetch_sub(1, std::memory_order_acq_rel) != 1) return false;
    left_.store(n_, std::memory_order_relaxed);
    return true;
  }

 private:
  int n_;
  std::atomic<int> left_;
};

// ---- Issue-order queue ----------------------------------------------------------
// Operations take a ticket on the issuing thread (reserve) and are posted by
// stream callbacks in any order; the proxy pops them strictly in ticket order,
// so ranks whose operations sit on several streams still run them in the
// order they were issued. Replays of captured work (postReplay) have no
// ticket: they run in post order, ahead of an issued operation whose
// callback has not arrived (that one may sit behind the replay on its
// stream). Thread-safety: all members are safe to call concurrently; post*
// takes a short lock and never waits for the proxy.
template <class T>
class IssueQueue {
 public:
  enum class Pop { kItem, kTimeout, kStopped };

  uint64_t reserve() {
    std::lock_guard<std::mutex> lock(mu_);
    return nextTicket_++;
  }
  // False when the queue was stopped: the caller must release the stream
  // itself (the proxy will not run the item).
  bool post(uint64_t ticket, T item) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopped_) return false;
      posted_.emplace(ticket, std::move(item));
    }
    cv_.notify_one();
    return true;
  }
  bool postReplay(T item) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopped_) return false;
      replays_.push_back(std::move(item));
    }
    cv_.notify_one();
    return true;
  }
  // Proxy: the next item, waiting at most `timeoutSec` (<= 0: no limit) for
  // the next ticket's post; wakes every 50 ms to check `abort` and stop().
  // kTimeout leaves the queue as it was (call again to keep waiting).
  Pop pop(T* out, double timeoutSec, const std::atomic<bool>* abort) {
    const auto start = std::chrono::steady_clock::now();
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      if (stopped_ || (abort != nullptr && abort->load())) return Pop::kStopped;
      auto it = posted_.find(nextRun_);
      if (it != posted_.end()) {
        *out = std::move(it->second);
        posted_.erase(it);
        ++nextRun_;
        return Pop::kItem;
      }
      if (!replays_.empty()) {
        *out = std::move(replays_.front());
        replays_.pop_front();
        return Pop::kItem;
      }
      if (timeoutSec > 0 && nextRun_ < nextTicket_ &&
          std::chrono::steady_clock::now() - start > std::chrono::duration<double>(timeoutSec)) {
        return Pop::kTimeout;
      }
      cv_.wait_for(lock, std::chrono::milliseconds(50));
    }
  }
  // Refuses later posts and returns what was posted but not popped.
  std::vector<T> stop() {
    std::vector<T> left;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopped_ = true;
      for (auto& [t, item] : posted_) left.push_back(std::move(item));
      for (auto& item : replays_) left.push_back(std::move(item));
      posted_.clear();
      replays_.clear();
    }
    cv_.notify_all();
    return left;
  }
  // Tickets reserved but not popped yet (issued work still in flight).
  uint64_t pendingTickets() {
    std::lock_guard<std::mutex> lock(mu_);
    return nextTicket_ - nextRun_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t nextTicket_ = 0;
  uint64_t nextRun_ = 0;
  std::map<uint64_t, T> posted_;
  std::deque<T> replays_;
  bool stopped_ = false;
};

// ---- Slot pool --------------------------------------------------------------------
// Bookkeeping of pinned slots (the memory itself belongs to the caller,
// indexed alike). acquire() reuses the smallest free slot that fits;
// persistent slots (captured operations) are never handed out again.
// Thread-safety: the caller serializes (one mutex per communicator).
class SlotPool {
 public:
  static constexpr int kNone = -1;
  // A free slot of at least `bytes`, marked busy; kNone when none fits.
  int acquire(size_t bytes) {
    int best = kNone;
    for (size_t i = 0; i < slots_.size(); ++i) {
      const Slot& s = slots_[i];
      if (s.busy || s.persistent || s.capacity < bytes) continue;
      if (best == kNone || s.capacity < slots_[best].capacity) best = static_cast<int>(i);
    }
    if (best != kNone) slots_[best].busy = true;
    return best;
  }
  // Registers a new busy slot of `capacity` bytes; returns its index.
  int add(size_t capacity, bool persistent) {
    slots_.push_back({capacity, true, persistent});
    return static_cast<int>(slots_.size()) - 1;
  }
  void release(int i) {
    if (i >= 0 && static_cast<size_t>(i) < slots_.size() && !slots_[i].persistent) {
      slots_[i].busy = false;
    }
  }
  bool busy(int i) const { return slots_[i].busy; }
  size_t size() const { return slots_.size(); }
  size_t busyCount() const {
    size_t n = 0;
    for (const Slot& s : slots_) n += s.busy ? 1 : 0;
    return n;
  }

 private:
  struct Slot {
    size_t capacity;
    bool busy;
    bool persistent;
  };
  std::vector<Slot> slots_;
};

// ---- Chunk schedule of a pipelined elementwise collective ------------------------
struct Chunk {
  size_t offset;  // elements
  size_t count;   // elements
};
// Splits `count` elements into chunks of about `chunkBytes` (whole elements,
// at least 1), at most `maxChunks` of them (chunks grow to fit). The same
// inputs give the same schedule on every rank.
inline std::vector<Chunk> chunkSchedule(size_t count, size_t elemSize, size_t chunkBytes,
                                        size_t maxChunks) {
  std::vector<Chunk> out;
  if (count == 0) return out;
  if (elemSize == 0) elemSize = 1;
  if (maxChunks == 0) maxChunks = 1;
  size_t per = std::max<size_t>(1, chunkBytes / elemSize);
  if ((count + per - 1) / per > maxChunks) per = (count + maxChunks - 1) / maxChunks;
  for (size_t off = 0; off < count; off += per) out.push_back({off, std::min(per, count - off)});
  return out;
}

// Stream order of a pipelined run of `n` chunks with `window` chunks in
// flight: the head of chunk k (copy in + callback) is emitted before the tail
// (wait + copy out) of chunk k - window + 1, so chunk k's input copy overlaps
// the collective of the chunks before it. Entries: +k+1 = head of k,
// -(k+1) = tail of k.
inline std::vector<long> pipelineOrder(size_t n, size_t window) {
  std::vector<long> order;
  if (window == 0) window = 1;
  for (size_t k = 0; k < n; ++k) {
    order.push_back(static_cast<long>(k) + 1);
    if (k + 1 >= window) order.push_back(-static_cast<long>(k + 2 - window));
  }
  for (size_t k = n >= window ? n - window + 1 : 0; k < n; ++k) {
    order.push_back(-static_cast<long>(k) - 1);
  }
  return order;
}

}  // namespace tide::cuda
