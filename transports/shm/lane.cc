// Small-collective lane over one POSIX shared-memory segment per
// communicator (core/lane.h).
//
// Layout: a header, then one area per rank: its Doorbell (own cache line)
// and two slots, used by call parity. A slot is [seq][tag][bytes][data...]
// with the data starting in the same cache line as the sequence word, so a
// contribution of up to 40 bytes travels in one line. A call publishes this
// rank's contribution in its slot (data first, then a release store of the
// call number), waits until every peer's slot of the same parity carries the
// same call number, checks the peers' tags and sizes, and computes its result
// from all slots itself (reductions in rank order, so every rank gets the
// same bits).
//
// Reuse: a rank writes the slot of call i+2 only after finishing call i+1,
// which required every peer to have published call i+1, which each did only
// after finishing call i: nobody still reads the slot being overwritten.
#include "core/lane.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/log.h"
#include "core/registry.h"
#include "transports/shm/lane_layout.h"

namespace tide::shm {

namespace {

using Clock = std::chrono::steady_clock;

const char* laneCollName(CollType t) {
  static const char* const kNames[] = {"allreduce", "broadcast", "reduce", "allgather",
                                       "reducescatter"};
  return static_cast<int>(t) < 5 ? kNames[static_cast<int>(t)] : "collective";
}

int openPidfd(int pid) {
#ifdef SYS_pidfd_open
  long fd = syscall(SYS_pidfd_open, pid, 0);
  if (fd >= 0) return static_cast<int>(fd);
#endif
  return -1;
}

bool exited(int pidfd, int pid) {
  if (pidfd >= 0) {
    pollfd p{pidfd, POLLIN, 0};
    return poll(&p, 1, 0) > 0;
  }
  return kill(pid, 0) != 0 && errno == ESRCH;
}

uint64_t pidNsInode() {
  struct stat st;
  if (stat("/proc/self/ns/pid", &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_ino);
}

class ShmLane final : public Lane {
 public:
  ShmLane(const LaneParams& p, int rank, int nranks, void* base, size_t size, size_t maxBytes,
          std::vector<int> pids, std::vector<int> pidfds)
      : p_(p),
        rank_(rank),
        nranks_(nranks),
        base_(static_cast<char*>(base)),
        size_(size),
        maxBytes_(maxBytes),
        pids_(std::move(pids)),
        pidfds_(std::move(pidfds)),
        layout_(nranks, maxBytes),
        kernels_(kernelsFor(MemType::Host)) {
    int spin = static_cast<int>(knobInt(Knob::LaneSpinUs));
    spinUs_ = spin >= 0 ? spin : (p.oversubscribed ? 0 : p.spinUs);
    yieldUs_ = p.yieldUs < 0 ? 200 : p.yieldUs;
    livenessMs_ = static_cast<int>(knobInt(Knob::ShmLivenessMs));
    if (livenessMs_ <= 0) livenessMs_ = 200;
  }

  ~ShmLane() override {
    for (int fd : pidfds_) {
      if (fd >= 0) close(fd);
    }
    munmap(base_, size_);
  }

  bool accepts(const CollArgs& a) const override {
    if (a.mem != MemType::Host || a.count == 0 || a.codec.id != 0) return false;
    if (static_cast<int>(a.type) >= static_cast<int>(CollType::AlltoAll)) return false;
    return contribution(a, a.root) <= maxBytes_;
  }

  Status run(const LaneOp& op) override;
  Status start(const LaneOp& op) override;
  bool poll(const LaneOp& op, Status* error) override;
  Status finish(const LaneOp& op) override;
  Doorbell* doorbell() override { return bell(rank_); }

 private:
  // Bytes rank r publishes for this call (the same formula on every rank).
  size_t contribution(const CollArgs& a, int r) const {
    const size_t bytes = a.wireBytes(a.count);
    switch (a.type) {
      case CollType::Broadcast:
        return r == a.root ? bytes : 0;
      case CollType::ReduceScatter:
        // Overflow was excluded by validation (count x size x nranks fits).
        return bytes * static_cast<size_t>(nranks_);
      default:
        return bytes;
    }
  }
  SlotHead* slot(int r, uint64_t call) const {
    return reinterpret_cast<SlotHead*>(base_ + layout_.slotOffset(r, static_cast<int>(call & 1)));
  }
  Doorbell* bell(int r) const { return reinterpret_cast<Doorbell*>(base_ + layout_.bellOffset(r)); }

  void publish(const LaneOp& op, uint64_t call);
  // Marks the peers whose slot now carries `call`; true when any did.
  bool scan(uint64_t call);
  // An error when a peer still missing has exited.
  Status checkLiveness(const LaneOp& op) const;
  Status waitAll(const LaneOp& op, uint64_t call);
  Status checkPeers(const LaneOp& op, uint64_t call) const;
  void compute(const LaneOp& op, uint64_t call) const;
  Status fail(Status s) {
    broken_ = true;
    return s;
  }

  const LaneParams p_;
  const int rank_;
  const int nranks_;
  char* const base_;
  const size_t size_;
  const size_t maxBytes_;
  const std::vector<int> pids_;    // per rank; 0 where liveness is not checked
  const std::vector<int> pidfds_;  // per rank; -1 where none
  const LaneLayout layout_;
  const KernelTable* const kernels_;
  int spinUs_ = 0;
  int yieldUs_ = 200;
  int livenessMs_ = 200;
  int spinScore_ = 0;   // >= 0: recent waits mostly ended while spinning
  uint64_t calls_ = 0;  // lane calls so far; the next call's number is calls_ + 1
  bool broken_ = false;
  std::vector<uint8_t> arrived_ = std::vector<uint8_t>(static_cast<size_t>(nranks_), 0);
  int pending_ = 0;                 // peers not yet arrived for the current call
  uint32_t polls_ = 0;              // poll() calls in the current call
  Clock::time_point lastLiveness_;  // poll(): last liveness check
};

void ShmLane::publish(const LaneOp& op, uint64_t call) {
  const CollArgs& a = op.args;
  SlotHead* mine = slot(rank_, call);
  const size_t bytes = contribution(a, rank_);
  mine->tag = op.tag;
  mine->bytes = bytes;
  char* data = mine->data();
  if (bytes > 0) {
    if (op.preScale != 0) {
      kernels_->scale(data, a.sendbuff, bytes / a.elemSize, a.dtype, op.preScale);
    } else {
      memcpy(data, a.sendbuff, bytes);
    }
  }
  mine->seq.store(call, std::memory_order_release);
  // Wake peers that sleep (one fence, then a load per peer).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  for (int r = 0; r < nranks_; ++r) {
    if (r != rank_ && bell(r)->sleepers.load(std::memory_order_relaxed) != 0) bell(r)->ring();
  }
}

bool ShmLane::scan(uint64_t call) {
  bool any = false;
  for (int r = 0; r < nranks_; ++r) {
    if (!arrived_[r] && slot(r, call)->seq.load(std::memory_order_acquire) == call) {
      arrived_[r] = 1;
      --pending_;
      any = true;
    }
  }
  return any;
}

Status ShmLane::checkLiveness(const LaneOp& op) const {
  for (int r = 0; r < nranks_; ++r) {
    if (arrived_[r] || pids_[r] == 0) continue;
    if (exited(pidfds_[r], pids_[r])) {
      return remoteError("%s #%llu: rank %d (pid %d) exited before joining the call",
                         laneCollName(op.args.type), static_cast<unsigned long long>(op.seq), r,
                         pids_[r]);
    }
  }
  return Status::Ok();
}

Status ShmLane::waitAll(const LaneOp& op, uint64_t call) {
  scan(call);
  if (pending_ == 0) return Status::Ok();
  const Clock::time_point start = Clock::now();
  Clock::time_point lastProgress = start;
  Clock::time_point lastLiveness = start;
  // Spin the full window only while recent waits ended inside it (a miss
  // counts four hits): under load or oversubscription the peer that would
  // end the wait needs this core, so spinning then only costs.
  const int spinUs = spinScore_ >= 0 ? spinUs_ : std::min(spinUs_, 2);
  const auto spinEnd = std::chrono::microseconds(spinUs);
  const auto yieldEnd = spinEnd + std::chrono::microseconds(yieldUs_);
  uint32_t iter = 0;
  bool spinning = true;
  auto done = [&] {
    if (spinning) {
      spinScore_ = std::min(spinScore_ + 1, 16);
    } else {
      spinScore_ = std::max(spinScore_ - 4, -16);
    }
    return Status::Ok();
  };
  while (true) {
    if (scan(call)) {
      if (pending_ == 0) return done();
      lastProgress = Clock::now();
    }
    if (p_.abortFlag != nullptr && p_.abortFlag->load(std::memory_order_relaxed)) {
      return remoteError("%s #%llu: communicator was aborted", laneCollName(op.args.type),
                         static_cast<unsigned long long>(op.seq));
    }
    ++iter;
    Clock::time_point now;
    if ((iter & 31) != 0 && spinning && spinUs > 0) {
      __builtin_ia32_pause();
      continue;
    }
    now = Clock::now();
    const auto waited = now - start;
    if (waited < spinEnd) {
      __builtin_ia32_pause();
      continue;
    }
    spinning = false;
    // Slow phases: the peer may be gone or stopped.
    if (now - lastLiveness >= std::chrono::milliseconds(livenessMs_)) {
      lastLiveness = now;
      Status live = checkLiveness(op);
      if (!live.ok()) return live;
    }
    if (p_.timeoutSec > 0 && now - lastProgress >= std::chrono::seconds(p_.timeoutSec)) {
      std::string missing;
      for (int r = 0; r < nranks_; ++r) {
        if (!arrived_[r]) missing += (missing.empty() ? "" : ",") + std::to_string(r);
      }
      return timeoutError("%s #%llu: rank(s) %s did not join the call within %d s (TIDE_TIMEOUT)",
                          laneCollName(op.args.type), static_cast<unsigned long long>(op.seq),
                          missing.c_str(), p_.timeoutSec);
    }
    if (waited < yieldEnd) {
      sched_yield();
      continue;
    }
    Doorbell* own = bell(rank_);
    uint32_t seen = own->prepareWait();
    if (scan(call) || (p_.abortFlag != nullptr && p_.abortFlag->load())) {
      own->cancelWait();
      lastProgress = Clock::now();
      if (pending_ == 0) return done();
      continue;
    }
    // Short sleeps: tideCommAbort rings the transports' doorbell, not this one.
    own->commitWait(seen, static_cast<int64_t>(std::min(livenessMs_, 50)) * 1000);
  }
}

Status ShmLane::checkPeers(const LaneOp& op, uint64_t call) const {
  for (int r = 0; r < nranks_; ++r) {
    if (r == rank_) continue;
    const SlotHead* s = slot(r, call);
    const uint32_t tag = s->tag;
    const uint64_t bytes = s->bytes;
    if (tag != op.tag || bytes != contribution(op.args, r)) {
      return invalidUsage(
          "mismatched operation: %s #%llu (%zu x %s, tag %08x) on rank %d, but rank %d called "
          "an operation with tag %08x and %llu bytes: every rank must call the same collective "
          "with the same count, datatype, operator and root",
          laneCollName(op.args.type), static_cast<unsigned long long>(op.seq), op.args.count,
          dtypeName(op.args.dtype), op.tag, rank_, r, tag, static_cast<unsigned long long>(bytes));
    }
  }
  return Status::Ok();
}

void ShmLane::compute(const LaneOp& op, uint64_t call) const {
  const CollArgs& a = op.args;
  const size_t bytes = a.count * a.elemSize;
  char* out = static_cast<char*>(a.recvbuff);
  switch (a.type) {
    case CollType::AllReduce:
    case CollType::Reduce:
    case CollType::ReduceScatter: {
      if (a.type == CollType::Reduce && rank_ != a.root) return;
      const size_t off = a.type == CollType::ReduceScatter ? bytes * rank_ : 0;
      reduceInRankOrder(a.reduce, out, nranks_, a.count,
                        [&](int r) -> const void* { return slot(r, call)->data() + off; });
      if (op.postDiv != 0) kernels_->divide(out, out, a.count, a.dtype, op.postDiv);
      return;
    }
    case CollType::Broadcast:
      if (rank_ == a.root) {
        if (out != a.sendbuff) memcpy(out, a.sendbuff, bytes);
      } else {
        memcpy(out, slot(a.root, call)->data(), bytes);
      }
      return;
    case CollType::AllGather:
      for (int r = 0; r < nranks_; ++r) {
        char* dst = out + bytes * r;
        const char* src = r == rank_ ? static_cast<const char*>(a.sendbuff) : slot(r, call)->data();
        if (dst != src) memcpy(dst, src, bytes);
      }
      return;
    default:
      return;
  }
}

Status ShmLane::start(const LaneOp& op) {
  if (broken_) return remoteError("small-collective lane is unusable after an earlier error");
  const uint64_t call = ++calls_;
  pending_ = 0;
  for (int r = 0; r < nranks_; ++r) {
    arrived_[r] = r == rank_;
    pending_ += r != rank_;
  }
  polls_ = 0;
  lastLiveness_ = Clock::time_point{};
  publish(op, call);
  return Status::Ok();
}

bool ShmLane::poll(const LaneOp& op, Status* error) {
  scan(calls_);
  if (pending_ == 0) return true;
  // Liveness every few polls and at most every livenessMs_ (the executor
  // polls on every sweep, so this keeps the clock off the hot loop).
  if ((++polls_ & 63) == 0) {
    const Clock::time_point now = Clock::now();
    if (now - lastLiveness_ >= std::chrono::milliseconds(livenessMs_)) {
      lastLiveness_ = now;
      Status live = checkLiveness(op);
      if (!live.ok()) {
        *error = fail(std::move(live));
        return false;
      }
    }
  }
  return false;
}

Status ShmLane::finish(const LaneOp& op) {
  const uint64_t call = calls_;
  Status s = checkPeers(op, call);
  if (!s.ok()) return fail(std::move(s));
  compute(op, call);
  if (p_.traffic != nullptr) {
    const uint64_t mine = contribution(op.args, rank_);
    for (int r = 0; r < nranks_; ++r) {
      if (r == rank_) continue;
      p_.traffic[r].sent.fetch_add(mine, std::memory_order_relaxed);
      p_.traffic[r].recv.fetch_add(contribution(op.args, r), std::memory_order_relaxed);
    }
  }
  return Status::Ok();
}

Status ShmLane::run(const LaneOp& op) {
  Status s = start(op);
  if (!s.ok()) return s;
  s = waitAll(op, calls_);
  if (!s.ok()) return fail(std::move(s));
  return finish(op);
}

// What each rank tells the others while the lane is being set up.
struct LaneHello {
  int32_t ok = 0;
  int32_t pid = 0;
  uint64_t pidNs = 0;
};

Status createLane(SetupContext& ctx, const LaneParams& params, std::unique_ptr<Lane>* out) {
  out->reset();
  const int n = ctx.nranks();
  const int me = ctx.rank();
  if (n < 2 || knobBool(Knob::LaneDisable) || knobBool(Knob::ShmDisable) || knobBool(Knob::Check)) {
    return Status::Ok();
  }
  const size_t maxBytes = knobSize(Knob::LaneMaxBytes);
  if (maxBytes == 0 || maxBytes > (64u << 20)) return Status::Ok();
  for (const PeerInfo& p : ctx.peers()) {
    if (p.hostHash != ctx.peers()[0].hostHash) return Status::Ok();
  }
  const LaneLayout layout(n, maxBytes);
  const size_t size = layout.totalBytes();
  if (size > (512u << 20)) return Status::Ok();
  const std::string name = "/" + ctx.resourcePrefix() + "-lane";

  // Rank 0 creates and sizes the segment; the others map it once they know
  // it exists; rank 0 unlinks it once everybody has it mapped (or failed).
  void* base = MAP_FAILED;
  LaneHello hello;
  hello.pid = getpid();
  hello.pidNs = pidNsInode();
  std::string why;
  bool created = false;
  auto mapFd = [&](int fd) {
    base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    close(fd);
    if (base == MAP_FAILED) why = std::string("mmap: ") + strerror(errno);
  };
  if (me == 0) {
    int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) {
      why = std::string("shm_open: ") + strerror(errno);
    } else if (created = true; ftruncate(fd, static_cast<off_t>(size)) != 0) {
      why = std::string("ftruncate: ") + strerror(errno);
      close(fd);
    } else {
      int rc = posix_fallocate(fd, 0, static_cast<off_t>(size));
      if (rc != 0 && rc != EOPNOTSUPP && rc != ENOSYS && rc != EINVAL) {
        why = std::string("posix_fallocate: ") + strerror(rc);
        close(fd);
      } else {
        mapFd(fd);
      }
    }
    if (base != MAP_FAILED) {
      auto* h = static_cast<LaneSegHeader*>(base);
      h->nranks = n;
      h->maxBytes = maxBytes;
      h->commHash = ctx.commHash();
      std::atomic_thread_fence(std::memory_order_release);
      h->magic = kLaneMagic;
      hello.ok = 1;
    }
  }
  std::vector<LaneHello> all(static_cast<size_t>(n));
  Status s = ctx.allGather(&hello, sizeof(hello), all.data());
  if (s.ok() && me != 0 && all[0].ok) {
    int fd = shm_open(name.c_str(), O_RDWR, 0);
    if (fd < 0) {
      why = std::string("shm_open: ") + strerror(errno);
    } else {
      mapFd(fd);
    }
    if (base != MAP_FAILED) {
      auto* h = static_cast<LaneSegHeader*>(base);
      hello.ok = h->magic == kLaneMagic && h->commHash == ctx.commHash() && h->nranks == n &&
                 h->maxBytes == maxBytes;
      if (!hello.ok) why = "the segment belongs to another communicator";
    }
  }
  if (s.ok()) s = ctx.allGather(&hello, sizeof(hello), all.data());
  if (created) shm_unlink(name.c_str());
  bool everyone = s.ok();
  for (const LaneHello& h : all) everyone = everyone && h.ok;
  if (!everyone) {
    if (base != MAP_FAILED) munmap(base, size);
    if (!s.ok()) return s;
    if (!why.empty()) TIDE_INFO("small-collective lane off: %s: %s", name.c_str(), why.c_str());
    return Status::Ok();
  }
  // Liveness checks only where pids are meaningful: same pid namespace,
  // another process.
  std::vector<int> pids(static_cast<size_t>(n), 0);
  std::vector<int> pidfds(static_cast<size_t>(n), -1);
  for (int r = 0; r < n; ++r) {
    if (r == me || all[r].pidNs != hello.pidNs || all[r].pid == hello.pid) continue;
    pids[r] = all[r].pid;
    pidfds[r] = openPidfd(all[r].pid);
  }
  *out = std::make_unique<ShmLane>(params, me, n, base, size, maxBytes, std::move(pids),
                                   std::move(pidfds));
  return Status::Ok();
}

}  // namespace

TIDE_ON_LOAD(registerLane(createLane));

}  // namespace tide::shm
