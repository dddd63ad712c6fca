#include "core/executor.h"

#include <poll.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "core/log.h"

namespace tide {

// ---- ExecCtx --------------------------------------------------------------------

ExecCtx::ExecCtx(const CollArgs& args, int rank, int nranks, Connection* const* conns,
                 int channel, const KernelTable* kernels, size_t chunkBytes, const CommTopo* topo,
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
    defaultCommTopo(peers, rank, &ownTopo_);
    topo_ = &ownTopo_;
  }
}

ExecCtx::~ExecCtx() {
  for (void* p : scratch_) free(p);
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
  Status s = isSend ? c->postSend(sbuf, bytes, &p.ticket) : c->postRecv(rbuf, bytes, rr, &p.ticket);
  if (!s.ok()) {
    setError(std::move(s));
    return p;
  }
  p.conn = c;
  if (traffic_ != nullptr) {
    (isSend ? traffic_[peer].sent : traffic_[peer].recv).fetch_add(bytes, std::memory_order_relaxed);
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
  waits_.clear();
  waits_.push_back(a);
  return WaitAwaiter{this};
}

ExecCtx::WaitAwaiter ExecCtx::wait(const Pending& a, const Pending& b) {
  waits_.clear();
  waits_.push_back(a);
  waits_.push_back(b);
  return WaitAwaiter{this};
}

ExecCtx::WaitAwaiter ExecCtx::waitAll(const std::vector<Pending>& ps) {
  waits_ = ps;
  return WaitAwaiter{this};
}

bool ExecCtx::waitsDone() const {
  for (const Pending& p : waits_) {
    if (!p.done()) return false;
  }
  return true;
}

void ExecCtx::copy(void* dst, const void* src, size_t bytes) const {
  if (bytes == 0 || dst == src) return;
  kernels_->copy(dst, src, bytes);
}

void* ExecCtx::scratch(size_t bytes) {
  size_t rounded = (bytes + 63) & ~size_t{63};
  void* p = aligned_alloc(64, rounded == 0 ? 64 : rounded);
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
  return "waiting on";
}

}  // namespace

Status runTasks(std::vector<ExecItem*>& items, const WaitTuning& tuning) {
  std::vector<ExecItem*> live;
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
  std::vector<pollfd> fds;
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
      lastMove = now;
      continue;
    }
    // ---- Idle: abort, timeout, then back off ----
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
        it->result = timeoutError("%s: no progress for %d s while %s rank %d",
                                  it->what().c_str(), it->timeoutSec, dir, peer);
        first = it->result;
        break;
      }
    }
    if (!first.ok()) break;
    int64_t idleUs = std::chrono::duration_cast<std::chrono::microseconds>(now - lastMove).count();
    if (idleUs < tuning.spinUs) {
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
          fds.push_back(pollfd{fd, static_cast<short>(POLLIN | (c->pollForWrite() ? POLLOUT : 0)), 0});
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
    Doorbell* bell = live.front()->bell;
    bool oneBell = true;
    for (ExecItem* it : live) oneBell &= (it->bell == bell);
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

}  // namespace tide
