// Shared-memory transport for ranks on the same node.
//
// Setup (collective, see connect()): every rank with shm peers creates one
// POSIX segment holding its Doorbell and its receive FIFOs, publishes the name
// with allGather, maps the segments of its peers, and after everyone has
// mapped (a second allGather, which doubles as the barrier) removes every
// name, so nothing stays in /dev/shm, whoever dies when. Data: the sender copies pieces into the
// FIFO in the receiver's segment and rings the receiver's doorbell; the receiver copies (or
// reduces) out of the slots and rings the sender's doorbell to report free space. Messages of at
// least TIDE_SHM_CMA_MIN bytes travel with one copy instead (fifo.h, rendezvous): the sender posts
// a descriptor, the receiver reads the bytes out of the sender's memory (process_vm_readv) and
// acks; the send completes at the ack. Setup probes process_vm_readv between
// every pair; a pair uses it only when both of its ranks could reach all
// their peers with it (the two sides agree without another exchange).
// Every slot carries the sender's operation tag (SetupContext::opTag).
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/config.h"
#include "core/log.h"
#include "core/registry.h"
#include "core/transport.h"
#include "transports/shm/cma.h"
#include "transports/shm/fifo.h"
#include "transports/shm/segment.h"

namespace tide::shm {
namespace {

constexpr int kPriority = 10;
// progress() calls without movement between two clock reads. Small because
// an executor that sleeps on its doorbell between calls makes few of them;
// the coarse clock costs a few nanoseconds.
constexpr uint32_t kIdleCallsPerClockRead = 16;
// Bounce buffer of single-copy reducing receives: stays in L2 while the
// kernel reduces it.
constexpr size_t kBounceBytes = 256u << 10;

// A descriptor that becomes readable when process `pid` exits (pidfd), or -1
// when the kernel has none (then kill(pid, 0) is the fallback).
int openPidFd(int pid) {
#ifdef SYS_pidfd_open
  long fd = syscall(SYS_pidfd_open, pid, 0);
  return fd < 0 ? -1 : static_cast<int>(fd);
#else
  (void)pid;
  return -1;
#endif
}

// True when the process behind `pidfd` / `pid` has exited (a zombie counts as
// exited: pidfd reports it; kill(pid, 0) cannot).
bool peerExited(int pidfd, int pid) {
  if (pidfd >= 0) {
    pollfd p{pidfd, POLLIN, 0};
    return poll(&p, 1, 0) == 1 && (p.revents & (POLLIN | POLLHUP | POLLERR)) != 0;
  }
  return kill(pid, 0) != 0 && errno == ESRCH;
}

int64_t coarseNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// What each rank publishes at setup. Fixed size for allGather.
struct SegRecord {
  uint32_t state = 0;  // 0 (not yet), kReady or kFailed
  uint32_t pad = 0;
  uint64_t probeAddr = 0;  // cmaProbeAddress() of the owner (0: single copy off)
  uint64_t probeValue = 0;
  char name[120] = {};
};
// What each rank reports after mapping its peers' segments.
struct SetupResult {
  uint8_t ok = 0;
  uint8_t cmaAll = 0;  // process_vm_readv works from this rank to every shm peer
};
constexpr uint32_t kReady = 1;
constexpr uint32_t kFailed = 2;

class ShmConnection final : public Connection {
 public:
  // Options of one connection, fixed at setup.
  struct Options {
    int livePid = 0;      // process to probe when the peer stalls (0: never probe)
    int64_t checkNs = 0;  // stall before a probe
    size_t cmaMin = 0;    // smallest message sent with one copy (0: never)
    CmaHuge cmaHuge = CmaHuge::kEnclosing;  // huge-page backing of single-copy sources
    const uint32_t* tagWord = nullptr;      // the channel's operation tag, or null
  };
  ShmConnection(int peerRank, const Options& o, std::shared_ptr<Mapping> own,
                std::shared_ptr<Mapping> peer, FifoView send, FifoView recv)
      : peerRank_(peerRank),
        livePid_(o.livePid),
        pidFd_(o.livePid > 0 ? openPidFd(o.livePid) : -1),
        checkNs_(o.checkNs),
        cmaMin_(o.cmaMin),
        cmaHuge_(o.cmaHuge),
        tagWord_(o.tagWord),
        myPid_(static_cast<int32_t>(getpid())),
        own_(std::move(own)),
        peer_(std::move(peer)),
        peerBell_(&peer_->header()->doorbell),
        sendFifo_(send),
        recvFifo_(recv) {}
  ~ShmConnection() override {
    if (pidFd_ >= 0) close(pidFd_);
  }
  ShmConnection(const ShmConnection&) = delete;
  ShmConnection& operator=(const ShmConnection&) = delete;

  Status postSend(const void* buf, size_t bytes, uint64_t* ticket) override {
    if (bytes > 0 && buf == nullptr) {
      return invalidArgument("shm: send of %zu bytes from null", bytes);
    }
    *ticket = ++sendsPosted_;
    // Every post, empty ones included, takes a message number.
    const uint32_t seq = static_cast<uint32_t>(sendsPosted_);
    if (bytes == 0 && sends_.empty()) {
      ++sendsPushed_;
      updateSendsDone();
      return Status::Ok();
    }
    SendOp op{static_cast<const char*>(buf), bytes, 0, seq};
    op.tag = tagWord_ != nullptr ? *tagWord_ : 0;
    if (cmaMin_ > 0 && bytes >= cmaMin_) {
      cmaPrepareSource(buf, bytes, cmaHuge_);
      op.rendezvous = true;
      op.pid = myPid_;
      op.msgNum = sendsPosted_;
    }
    // Fast path: nothing queued ahead and room in the FIFO; the message (or
    // its descriptor) goes out now (the caller may never call progress() for
    // a completed send).
    if (sends_.empty() && (op.rendezvous || bytes <= sendFifo_.capacity()) && error_.ok()) {
      if (pushMessage(sendFifo_, op) > 0) {
        pushed(op);
        peerBell_->ring();
        return Status::Ok();
      }
    }
    sends_.push_back(op);
    return Status::Ok();
  }

  Status postRecv(void* buf, size_t bytes, const RecvReduce* rr, uint64_t* ticket) override {
    if (bytes > 0 && buf == nullptr) {
      return invalidArgument("shm: receive of %zu bytes into null", bytes);
    }
    if (rr != nullptr) {
      if (rr->fn == nullptr || rr->elemSize == 0 || bytes % rr->elemSize != 0 ||
          (bytes > 0 && rr->src == nullptr)) {
        return invalidArgument("shm: bad reducing receive (%zu bytes, element size %zu)", bytes,
                               rr->elemSize);
      }
    }
    *ticket = ++recvsPosted_;
    const uint32_t seq = static_cast<uint32_t>(recvsPosted_);
    if (bytes == 0 && recvs_.empty()) {
      ++recvsDone_;
      return Status::Ok();
    }
    RecvOp op;
    op.buf = static_cast<char*>(buf);
    op.bytes = bytes;
    op.seq = seq;
    op.tag = tagWord_ != nullptr ? *tagWord_ : 0;
    op.peer = peerRank_;
    if (rr != nullptr) {
      op.reduce = true;
      op.rr = *rr;
      if (cmaMin_ > 0 && bytes > 0) {
        // The sender decides which path a message takes. Allocated once (queued receives keep
        // pointers into it); an element larger than the buffer gets none and its receive fails.
        if (bounce_.empty()) bounce_.resize(kBounceBytes);
        op.bounce = bounce_.data();
        op.bounceBytes = bounce_.size() / rr->elemSize * rr->elemSize;
      }
    }
    recvs_.push_back(std::move(op));
    return Status::Ok();
  }

  Status progress(bool* moved) override {
    if (!error_.ok()) return error_;
    bool any = false;
    bool wake = false;
    while (!sends_.empty()) {
      SendOp& op = sends_.front();
      if (pushMessage(sendFifo_, op) > 0) wake = true;
      if (!op.done()) break;
      pushed(op);
      sends_.pop_front();
      any = true;
    }
    if (!acks_.empty()) {
      const uint64_t acked = sendFifo_.rendezvousAcked();
      while (!acks_.empty() && acks_.front() <= acked) {
        acks_.pop_front();
        any = true;
      }
      updateSendsDone();
    }
    while (!recvs_.empty()) {
      RecvOp& op = recvs_.front();
      size_t slots = 0;
      bool acked = false;
      const size_t before = op.off;
      Status st = pullMessage(recvFifo_, op, &slots, &acked);
      if (slots > 0 || acked) wake = true;
      if (op.off != before) any = true;  // a single-copy pull in progress moved bytes
      if (!st.ok()) {
        error_ = st;
        markFailed();
        break;
      }
      if (!op.done()) break;
      recvs_.pop_front();
      ++recvsDone_;
      any = true;
    }
    // One ring covers every slot published or freed above (all stores were
    // release stores that precede it).
    if (wake) peerBell_->ring();
    if (!error_.ok()) return error_;
    if (wake || any) {
      *moved = true;
      idleCalls_ = 0;
      idleSinceNs_ = 0;
    } else if (busy()) {
      return checkPeer();
    }
    return Status::Ok();
  }

  uint64_t sendsDone() const override { return sendsDone_; }
  uint64_t recvsDone() const override { return recvsDone_; }
  bool busy() const override { return !sends_.empty() || !recvs_.empty() || !acks_.empty(); }

 private:
  // Called when every slot of `op` is in the FIFO; a rendezvous send waits
  // for its ack.
  void pushed(const SendOp& op) {
    ++sendsPushed_;
    if (op.rendezvous) acks_.push_back(op.msgNum);
    updateSendsDone();
  }
  // Sends complete in order: all pushed ones before the oldest unacked.
  void updateSendsDone() { sendsDone_ = acks_.empty() ? sendsPushed_ : acks_.front() - 1; }

  // Called on every idle progress(); reads the clock rarely and probes the
  // peer process at most once per kLivenessCheckNs of stall.
  Status checkPeer() {
    if (++idleCalls_ < kIdleCallsPerClockRead) return Status::Ok();
    idleCalls_ = 0;
    int64_t now = coarseNs();
    if (idleSinceNs_ == 0) {
      idleSinceNs_ = now;
      return Status::Ok();
    }
    if (now - idleSinceNs_ < checkNs_) return Status::Ok();
    idleSinceNs_ = now;
    if (livePid_ > 0 && peerExited(pidFd_, livePid_)) {
      error_ = remoteError("shm: peer rank %d (pid %d) exited while this rank was %s it", peerRank_,
                           livePid_, !recvs_.empty() ? "receiving from" : "sending to");
      markFailed();
      return error_;
    }
    if (peer_->header()->failed.load(std::memory_order_acquire) != 0) {
      error_ = remoteError(
          "shm: peer rank %d gave up on this communicator after an error of its own while this "
          "rank was %s it",
          peerRank_, !recvs_.empty() ? "receiving from" : "sending to");
      markFailed();
      return error_;
    }
    return Status::Ok();
  }

  // Tells every shm peer of this rank that it will not finish the operation.
  void markFailed() { own_->header()->failed.store(1, std::memory_order_release); }

  const int peerRank_;
  const int livePid_;
  const int pidFd_;
  const int64_t checkNs_;
  const size_t cmaMin_;
  const CmaHuge cmaHuge_;
  const uint32_t* const tagWord_;
  const int32_t myPid_;
  std::shared_ptr<Mapping> own_;   // holds my receive FIFOs
  std::shared_ptr<Mapping> peer_;  // holds my send FIFO and the peer's doorbell
  Doorbell* peerBell_;
  FifoView sendFifo_;
  FifoView recvFifo_;
  std::deque<SendOp> sends_;
  std::deque<RecvOp> recvs_;
  std::deque<uint64_t> acks_;  // message numbers of pushed rendezvous sends not yet acked
  std::vector<unsigned char> bounce_;
  uint64_t sendsPosted_ = 0;
  uint64_t sendsPushed_ = 0;
  uint64_t sendsDone_ = 0;
  uint64_t recvsPosted_ = 0;
  uint64_t recvsDone_ = 0;
  Status error_;
  uint32_t idleCalls_ = 0;
  int64_t idleSinceNs_ = 0;
};

struct Geometry {
  uint32_t slots;
  size_t slotSize;
};

Geometry readGeometry() {
  int64_t slots = knobInt(Knob::ShmSlots);
  uint64_t size = knobSize(Knob::ShmSlotSize);
  Geometry g;
  g.slots = static_cast<uint32_t>(slots < 1 ? 1 : (slots > 4096 ? 4096 : slots));
  if (size < kCacheLine) size = kCacheLine;
  if (size > (256u << 20)) size = 256u << 20;
  g.slotSize = alignUp(size, kCacheLine);
  if (g.slots != slots || g.slotSize != knobSize(Knob::ShmSlotSize)) {
    TIDE_INFO("shm: using %u slots of %zu bytes (adjusted from the TIDE_SHM_* knobs)", g.slots,
              g.slotSize);
  }
  return g;
}

std::string segmentName(const std::string& prefix, int rank) {
  std::string name = prefix.empty() || prefix[0] != '/' ? "/" + prefix : prefix;
  return name + "-shm-r" + std::to_string(rank);
}

class ShmTransport final : public Transport {
 public:
  const char* name() const override { return "shm"; }
  int priority() const override { return kPriority; }
  bool canConnect(const PeerInfo& me, const PeerInfo& peer) const override {
    return me.hostHash == peer.hostHash && !knobBool(Knob::ShmDisable);
  }

  Status connect(SetupContext& ctx, const std::vector<int>& peers,
                 std::vector<std::unique_ptr<Connection>>* out) override {
    const int me = ctx.rank();
    const int nranks = ctx.nranks();
    const size_t npeers = peers.size();
    Status local;
    SegRecord mine;
    std::string ownName;
    std::shared_ptr<Mapping> own;
    std::vector<FifoView> recvFifos(npeers * kNumChannels);
    if (npeers > 0) {
      Geometry g = readGeometry();
      ownName = segmentName(ctx.resourcePrefix(), me);
      if (ownName.size() >= sizeof(mine.name)) {
        local = internalError("shm: segment name %s is too long", ownName.c_str());
      } else {
        local = createSegment(ownName, me, static_cast<uint32_t>(npeers * kNumChannels), g.slots,
                              g.slotSize, &own);
      }
      if (local.ok()) {
        for (size_t i = 0; i < npeers; ++i) {
          for (int c = 0; c < kNumChannels; ++c) {
            uint32_t idx = static_cast<uint32_t>(i * kNumChannels + c);
            recvFifos[idx] = layoutFifo(*own, idx, peers[i], c);
          }
        }
        std::snprintf(mine.name, sizeof(mine.name), "%s", ownName.c_str());
        mine.state = kReady;
        if (knobBool(Knob::ShmCma)) {
          mine.probeAddr = cmaProbeAddress();
          mine.probeValue = cmaProbeValue();
        }
      } else {
        mine.state = kFailed;
      }
    }

    // When setup fails because a peer vanished, that peer may have died
    // between creating its segment and unlinking it: every survivor removes
    // the (deterministic, communicator-unique) names of all its peers, so
    // nothing is left in /dev/shm.
    auto unlinkAll = [&] {
      if (own) unlinkSegment(ownName);
      for (int p : peers) {
        if (p != me) unlinkSegmentQuietly(segmentName(ctx.resourcePrefix(), p));
      }
    };
    std::vector<SegRecord> all(static_cast<size_t>(nranks));
    Status st = ctx.allGather(&mine, sizeof(mine), all.data());
    if (!st.ok()) {
      unlinkAll();
      TIDE_TRY(st);
    }

    std::vector<std::shared_ptr<Mapping>> peerMaps(npeers);
    std::vector<FifoView> sendFifos(npeers * kNumChannels);
    for (size_t i = 0; i < npeers && local.ok(); ++i) {
      const int p = peers[i];
      if (p < 0 || p >= nranks || p == me) {
        local = internalError("shm: bad peer rank %d", p);
        break;
      }
      const SegRecord& rec = all[static_cast<size_t>(p)];
      if (rec.state != kReady) {
        local = remoteError("shm: rank %d has no shared-memory segment", p);
        break;
      }
      std::string name(rec.name, strnlen(rec.name, sizeof(rec.name)));
      local = openSegment(name, p, &peerMaps[i]);
      for (int c = 0; c < kNumChannels && local.ok(); ++c) {
        local = findFifo(*peerMaps[i], me, c, &sendFifos[i * kNumChannels + c]);
      }
    }

    // Single copy: read each peer's probe word. Only meaningful when the
    // peer's pid is valid in this pid namespace.
    const uint64_t myNs = pidNamespaceInode();
    bool cmaAll = local.ok() && npeers > 0 && myNs != 0 && mine.probeAddr != 0;
    for (size_t i = 0; i < npeers && cmaAll; ++i) {
      const SegRecord& rec = all[static_cast<size_t>(peers[i])];
      const SegHeader* ph = peerMaps[i]->header();
      cmaAll = rec.probeAddr != 0 && ph->pidNsInode == myNs &&
               cmaProbe(ph->pid, rec.probeAddr, rec.probeValue);
    }

    // Everyone has mapped what it needs once this returns; it doubles as the
    // barrier after which owners unlink, and makes every rank agree on
    // success and on single copy.
    SetupResult res;
    res.ok = local.ok() ? 1 : 0;
    res.cmaAll = cmaAll ? 1 : 0;
    std::vector<SetupResult> oks(static_cast<size_t>(nranks));
    st = ctx.allGather(&res, sizeof(res), oks.data());
    // Once it returns every rank has mapped what it needs (each contributed
    // after mapping), so any rank may remove every name: a peer killed right
    // after this point leaves nothing behind either.
    unlinkAll();
    TIDE_TRY(st);
    TIDE_TRY(local);
    for (int r = 0; r < nranks; ++r) {
      if (oks[static_cast<size_t>(r)].ok == 0) {
        return remoteError("shm: rank %d failed to set up shared memory", r);
      }
    }
    if (npeers == 0) return Status::Ok();

    ctx.installDoorbell(&own->header()->doorbell);
    int64_t checkMs = knobInt(Knob::ShmLivenessMs);
    const int64_t checkNs = (checkMs < 1 ? 1 : checkMs) * 1000 * 1000;
    const size_t cmaMin = std::max<uint64_t>(knobSize(Knob::ShmCmaMin), 1);
    const int64_t huge = knobInt(Knob::ShmCmaHuge);
    const CmaHuge cmaHuge =
        huge <= 0 ? CmaHuge::kOff : (huge == 1 ? CmaHuge::kInterior : CmaHuge::kEnclosing);
    const int myPid = static_cast<int>(getpid());
    out->clear();
    out->reserve(npeers * kNumChannels);
    size_t cmaPeers = 0;
    for (size_t i = 0; i < npeers; ++i) {
      const SegHeader* ph = peerMaps[i]->header();
      ShmConnection::Options o;
      // Probe the peer only when its pid means something here.
      o.livePid = (myNs != 0 && ph->pidNsInode == myNs && ph->pid != myPid) ? ph->pid : 0;
      o.checkNs = checkNs;
      const bool cma = cmaAll && oks[static_cast<size_t>(peers[i])].cmaAll != 0;
      o.cmaMin = cma ? cmaMin : 0;
      o.cmaHuge = cmaHuge;
      cmaPeers += cma ? 1 : 0;
      for (int c = 0; c < kNumChannels; ++c) {
        size_t idx = i * kNumChannels + c;
        o.tagWord = ctx.opTag(c);
        out->push_back(std::make_unique<ShmConnection>(peers[i], o, own, peerMaps[i],
                                                       sendFifos[idx], recvFifos[idx]));
      }
    }
    TIDE_INFO(
        "shm: rank %d connected to %zu peers (%u slots of %zu bytes per FIFO; single copy from "
        "%zu bytes with %zu of them)",
        me, npeers, own->header()->slots, static_cast<size_t>(own->header()->slotSize), cmaMin,
        cmaPeers);
    return Status::Ok();
  }
};

}  // namespace

TIDE_ON_LOAD(static ShmTransport transport; ::tide::registerTransport(&transport));

}  // namespace tide::shm
