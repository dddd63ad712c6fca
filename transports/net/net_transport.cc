// The "net" transport: builds core Connections over the selected net
// (TIDE_NET / TIDE_NET_PLUGIN; include/tide/net.h). Priority 1: used between
// ranks that neither self nor shm connect.
//
// Setup (connect(), collective over all ranks):
//   1. Every rank with peers listens on device 0 of the net.
//   2. allGather of one Record per rank: net name, status, listen handle,
//      TIDE_NET_CHUNKSIZE and the net's maxSize. Each connection cuts chunks
//      of NetConnection::agreedChunk() of both ends' values, so both ends cut
//      alike and no chunk exceeds either net's maxSize, even when the ranks'
//      knobs or nets' limits differ.
//   3. For every peer and channel the rank connects a sendComm to the peer's
//      handle and accepts the peer's sendComm as its recvComm, all
//      non-blocking and interleaved (no ordering, so no deadlock).
//   4. Mutual authentication over the comms, bound to the job secret and
//      the communicator: each side sends Hello {from, to, channel, nranks,
//      fresh nonce} on its sendComm; an accepted recvComm is assigned to a
//      (peer, channel) by the Hello it carries; then each side sends Proof =
//      HMAC(secret, "tide-net-proof", peer's nonce, from/to/channel/nranks +
//      commHash) and checks the peer's Proof over its own nonce. Anything
//      malformed, misaddressed or unauthentic is closed and ignored.
// Bounded by ctx.timeoutSeconds() and ctx.abortFlag(); the waiting loop
// spins, yields, then sleeps 1 ms at a time.
#include <sched.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>

#include "core/auth.h"
#include "core/config.h"
#include "core/log.h"
#include "core/registry.h"
#include "core/socket.h"
#include "transports/net/net_connection.h"
#include "transports/net/net_registry.h"

namespace tide {
namespace {

constexpr uint32_t kRecordMagic = 0x4e655452;
constexpr uint32_t kHelloMagic = 0x4e657448;
constexpr uint32_t kProofMagic = 0x4e657450;
constexpr const char* kProofLabel = "tide-net-proof";
constexpr size_t kMaxAnon = 256;  // accepted comms not yet identified

struct Record {
  uint32_t magic;
  int32_t status;    // tideResult_t of this rank's net setup
  uint64_t chunk;    // TIDE_NET_CHUNKSIZE
  uint64_t maxSize;  // the net's (device 0) maxSize; 0: no limit stated
  char net[24];
  uint8_t handle[TIDE_NET_HANDLE_MAXSIZE];
};

struct Msg {
  uint32_t magic;
  int32_t from, to, channel, nranks;
  uint8_t nonce[kNonceBytes];
  uint8_t proof[32];
};
static_assert(sizeof(Msg) == 68);

// A request being waited for during setup (test() until done).
struct Pending {
  void* req = nullptr;
  bool done = false;
};

struct Link {  // (peer, channel)
  int peer = -1, channel = 0;
  uint8_t handle[TIDE_NET_HANDLE_MAXSIZE];  // peer's; connect() may keep state in it
  void* send = nullptr;
  void* recv = nullptr;
  Msg hello{}, proof{}, peerHello{}, peerProof{};
  Pending helloSent, proofSent, proofRecv;
  bool verified = false;
  bool finished() const { return verified && proofSent.done; }
};

struct Anon {  // accepted, Hello not yet received
  void* recv;
  Msg hello;
  Pending req;
};

Digest proofFor(SetupContext& ctx, int from, int to, int channel, const uint8_t* nonce) {
  uint8_t c[4 * sizeof(int32_t) + sizeof(uint64_t)];
  int32_t v[4] = {from, to, channel, ctx.nranks()};
  uint64_t h = ctx.commHash();
  std::memcpy(c, v, sizeof(v));
  std::memcpy(c + sizeof(v), &h, sizeof(h));
  return connectionProof(ctx.secret(), kProofLabel, nonce, c, sizeof(c));
}

class NetSetup {
 public:
  NetSetup(SetupContext& ctx, const tideNet_v1_t* net) : ctx_(ctx), net_(net) {}
  ~NetSetup() {
    for (Link& l : links_) {
      if (l.send) (void)net_->closeSend(l.send);
      if (l.recv) (void)net_->closeRecv(l.recv);
    }
    for (auto& a : anon_) (void)net_->closeRecv(a->recv);
  }

  Status run(const std::vector<int>& peers, const std::vector<Record>& all, void* listenComm,
             std::vector<std::unique_ptr<Connection>>* out) {
    listen_ = listenComm;
    for (int p : peers) {
      for (int c = 0; c < kNumChannels; ++c) {
        Link l;
        l.peer = p;
        l.channel = c;
        std::memcpy(l.handle, all[p].handle, sizeof(l.handle));
        index_[{p, c}] = links_.size();
        links_.push_back(l);
      }
    }
    Deadline deadline = Deadline::after(ctx_.timeoutSeconds());
    auto idleSince = std::chrono::steady_clock::now();
    for (;;) {
      bool moved = false;
      TIDE_TRY(step(&moved));
      size_t done = 0;
      for (const Link& l : links_) done += l.finished();
      if (done == links_.size()) break;
      if (ctx_.abortFlag().load(std::memory_order_relaxed))
        return remoteError("net: connection setup aborted");
      if (deadline.expired()) return timeoutError("net: %s", missing().c_str());
      auto now = std::chrono::steady_clock::now();
      if (moved) idleSince = now;
      auto idle = now - idleSince;
      if (idle > std::chrono::milliseconds(2)) {
        timespec ts{0, 1000000};
        nanosleep(&ts, nullptr);
      } else if (idle > std::chrono::microseconds(50)) {
        sched_yield();
      }
    }
    const Record& me = all[ctx_.rank()];
    int inflight = static_cast<int>(std::clamp<int64_t>(knobInt(Knob::NetInflight), 1, 256));
    // Device pointers this side's net registers (GPUDirect RDMA). Each side
    // decides alone: the bytes on the wire are the same either way.
    tideNetProperties_v1_t props{};
    const int devicePtr = net_->getProperties(0, &props) == tideSuccess ? props.ptrSupport : 0;
    out->clear();
    for (Link& l : links_) {
      const Record& peer = all[l.peer];
      size_t chunk = NetConnection::agreedChunk(me.chunk, me.maxSize, peer.chunk, peer.maxSize);
      auto c = std::make_unique<NetConnection>(net_, l.send, l.recv, l.peer, l.channel, chunk,
                                               inflight, ctx_.opTag(l.channel));
      c->setDevicePtrSupport(devicePtr);
      out->push_back(std::move(c));
      l.send = l.recv = nullptr;
    }
    return Status::Ok();
  }

 private:
  Status test(Pending& p, bool* moved, bool* ok) {
    *ok = true;
    if (p.done || p.req == nullptr) return Status::Ok();
    int done = 0;
    size_t size = 0;
    tideResult_t r = net_->test(p.req, &done, &size);
    if (r != tideSuccess) {
      p.req = nullptr;
      *ok = false;
      return netStatus(r, net_->name, "handshake");
    }
    if (done) {
      p.done = true;
      *moved = true;
      if (size != sizeof(Msg)) *ok = false;
    }
    return Status::Ok();
  }

  Status post(void* comm, bool send, Msg* m, Pending* p) {
    void* req = nullptr;
    void* data = m;
    size_t size = sizeof(Msg);
    int tag = 0;
    tideResult_t r = send ? net_->isend(comm, m, sizeof(Msg), 0, nullptr, &req)
                          : net_->irecv(comm, 1, &data, &size, &tag, nullptr, &req);
    TIDE_TRY(netStatus(r, net_->name, send ? "isend (handshake)" : "irecv (handshake)"));
    p->req = req;  // NULL: try again on the next step
    return Status::Ok();
  }

  Status step(bool* moved) {
    // Outgoing comms, then their Hello.
    for (Link& l : links_) {
      if (l.send == nullptr) {
        TIDE_TRY(netStatus(net_->connect(0, l.handle, &l.send), net_->name, "connect"));
        if (l.send == nullptr) continue;
        *moved = true;
        l.hello = Msg{kHelloMagic, ctx_.rank(), l.peer, l.channel, ctx_.nranks(), {}, {}};
        TIDE_TRY(randomBytes(l.hello.nonce, kNonceBytes));
      }
      if (l.helloSent.req == nullptr && !l.helloSent.done)
        TIDE_TRY(post(l.send, true, &l.hello, &l.helloSent));
      bool ok;
      TIDE_TRY(test(l.helloSent, moved, &ok));
    }
    // Incoming comms, identified by their Hello.
    for (;;) {
      void* rc = nullptr;
      TIDE_TRY(netStatus(net_->accept(listen_, &rc), net_->name, "accept"));
      if (rc == nullptr) break;
      *moved = true;
      if (anon_.size() >= kMaxAnon) {
        TIDE_WARN("net: rank %d: too many unidentified connections; closing one", ctx_.rank());
        (void)net_->closeRecv(anon_.front()->recv);
        anon_.erase(anon_.begin());
      }
      anon_.push_back(std::make_unique<Anon>(Anon{rc, {}, {}}));  // irecv targets stay put
    }
    for (size_t i = anon_.size(); i-- > 0;) {
      Anon& a = *anon_[i];
      if (a.req.req == nullptr) {
        Status s = post(a.recv, false, &a.hello, &a.req);
        if (!s.ok()) {
          drop(i, s.message().c_str());
          continue;
        }
      }
      bool ok;
      Status s = test(a.req, moved, &ok);
      if (!s.ok() || !ok) {
        drop(i, s.ok() ? "wrong hello size" : s.message().c_str());
        continue;
      }
      if (a.req.done) identify(i);
    }
    // Proofs.
    for (Link& l : links_) {
      if (l.send == nullptr || l.recv == nullptr) continue;
      if (l.proofSent.req == nullptr && !l.proofSent.done) {
        if (l.proof.magic == 0) {
          l.proof = Msg{kProofMagic, ctx_.rank(), l.peer, l.channel, ctx_.nranks(), {}, {}};
          Digest d = proofFor(ctx_, ctx_.rank(), l.peer, l.channel, l.peerHello.nonce);
          std::memcpy(l.proof.proof, d.data(), d.size());
        }
        TIDE_TRY(post(l.send, true, &l.proof, &l.proofSent));
      }
      bool ok;
      TIDE_TRY(test(l.proofSent, moved, &ok));
      if (l.proofRecv.req == nullptr && !l.proofRecv.done)
        TIDE_TRY(post(l.recv, false, &l.peerProof, &l.proofRecv));
      TIDE_TRY(test(l.proofRecv, moved, &ok));
      if (!ok) return remoteError("net: bad proof message from rank %d", l.peer);
      if (l.proofRecv.done && !l.verified) {
        Digest d = proofFor(ctx_, l.peer, ctx_.rank(), l.channel, l.hello.nonce);
        const Msg& m = l.peerProof;
        if (m.magic != kProofMagic || m.from != l.peer || m.to != ctx_.rank() ||
            m.channel != l.channel || !constantTimeEqual(m.proof, d.data(), d.size())) {
          return remoteError(
              "net: rank %d failed to prove it belongs to this job and communicator (channel %d; "
              "different TIDE_SECRET?)",
              l.peer, l.channel);
        }
        l.verified = true;
      }
    }
    return Status::Ok();
  }

  void drop(size_t i, const char* why) {
    TIDE_WARN("net: rank %d dropped an incoming connection: %s", ctx_.rank(), why);
    (void)net_->closeRecv(anon_[i]->recv);
    anon_.erase(anon_.begin() + static_cast<long>(i));
  }

  void identify(size_t i) {
    const Msg& h = anon_[i]->hello;
    auto it = index_.find({h.from, h.channel});
    if (h.magic != kHelloMagic || h.to != ctx_.rank() || h.nranks != ctx_.nranks() ||
        it == index_.end()) {
      drop(i, "not a hello for this rank");
      return;
    }
    Link& l = links_[it->second];
    if (l.recv != nullptr) {
      drop(i, "duplicate connection");
      return;
    }
    l.recv = anon_[i]->recv;
    l.peerHello = h;
    anon_.erase(anon_.begin() + static_cast<long>(i));
  }

  std::string missing() const {
    std::string m = "rank " + std::to_string(ctx_.rank()) + " timed out connecting:";
    for (const Link& l : links_) {
      if (l.finished()) continue;
      m += " rank " + std::to_string(l.peer) + "/ch" + std::to_string(l.channel) +
           (l.send == nullptr   ? " (connect)"
            : l.recv == nullptr ? " (accept)"
                                : " (auth)");
      if (m.size() > 200) return m + " ...";
    }
    return m;
  }

  SetupContext& ctx_;
  const tideNet_v1_t* net_;
  void* listen_ = nullptr;
  std::vector<Link> links_;
  std::map<std::pair<int, int>, size_t> index_;
  std::vector<std::unique_ptr<Anon>> anon_;
};

class NetTransport final : public Transport {
 public:
  const char* name() const override { return "net"; }
  int priority() const override { return 1; }
  bool canConnect(const PeerInfo& me, const PeerInfo& peer) const override {
    return me.rank != peer.rank;
  }

  Status connect(SetupContext& ctx, const std::vector<int>& peers,
                 std::vector<std::unique_ptr<Connection>>* out) override {
    out->clear();
    Record mine{};
    mine.magic = kRecordMagic;
    const tideNet_v1_t* net = nullptr;
    void* listenComm = nullptr;
    Status st;
    if (!peers.empty()) {
      st = selectNet("", &net);
      if (st.ok()) {
        std::snprintf(mine.net, sizeof(mine.net), "%s", net->name);
        mine.chunk = knobSize(Knob::NetChunkSize);
        tideNetProperties_v1_t props{};
        st = netStatus(net->getProperties(0, &props), net->name, "getProperties");
        mine.maxSize = props.maxSize;
        if (st.ok() && props.maxSize != 0 && props.maxSize < NetConnection::kMinChunk) {
          st = invalidUsage("net: %s's largest message (maxSize %zu) is below %zu bytes", net->name,
                            props.maxSize, NetConnection::kMinChunk);
        }
        if (st.ok()) st = netStatus(net->listen(0, mine.handle, &listenComm), net->name, "listen");
      }
      mine.status = st.code();
    }
    std::vector<Record> all(ctx.nranks());
    Status g = ctx.allGather(&mine, sizeof(mine), all.data());
    if (!g.ok()) {
      if (listenComm) (void)net->closeListen(listenComm);
      return g;
    }
    if (peers.empty()) return Status::Ok();
    if (!st.ok()) return st;
    st = checkRecords(ctx, peers, all, net);
    if (st.ok()) {
      NetSetup setup(ctx, net);
      st = setup.run(peers, all, listenComm, out);
    }
    (void)net->closeListen(listenComm);
    TIDE_TRY(st);
    TIDE_INFO("net: rank %d connected to %zu peers over %s", ctx.rank(), peers.size(), net->name);
    return Status::Ok();
  }

 private:
  static Status checkRecords(SetupContext& ctx, const std::vector<int>& peers,
                             const std::vector<Record>& all, const tideNet_v1_t* net) {
    for (int p : peers) {
      const Record& r = all[p];
      if (r.magic != kRecordMagic) return internalError("net: rank %d sent no record", p);
      if (r.status != tideSuccess) {
        return makeStatus(static_cast<tideResult_t>(r.status),
                          "net: rank %d could not set up its net (%s); see its log", p,
                          tideGetErrorString(static_cast<tideResult_t>(r.status)));
      }
      if (strncmp(r.net, net->name, sizeof(r.net)) != 0) {
        return invalidUsage("net: rank %d uses net \"%.24s\", rank %d uses \"%s\" (TIDE_NET)", p,
                            r.net, ctx.rank(), net->name);
      }
    }
    return Status::Ok();
  }
};

TIDE_ON_LOAD(static NetTransport transport; ::tide::registerTransport(&transport));

}  // namespace
}  // namespace tide
