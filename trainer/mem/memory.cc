// The trainer's memory manager (mem/memory.h).
#include "mem/memory.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <new>
#include <utility>

#include "io/error.h"

namespace tide_train::mem {

namespace {

struct State {
  std::mutex mu;
  Usage u;
};

State& state() {
  static State s;
  return s;
}

thread_local std::vector<std::string> labels;

std::string mib(size_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f MiB", static_cast<double>(bytes) / 1048576.0);
  return b;
}

// Counts `bytes` of kind k (the caller holds the lock); throws past the cap.
void add_locked(Usage& u, Kind k, size_t bytes, bool capped = true) {
  const int i = static_cast<int>(k);
  if (capped && u.cap > 0 && u.current_total + bytes > u.cap) {
    const std::string what = !labels.empty() ? labels.back() : std::string(name(k)) + " buffer";
    throw Error("--mem-cap " + std::to_string(u.cap) + " bytes: " + what + " (" + mib(bytes) +
                ", " + name(k) + ") does not fit: " + mib(u.current_total) +
                " are already held on this rank (params " + mib(u.current[0]) + ", grads " +
                mib(u.current[1]) + ", optim " + mib(u.current[2]) + ", act " + mib(u.current[3]) +
                ", comm " + mib(u.current[4]) + ")");
  }
  u.current[i] += bytes;
  u.current_total += bytes;
  if (u.current[i] > u.peak[i]) u.peak[i] = u.current[i];
  if (u.current_total > u.peak_total) u.peak_total = u.current_total;
}

void sub_locked(Usage& u, Kind k, size_t bytes) {
  const int i = static_cast<int>(k);
  u.current[i] -= std::min(bytes, u.current[i]);
  u.current_total -= std::min(bytes, u.current_total);
}

}  // namespace

const char* name(Kind k) {
  switch (k) {
    case Kind::kParams:
      return "params";
    case Kind::kGrads:
      return "grads";
    case Kind::kOptim:
      return "optim";
    case Kind::kAct:
      return "act";
    case Kind::kComm:
      return "comm";
  }
  return "?";
}

void* allocate(Kind k, size_t bytes) {
  State& s = state();
  {
    std::lock_guard<std::mutex> g(s.mu);
    add_locked(s.u, k, bytes);
  }
  void* p = std::calloc(bytes == 0 ? 1 : bytes, 1);
  if (p == nullptr) {
    std::lock_guard<std::mutex> g(s.mu);
    sub_locked(s.u, k, bytes);
    throw std::bad_alloc();
  }
  return p;
}

void release(Kind k, void* p, size_t bytes) noexcept {
  if (p == nullptr) return;
  std::free(p);
  State& s = state();
  std::lock_guard<std::mutex> g(s.mu);
  sub_locked(s.u, k, bytes);
}

void account(Kind k, long long add, bool capped) {
  State& s = state();
  std::lock_guard<std::mutex> g(s.mu);
  if (add >= 0)
    add_locked(s.u, k, static_cast<size_t>(add), capped);
  else
    sub_locked(s.u, k, static_cast<size_t>(-add));
}

void set_cap(size_t bytes) {
  State& s = state();
  std::lock_guard<std::mutex> g(s.mu);
  s.u.cap = bytes;
}

Usage usage() {
  State& s = state();
  std::lock_guard<std::mutex> g(s.mu);
  return s.u;
}

void reset_peaks() {
  State& s = state();
  std::lock_guard<std::mutex> g(s.mu);
  for (int i = 0; i < kKinds; ++i) s.u.peak[i] = s.u.current[i];
  s.u.peak_total = s.u.current_total;
}

Label::Label(std::string what) { labels.push_back(std::move(what)); }

Label::~Label() { labels.pop_back(); }

}  // namespace tide_train::mem
