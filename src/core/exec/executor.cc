#include "core/exec/executor.h"

#include <poll.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "core/config.h"
#include "core/log.h"

namespace tide {

// ---- ExecCtx --------------------------------------------------------------------

ExecCtx::ExecCtx(const CollArgs& args, int rank, int nranks, Connection* const* conns, int channel,
                 const KernelTable* kernels, size_t chunkBytes, const CommTopo* topo,
                 PeerTraffic* traffic)
    : args_(args),
      rank_(rank),
      nranks_(nranks),
      conns_(conns),
      channel_(channel),
      kernels_(kernels),
      chunkBytes_(chunkBytes < 64 ? 64 : chunkBytes & ~size_t{63}),
      topo_(topo),
      traffic_(traffic) {
  if (topo_ == nullptr) {
    std::vector<PeerInfo> peers(static_cast<size_t>(nranks));
    for (int r = 0; r < nranks; ++r) peers[r].rank = r;
    ownTopo_ = std::make_unique<CommTopo>();
    defaultCommTopo(peers, rank, ownTopo_.get());
    topo_ = ownTopo_.get();
  }
}

// ---- Scratch pool --------------------------------------------------------------
//
// Scratch blocks are recycled per thread, so an operation that needs scratch
// (one-shot, staged receives) costs no malloc/free (and, for blocks beyond
// glibc's mmap threshold, no mmap/munmap and page faults) in steady state.
// Each block carries its capacity in a 64-byte header before the pointer
// handed out. Thread-safety: the pool is thread_local; a block may return to
// a different thread's pool than the one it came from.

namespace {

constexpr size_t kScratchHeader = 64;
constexpr size_t kPoolMaxBlocks = 256;

// What a thread's pool may hold (TIDE_SCRATCH_CACHE): a compressed All-Reduce
// of 64 MiB on two nodes takes about 100 MiB of scratch in ~100 blocks, which
// glibc would otherwise return to the kernel and fault in again every call.
size_t poolMaxBytes() {
  static const size_t bytes = knobSize(Knob::ScratchCache);
  return bytes;
}

struct ScratchPool {
  std::vector<void*> blocks;  // header addresses
  size_t bytes = 0;
  ~ScratchPool() {
    for (void* b : blocks) free(b);
  }
};
thread_local ScratchPool tPool;

// Largest block: power-of-two capacities up to 2^62 (+ header) fit in a
// size_t without the doubling below overflowing; nothing larger can exist.
constexpr size_t kMaxScratch = size_t{1} << 62;

size_t& blockCap(void* header) { return *static_cast<size_t*>(header); }

// Null when `bytes` exceeds kMaxScratch or memory is short.
void* takeScratch(size_t bytes) {
  if (bytes > kMaxScratch) return nullptr;
  ScratchPool& pool = tPool;
  size_t best = pool.blocks.size();
  for (size_t i = 0; i < pool.blocks.size(); ++i) {
    size_t cap = blockCap(pool.blocks[i]);
    if (cap >= bytes && (best == pool.blocks.size() || cap < blockCap(pool.blocks[best]))) best = i;
  }
  if (best < pool.blocks.size()) {
    void* h = pool.blocks[best];
    pool.blocks[best] = pool.blocks.back();
    pool.blocks.pop_back();
    pool.bytes -= blockCap(h);
    return static_cast<char*>(h) + kScratchHeader;
  }
  size_t cap = 4096;
  while (cap < bytes) cap <<= 1;
  void* h = aligned_alloc(64, cap + kScratchHeader);
  if (h == nullptr) return nullptr;
  blockCap(h) = cap;
  return static_cast<char*>(h) + kScratchHeader;
}

void giveScratch(void* p) {
  void* h = static_cast<char*>(p) - kScratchHeader;
  ScratchPool& pool = tPool;
  size_t cap = blockCap(h);
  if (pool.blocks.size() >= kPoolMaxBlocks || pool.bytes + cap > poolMaxBytes()) {
    free(h);
    return;
  }
  pool.blocks.push_back(h);
  pool.bytes += cap;
}

}  // namespace

ExecCtx::~ExecCtx() {
  for (void* p : scratch_) giveScratch(p);
}

size_t ExecCtx::chunkElems() const {
  size_t e = chunkBytes_ / args_.elemSize;
  return e == 0 ? 1 : e;
}

Connection* ExecCtx::conn(int peer) const {
  if (peer < 0 || peer >= nranks_) return nullptr;
  return conns_[peer * kNumChannels + channel_];
}

Pending ExecCtx::post(int peer, bool isSend, const void* sbuf, void* rbuf, size_t bytes,
                      const RecvReduce* rr) {
  Pending p;
  p.isSend = isSend;
  p.peer = peer;
  if (bytes == 0) return p;
  Connection* c = conn(peer);
  if (c == nullptr) {
    setError(internalError("no connection to rank %d", peer));
    return p;
  }
  // Device buffers (GPUDirect RDMA, planned in core/device/device_stream.cc) go
  // through the memory-typed posts; host buffers take the plain ones.
  Status s;
  if (args_.mem == MemType::Host) {
    s = isSend ? c->postSend(sbuf, bytes, &p.ticket) : c->postRecv(rbuf, bytes, rr, &p.ticket);
  } else {
    s = isSend ? c->postSendMem(sbuf, bytes, args_.mem, &p.ticket)
               : c->postRecvMem(rbuf, bytes, rr, args_.mem, &p.ticket);
  }
  if (!s.ok()) {
    setError(std::move(s));
    return p;
  }
  p.conn = c;
  if (traffic_ != nullptr) {
    (isSend ? traffic_[peer].sent : traffic_[peer].recv)
        .fetch_add(bytes, std::memory_order_relaxed);
  }
  if (std::find(active_.begin(), active_.end(), c) == active_.end()) active_.push_back(c);
  return p;
}

Pending ExecCtx::send(int peer, const void* buf, size_t bytes) {
  return post(peer, true, buf, nullptr, bytes, nullptr);
}

Pending ExecCtx::recv(int peer, void* buf, size_t bytes) {
  return post(peer, false, nullptr, buf, bytes, nullptr);
}

Pending ExecCtx::recvReduce(int peer, void* dst, const void* src, size_t bytes) {
  RecvReduce rr;
  rr.fn = args_.reduce;
  rr.src = src;
  rr.elemSize = args_.elemSize;
  return post(peer, false, nullptr, dst, bytes, &rr);
}

ExecCtx::WaitAwaiter ExecCtx::wait(const Pending& a) {
  ready_ = nullptr;
  waits_.clear();
  waits_.push_back(a);
  return WaitAwaiter{this};
}

ExecCtx::WaitAwaiter ExecCtx::wait(const Pending& a, const Pending& b) {
  ready_ = nullptr;
  waits_.clear();
  waits_.push_back(a);
  waits_.push_back(b);
  return WaitAwaiter{this};
}

ExecCtx::WaitAwaiter ExecCtx::waitAll(const std::vector<Pending>& ps) {
  ready_ = nullptr;
  waits_ = ps;
  return WaitAwaiter{this};
}

ExecCtx::WaitAwaiter ExecCtx::until(ReadyFn ready, void* arg, Doorbell* bell) {
  waits_.clear();
  ready_ = ready;
  readyArg_ = arg;
  readyBell_ = bell;
  return WaitAwaiter{this};
}

bool ExecCtx::waitsDone() const {
  for (const Pending& p : waits_) {
    if (!p.done()) return false;
  }
  return ready_ == nullptr || ready_(readyArg_);
}

void ExecCtx::copy(void* dst, const void* src, size_t bytes) const {
  if (bytes == 0 || dst == src) return;
  kernels_->copy(dst, src, bytes);
}

void* ExecCtx::scratch(size_t bytes) {
  if (bytes > kMaxScratch) {  // also keeps the rounding below from wrapping to 0
    setError(invalidArgument("scratch of %zu bytes requested (more than any allocation)", bytes));
    return nullptr;
  }
  size_t rounded = (bytes + 63) & ~size_t{63};
  void* p = takeScratch(rounded == 0 ? 64 : rounded);
  if (p == nullptr) {
    setError(systemError("out of memory allocating %zu bytes of scratch", bytes));
    return nullptr;
  }
  scratch_.push_back(p);
  return p;
}

// ---- runTasks -------------------------------------------------------------------

namespace {

using Clock = std::chrono::steady_clock;

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Adaptive spinning. Spinning pays only when what a rank waits for usually
// arrives within the spin window (its peers run on other cores). When most
// waits outlast the window (ranks outnumber free cores, or the machine is
// loaded) the spin only keeps the peer that would produce the data off the
// core, so waits then start with sched_yield. Learned per thread from the
// idle episodes it sees (measured: 2 ranks under load 13, 8 B All-Reduce,
// 10 us with pure yield against 140 us with 20 us spins first).
// A miss weighs four hits: spinning resumes only after a run of short waits.
struct SpinPolicy {
  int score = 0;  // high: recent waits ended within the spin window
  bool allowed() const { return score >= 4; }
  void record(int64_t idleUs, int spinUs) {
    if (spinUs <= 0) return;
    score = idleUs <= spinUs ? std::min(score + 1, 16) : std::max(score - 4, -16);
  }
};
thread_local SpinPolicy tSpin;
// Spun even when the policy says no: catches the reply of a peer that is
// running right now (a round trip through shared memory is ~1 us) at the
// cost of at most this much of a time slice.
constexpr int kMinSpinUs = 2;

// Progresses one item's connections; resumes it when its waits are done.
// Returns false when the item failed.
bool step(ExecItem& it, bool* moved) {
  ExecCtx& ctx = *it.ctx;
  auto& active = ctx.active();
  for (size_t i = 0; i < active.size();) {
    Status s = active[i]->progress(moved);
    if (!s.ok()) {
      ctx.setError(std::move(s));
      return false;
    }
    if (!active[i]->busy()) {
      active[i] = active.back();
      active.pop_back();
    } else {
      ++i;
    }
  }
  if (!ctx.error().ok()) return false;
  if (ctx.hasResume() && ctx.waitsDone()) {
    *moved = true;
    ctx.clearUntil();
    ctx.takeResume().resume();
    if (it.task.threw()) ctx.setError(internalError("exception inside the algorithm"));
    if (!ctx.error().ok()) return false;
  }
  return true;
}

const char* firstWaitingPeer(const ExecItem& it, int* peer) {
  for (const Pending& p : it.ctx->waits()) {
    if (!p.done()) {
      *peer = p.peer;
      return p.isSend ? "sending to" : "receiving from";
    }
  }
  *peer = -1;
  return it.ctx->untilBell() != nullptr ? "waiting for every rank to join the call"
                                        : "waiting on its peers";
}

}  // namespace

namespace {
Status runLoop(std::vector<ExecItem*>& items, std::vector<ExecItem*>& live,
               std::vector<pollfd>& fds, const WaitTuning& tuning);
}  // namespace

// Per-thread spare capacity for runTasks' work lists (swapped in and out, so
// a nested call simply starts with empty ones).
thread_local std::vector<ExecItem*> tLiveSpare;
thread_local std::vector<pollfd> tFdsSpare;

thread_local bool tWaitSleep = false;

void setThreadWaitSleep(bool sleep) { tWaitSleep = sleep; }

Status runTasks(std::vector<ExecItem*>& items, const WaitTuning& tuning) {
  // A background thread (tideWaitSleep) never spins or yields: the cores
  // belong to the application's compute.
  const WaitTuning sleeping{0, 0};
  const WaitTuning& waits = tWaitSleep ? sleeping : tuning;
  std::vector<ExecItem*> live;
  std::vector<pollfd> fds;
  live.swap(tLiveSpare);
  fds.swap(tFdsSpare);
  live.clear();
  Status first = runLoop(items, live, fds, waits);
  live.swap(tLiveSpare);
  fds.swap(tFdsSpare);
  return first;
}

namespace {

Status runLoop(std::vector<ExecItem*>& items, std::vector<ExecItem*>& live,
               std::vector<pollfd>& fds, const WaitTuning& tuning) {
  // Start every task in order (posts happen in issue order).
  for (ExecItem* it : items) {
    it->result = Status::Ok();
    it->ctx->takeResume();
    if (!it->task.valid()) continue;
    it->task.handle().resume();
    if (it->task.threw()) it->ctx->setError(internalError("exception inside the algorithm"));
    if (!it->ctx->error().ok()) {
      it->result = it->ctx->error();
    } else if (!it->task.done()) {
      live.push_back(it);
    }
  }
  Status first;
  for (ExecItem* it : items) {
    if (!it->result.ok()) {
      first = it->result;
      break;
    }
  }
  auto lastMove = Clock::now();
  bool wasIdle = false;  // in an idle episode (nothing moved since lastMove)
  int spinUs = tuning.spinUs;
  while (first.ok() && !live.empty()) {
    bool moved = false;
    for (size_t i = 0; i < live.size();) {
      ExecItem& it = *live[i];
      if (!step(it, &moved)) {
        it.result = it.ctx->error();
        it.result.addFrame(__FILE__, __LINE__);
        first = it.result;
        break;
      }
      if (it.task.done()) {
        live[i] = live.back();
        live.pop_back();
      } else {
        ++i;
      }
    }
    if (!first.ok() || live.empty()) break;
    auto now = Clock::now();
    if (moved) {
      if (wasIdle) {
        tSpin.record(std::chrono::duration_cast<std::chrono::microseconds>(now - lastMove).count(),
                     tuning.spinUs);
        wasIdle = false;
      }
      lastMove = now;
      continue;
    }
    // ---- Idle: abort, timeout, then back off ----
    if (!wasIdle) {
      wasIdle = true;
      spinUs = tSpin.allowed() ? tuning.spinUs : std::min(tuning.spinUs, kMinSpinUs);
    }
    for (ExecItem* it : live) {
      if (it->abort && it->abort->load(std::memory_order_relaxed)) {
        it->result = remoteError("%s aborted (tideCommAbort)", it->what().c_str());
        first = it->result;
        break;
      }
      double idleSec = std::chrono::duration<double>(now - lastMove).count();
      if (it->timeoutSec > 0 && idleSec > it->timeoutSec) {
        int peer;
        const char* dir = firstWaitingPeer(*it, &peer);
        if (peer >= 0) {
          it->result = timeoutError("%s: no progress for %d s while %s rank %d", it->what().c_str(),
                                    it->timeoutSec, dir, peer);
        } else {
          it->result = timeoutError("%s: no progress for %d s while %s", it->what().c_str(),
                                    it->timeoutSec, dir);
        }
        first = it->result;
        break;
      }
    }
    if (!first.ok()) break;
    int64_t idleUs = std::chrono::duration_cast<std::chrono::microseconds>(now - lastMove).count();
    if (idleUs < spinUs) {
      for (int k = 0; k < 64; ++k) cpuRelax();
      continue;
    }
    if (idleUs < tuning.spinUs + tuning.yieldUs) {
      sched_yield();
      continue;
    }
    // Sleep: poll sockets if any connection has one (readable for receives,
    // writable for queued sends), else the doorbell. A mix of both polls in
    // short slices so shared-memory peers are not left waiting long.
    fds.clear();
    bool anyBell = false;
    for (ExecItem* it : live) {
      for (Connection* c : it->ctx->active()) {
        int fd = c->pollFd();
        if (fd >= 0) {
          fds.push_back(
              pollfd{fd, static_cast<short>(POLLIN | (c->pollForWrite() ? POLLOUT : 0)), 0});
        } else {
          anyBell = true;
        }
      }
    }
    if (!fds.empty()) {
      // Mixed: yield-poll for a while, then sleep in 1 ms slices (a
      // shared-memory peer's data then waits at most that long).
      int sliceMs = !anyBell ? 2 : (idleUs > 10000 ? 1 : 0);
      poll(fds.data(), fds.size(), sliceMs);
      if (sliceMs == 0) sched_yield();
      continue;
    }
    // An item polling an until() sleeps on that wait's doorbell.
    auto bellOf = [](const ExecItem* it) {
      Doorbell* b = it->ctx->untilBell();
      return b != nullptr ? b : it->bell;
    };
    Doorbell* bell = bellOf(live.front());
    bool oneBell = true;
    for (ExecItem* it : live) oneBell &= (bellOf(it) == bell);
    if (bell == nullptr) {
      sched_yield();
      continue;
    }
    uint32_t seen = bell->prepareWait();
    bool movedNow = false;
    for (ExecItem* it : live) {
      for (Connection* c : it->ctx->active()) {
        Status s = c->progress(&movedNow);
        if (!s.ok()) it->ctx->setError(std::move(s));
      }
      if (it->ctx->untilBell() != nullptr && it->ctx->waitsDone()) movedNow = true;
    }
    if (movedNow) {
      bell->cancelWait();
      lastMove = Clock::now();
      continue;
    }
    bell->commitWait(seen, oneBell ? 5000 : 500);
  }
  // Cancel whatever is left (error or abort): destroying the frames is safe;
  // connections keep their queues, which the communicator's sticky error
  // makes unusable anyway.
  if (!first.ok()) {
    for (ExecItem* it : items) {
      if (it->result.ok() && !it->task.done()) {
        it->result = first;
      }
      it->task.reset();
    }
  }
  return first;
}

}  // namespace

}  // namespace tide
