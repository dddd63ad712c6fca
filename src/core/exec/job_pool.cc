// The pool of free jobs behind newJob() (core/exec/job.h): jobs are recycled
// with their mutex, condition variable and vectors' capacity, and the
// shared_ptr's control block lives inside the Job, so a launch allocates
// nothing in steady state. Each thread keeps a few free jobs of its own.
#include <algorithm>
#include <cstddef>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

#include "core/exec/job.h"

namespace tide {

namespace {

// Recycled jobs. The shared_ptr handed out keeps its control block inside
// the Job (JobAlloc) and returns the Job to the pool when that block is
// freed, after the last owner let go (the pool's lock orders everything that
// owner did before the next newJob() reuses it). The Job, its mutex,
// condition variable and vectors' capacity are kept: nothing is allocated
// per launch in steady state.
constexpr size_t kJobPoolMax = 1024;  // free jobs kept; more are freed
std::mutex gJobPoolMu;
std::vector<Job*>* gJobPool = new std::vector<Job*>();  // never destroyed: used at exit

void clearJob(Job& j) {
  j.ops.clear();
  j.tickets.clear();
  j.claimed.store(false, std::memory_order_relaxed);
  j.done = false;
  j.result = Status::Ok();
  j.arrivals.store(0, std::memory_order_relaxed);
  j.parties = 1;
  j.callback = nullptr;
  j.callbackData = nullptr;
}

// Each thread keeps a few free jobs of its own and trades them with the
// shared pool kMoveJobs at a time: the issuing thread takes jobs and a
// stream's worker returns them, one pool lock per kMoveJobs launches.
constexpr size_t kMoveJobs = 16;
constexpr size_t kLocalJobsMax = 2 * kMoveJobs;

// Moves up to `n` jobs from the back of `from` to `to`; frees what the
// shared pool has no room for (gJobPoolMu held).
void moveJobs(std::vector<Job*>& from, std::vector<Job*>& to, size_t n, size_t toMax) {
  for (size_t k = 0; k < n && !from.empty(); ++k) {
    Job* j = from.back();
    from.pop_back();
    if (to.size() < toMax) {
      to.push_back(j);
    } else {
      delete j;
    }
  }
}

void returnJobShared(Job* j) {
  {
    std::lock_guard<std::mutex> lock(gJobPoolMu);
    if (gJobPool->size() < kJobPoolMax) {
      gJobPool->push_back(j);
      return;
    }
  }
  delete j;
}

struct LocalJobs {
  std::vector<Job*> free;
  LocalJobs();
  ~LocalJobs();
};
// 0: not made on this thread yet, 1: alive, 2: destroyed (thread exit).
// Trivially destructible, so it is readable while the thread exits.
thread_local int tLocalJobsState = 0;
thread_local LocalJobs tLocalJobs;
LocalJobs::LocalJobs() {
  free.reserve(kLocalJobsMax);
  tLocalJobsState = 1;
}
LocalJobs::~LocalJobs() {
  tLocalJobsState = 2;
  std::lock_guard<std::mutex> lock(gJobPoolMu);
  moveJobs(free, *gJobPool, free.size(), kJobPoolMax);
}

// This thread's cache, or null once the thread is exiting.
std::vector<Job*>* localJobs() {
  if (tLocalJobsState == 0) (void)tLocalJobs.free.size();  // makes it
  return tLocalJobsState == 1 ? &tLocalJobs.free : nullptr;
}

void returnJob(Job* j) {
  std::vector<Job*>* mine = localJobs();
  if (mine == nullptr) return returnJobShared(j);
  if (mine->size() >= kLocalJobsMax) {
    std::lock_guard<std::mutex> lock(gJobPoolMu);
    moveJobs(*mine, *gJobPool, kMoveJobs, kJobPoolMax);
  }
  mine->push_back(j);
}

// A free job from this thread's cache, refilled from the shared pool; null
// when both are empty.
Job* takeFreeJob() {
  std::vector<Job*>* mine = localJobs();
  if (mine == nullptr || mine->empty()) {
    std::lock_guard<std::mutex> lock(gJobPoolMu);
    if (mine == nullptr) {
      if (gJobPool->empty()) return nullptr;
      Job* j = gJobPool->back();
      gJobPool->pop_back();
      return j;
    }
    moveJobs(*gJobPool, *mine, kMoveJobs, kLocalJobsMax);
    if (mine->empty()) return nullptr;
  }
  Job* j = mine->back();
  mine->pop_back();
  return j;
}

void keepJob(Job* /*j*/) {}  // the shared_ptr's deleter: JobAlloc returns the job

// Places the shared_ptr's control block in Job::controlBlock; freeing it
// (the last step of the shared_ptr's release) returns the Job to the pool.
template <class T>
struct JobAlloc {
  using value_type = T;
  Job* job;
  explicit JobAlloc(Job* j) : job(j) {}
  template <class U>
  explicit JobAlloc(const JobAlloc<U>& other) : job(other.job) {}
  T* allocate(size_t n) {
    if (n == 1 && sizeof(T) <= sizeof(job->controlBlock) &&
        alignof(T) <= alignof(std::max_align_t)) {
      return reinterpret_cast<T*>(job->controlBlock);
    }
    return static_cast<T*>(::operator new(n * sizeof(T)));
  }
  void deallocate(T* p, size_t /*n*/) {
    if (reinterpret_cast<unsigned char*>(p) == job->controlBlock) {
      returnJob(job);
    } else {
      ::operator delete(p);
    }
  }
  template <class U>
  bool operator==(const JobAlloc<U>& other) const {
    return job == other.job;
  }
};

std::shared_ptr<Job> wrapJob(Job* j) { return std::shared_ptr<Job>(j, &keepJob, JobAlloc<Job>(j)); }

}  // namespace

void reserveJobs(size_t n) {
  size_t missing;
  {
    std::lock_guard<std::mutex> lock(gJobPoolMu);
    missing = std::min(n, kJobPoolMax);
    missing = missing > gJobPool->size() ? missing - gJobPool->size() : 0;
  }
  for (size_t i = 0; i < missing; ++i) {
    auto* j = new Job();
    j->ops.reserve(1);
    j->tickets.reserve(1);
    returnJobShared(j);
  }
}

std::shared_ptr<Job> newJob() {
  Job* j = takeFreeJob();
  if (j == nullptr) {
    j = new Job();
  } else {
    clearJob(*j);
  }
  return wrapJob(j);
}

}  // namespace tide
