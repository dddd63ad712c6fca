// Rank side of the bootstrap, plus the unique-id encoding.
#include "core/boot/bootstrap.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "core/boot/bootstrap_frame.h"
#include "core/boot/bootstrap_wire.h"
#include "core/config.h"
#include "core/if_addrs.h"
#include "core/if_filter.h"
#include "core/log.h"

namespace tide {

// ---- Wire helpers ---------------------------------------------------------------

WireAddr toWire(const SockAddr& a) {
  WireAddr w;
  w.family = static_cast<uint16_t>(a.family());
  w.port = static_cast<uint16_t>(a.port());
  if (a.family() == AF_INET) {
    memcpy(w.addr, &reinterpret_cast<const sockaddr_in*>(&a.ss)->sin_addr, 4);
  } else if (a.family() == AF_INET6) {
    memcpy(w.addr, &reinterpret_cast<const sockaddr_in6*>(&a.ss)->sin6_addr, 16);
  }
  return w;
}

SockAddr fromWire(const WireAddr& w) {
  SockAddr a;
  if (w.family == AF_INET) {
    auto* in = reinterpret_cast<sockaddr_in*>(&a.ss);
    in->sin_family = AF_INET;
    memcpy(&in->sin_addr, w.addr, 4);
    a.len = sizeof(sockaddr_in);
  } else if (w.family == AF_INET6) {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&a.ss);
    in6->sin6_family = AF_INET6;
    memcpy(&in6->sin6_addr, w.addr, 16);
    a.len = sizeof(sockaddr_in6);
  }
  a.setPort(w.port);
  return a;
}

// ---- Unique id ------------------------------------------------------------------

namespace {

struct PackedId {
  uint64_t magic;
  uint8_t flags;  // 1: authenticated, 2: rank 0 starts the root
  uint8_t pad[7];
  WireAddr root;
  uint8_t secret[kSecretBytes];
  uint64_t nonce;
};
static_assert(sizeof(PackedId) <= TIDE_UNIQUE_ID_BYTES);

}  // namespace

void encodeUniqueId(const UniqueIdData& data, tideUniqueId* id) {
  PackedId p{};
  p.magic = kUniqueIdMagic;
  p.flags = (data.authenticated ? 1 : 0) | (data.rank0StartsRoot ? 2 : 0);
  p.root = toWire(data.root);
  memcpy(p.secret, data.secret, kSecretBytes);
  p.nonce = data.nonce;
  memset(id->internal, 0, sizeof(id->internal));
  memcpy(id->internal, &p, sizeof(p));
}

Status decodeUniqueId(const tideUniqueId& id, UniqueIdData* data) {
  PackedId p;
  memcpy(&p, id.internal, sizeof(p));
  if (p.magic != kUniqueIdMagic)
    return invalidArgument("unique id is not from tideGetUniqueId (bad magic)");
  if (p.root.family != AF_INET && p.root.family != AF_INET6)
    return invalidArgument("unique id holds no valid root address");
  data->root = fromWire(p.root);
  data->authenticated = (p.flags & 1) != 0;
  data->rank0StartsRoot = (p.flags & 2) != 0;
  memcpy(data->secret, p.secret, kSecretBytes);
  data->nonce = p.nonce;
  return Status::Ok();
}

void secretFromEnvironment(uint8_t secret[kSecretBytes], bool* authenticated) {
  std::string s = knobString(Knob::Secret);
  if (s.empty()) {
    memset(secret, 0, kSecretBytes);
    *authenticated = false;
  } else {
    secretFromString(s, secret);
    *authenticated = true;
  }
}

// ---- Rank side -----------------------------------------------------------------

namespace {

constexpr const char* kRootLabel = "tide-bootstrap-root";
constexpr const char* kRingLabel = "tide-bootstrap-ring";

const char* refusalText(int32_t code) {
  switch (code) {
    case kBootRefuseNranks:
      return "nranks mismatch";
    case kBootRefuseDuplicate:
      return "duplicate rank";
    default:
      return "bad rank, nranks or address";
  }
}

// A connection on this rank's listener that was challenged and has not yet
// sent a complete ring hello. Fixed size, whatever the peer sends.
struct RingPending {
  Socket sock;
  std::chrono::steady_clock::time_point acceptedAt;
  uint8_t nonce[kNonceBytes];
  uint8_t frame[kFrameHeaderBytes + kHelloBytes];
  size_t got = 0;
};

constexpr auto kRingHandshake = std::chrono::seconds(5);
constexpr size_t kRingPendingCap = 16;

// Judges what `c` sent so far: 1 when it is the authentic rank `prev`, -1
// when it must be dropped (reason in *why), 0 when more bytes are needed.
int judgeRingHello(RingPending& c, const UniqueIdData& id, int prev, int nranks, std::string* why) {
  FrameHeader h;
  if (c.got >= kFrameHeaderBytes) {
    FrameError e = parseFrameHeader(c.frame, FrameType::kRingHello, {}, &h);
    if (e != FrameError::kOk) {
      *why = describeFrameError(e, h, FrameType::kRingHello, {});
      return -1;
    }
  }
  if (c.got < sizeof(c.frame)) return 0;
  BootHello peer;
  decodeHello(c.frame + kFrameHeaderBytes, &peer);
  Digest want = helloProof(id.secret, kRingLabel, c.nonce, peer);
  bool zeroListen = peer.listen.family == 0 && peer.listen.port == 0;
  if (peer.rank != prev || peer.nranks != nranks || !zeroListen ||
      (id.authenticated && !constantTimeEqual(want.data(), peer.proof, want.size()))) {
    char buf[160];
    snprintf(buf, sizeof(buf),
             "a ring hello claiming rank %d of %d; want rank %d of %d with a valid proof",
             peer.rank, peer.nranks, prev, nranks);
    *why = buf;
    return -1;
  }
  return 1;
}

// Ring handshake of one rank, as one poll loop: answers next's challenge
// when it arrives, and challenges every connection on the listener until
// rank prev proves itself. Handshakes run side by side (each bounded by
// kRingHandshake, at most kRingPendingCap at once, the oldest shed), so a
// silent or slow stranger never holds up the ring. Bounded by `deadline`
// and `abortFlag`.
Status formRing(const Socket& listener, const Socket& next, const UniqueIdData& id, int rank,
                int nranks, Deadline deadline, const std::atomic<bool>* abortFlag,
                Socket* prevOut) {
  using Clock = std::chrono::steady_clock;
  const int nextRank = (rank + 1) % nranks, prev = (rank - 1 + nranks) % nranks;
  TIDE_TRY(listener.setNonBlocking(true));
  std::vector<std::unique_ptr<RingPending>> pending;
  bool answeredNext = false;
  size_t dropped = 0;
  auto drop = [&](size_t i, const std::string& why) {
    if (++dropped <= 4) {
      SockAddr from;
      std::string who = pending[i]->sock.peerAddr(&from).ok() ? from.str() : "?";
      TIDE_WARN("bootstrap: dropped a ring connection from %s (%s)", who.c_str(), why.c_str());
    }
    pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
  };
  std::vector<pollfd> fds;
  while (!prevOut->valid() || !answeredNext) {
    if (abortFlag && abortFlag->load()) return remoteError("bootstrap aborted");
    if (deadline.expired())
      return timeoutError(
          "bootstrap: ring with rank %d (next) and rank %d (prev) not formed "
          "before the timeout (%s)",
          nextRank, prev, answeredNext ? "no valid hello from prev" : "no challenge from next");
    Clock::time_point now = Clock::now();
    for (size_t i = pending.size(); i-- > 0;)
      if (now - pending[i]->acceptedAt >= kRingHandshake) drop(i, "handshake deadline passed");
    fds.clear();
    // A negative fd is skipped by poll (no spurious POLLHUP once done).
    fds.push_back({answeredNext ? -1 : next.fd(), POLLIN, 0});
    fds.push_back({prevOut->valid() ? -1 : listener.fd(), POLLIN, 0});
    for (auto& c : pending) fds.push_back({c->sock.fd(), POLLIN, 0});
    if (::poll(fds.data(), fds.size(), deadline.remainingMs(100)) < 0 && errno != EINTR)
      return errnoError(errno, "poll (bootstrap ring)");

    if (fds[0].revents) {
      uint8_t theirs[kNonceBytes];
      TIDE_TRY(recvFrame(next, FrameType::kChallenge, {}, theirs, sizeof(theirs), deadline,
                         abortFlag, "rank " + std::to_string(nextRank)));
      BootHello h;
      h.rank = rank;
      h.nranks = nranks;
      Digest p = helloProof(id.secret, kRingLabel, theirs, h);
      memcpy(h.proof, p.data(), p.size());
      auto rf = helloFrame(h, FrameType::kRingHello);
      TIDE_TRY(next.sendAll(rf.data(), rf.size(), deadline, abortFlag));
      answeredNext = true;
    }
    // fds[2 + i] belongs to pending[i]; walk backwards so drops keep indices.
    for (size_t i = fds.size() - 2; i-- > 0;) {
      if (!fds[2 + i].revents || prevOut->valid()) continue;
      RingPending& c = *pending[i];
      size_t want = c.got < kFrameHeaderBytes ? kFrameHeaderBytes : sizeof(c.frame);
      size_t n = 0;
      if (!c.sock.recvSome(c.frame + c.got, want - c.got, &n).ok()) {
        drop(i, "closed during the handshake");
        continue;
      }
      c.got += n;
      std::string why;
      int verdict = judgeRingHello(c, id, prev, nranks, &why);
      if (verdict < 0) {
        drop(i, why);
      } else if (verdict > 0) {
        *prevOut = std::move(c.sock);
      }
    }
    if (fds[1].revents && !prevOut->valid()) {
      for (int k = 0; k < 16; ++k) {
        int fd = ::accept4(listener.fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) break;
        if (pending.size() >= kRingPendingCap) drop(0, "too many pending ring connections");
        auto c = std::make_unique<RingPending>();
        c->sock = Socket(fd);
        c->acceptedAt = Clock::now();
        TIDE_TRY(randomBytes(c->nonce, sizeof(c->nonce)));
        auto cf = challengeFrame(c->nonce);
        size_t sent = 0;
        // A fresh connection has room for 32 bytes; one without is dropped.
        if (!c->sock.sendSome(cf.data(), cf.size(), &sent).ok() || sent != cf.size()) continue;
        pending.push_back(std::move(c));
      }
    }
  }
  return Status::Ok();
}

}  // namespace

Status interfaceAddress(int family, SockAddr* addr) {
  std::string filter = knobString(Knob::SocketIfname);
  if (filter.empty()) return Status::Ok();
  std::vector<NetInterface> ifs;
  TIDE_TRY(listInterfaces(&ifs));
  SockAddr same, other;
  for (const NetInterface& i : ifs) {
    if (!i.up() || !interfaceNameMatches(filter, i.name) || i.linkLocal6()) continue;
    SockAddr& slot = i.family == family ? same : other;
    if (!slot.valid()) slot = i.addr;
  }
  if (!same.valid() && !other.valid())
    return invalidArgument("no up interface matches TIDE_SOCKET_IFNAME=%s", filter.c_str());
  *addr = same.valid() ? same : other;
  return Status::Ok();
}

SockAddr Bootstrap::rankAddress(int r) const {
  if (r < 0 || static_cast<size_t>(r) >= table_.size()) return SockAddr{};
  return fromWire(table_[r]);
}

Status Bootstrap::startRootOnListener(const UniqueIdData& id) {
  if (!listener_.valid())
    return invalidUsage(
        "this communicator's bootstrap listener was already handed to a "
        "shrink (shrink a communicator at most once; shrink the new one)");
  return startBootstrapRootOn(std::move(listener_), id);
}

Status Bootstrap::create(const UniqueIdData& id, int rank, int nranks, int timeoutSec,
                         const std::atomic<bool>* abortFlag, std::unique_ptr<Bootstrap>* out) {
  if (nranks < 1 || nranks > kMaxBootRanks || rank < 0 || rank >= nranks)
    return invalidArgument("bootstrap: rank %d of %d is out of range (1 to %d ranks)", rank, nranks,
                           kMaxBootRanks);
  std::unique_ptr<Bootstrap> b(new Bootstrap());
  b->rank_ = rank;
  b->nranks_ = nranks;
  b->timeoutSec_ = timeoutSec;
  b->abort_ = abortFlag;
  Deadline deadline = Deadline::after(timeoutSec);

  // 1. Reach the root; learn the local address from the connected socket.
  Socket root;
  TIDE_TRY(Socket::connect(id.root, deadline, abortFlag, &root));
  SockAddr local;
  TIDE_TRY(root.localAddr(&local));
  TIDE_TRY(interfaceAddress(local.family(), &local));
  b->localAddress_ = local.hostStr();
  local.setPort(0);
  Socket& listener = b->listener_;
  TIDE_TRY(Socket::listen(local, SOMAXCONN, &listener));
  SockAddr listenAddr;
  TIDE_TRY(listener.localAddr(&listenAddr));

  // 2. Answer the root's challenge with our hello (one frame, one write).
  std::string rootName = "bootstrap root at " + id.root.str();
  uint8_t nonce[kNonceBytes];
  TIDE_TRY(recvFrame(root, FrameType::kChallenge, {}, nonce, sizeof(nonce), deadline, abortFlag,
                     rootName));
  BootHello hello;
  hello.rank = rank;
  hello.nranks = nranks;
  hello.listen = toWire(listenAddr);
  Digest proof = helloProof(id.secret, kRootLabel, nonce, hello);
  memcpy(hello.proof, proof.data(), proof.size());
  auto hf = helloFrame(hello, FrameType::kHello);
  TIDE_TRY(root.sendAll(hf.data(), hf.size(), deadline, abortFlag));

  // 3. Status, then everybody's listening address (length fixed by nranks).
  uint8_t code[4];
  TIDE_TRY(
      recvFrame(root, FrameType::kStatus, {}, code, sizeof(code), deadline, abortFlag, rootName));
  int32_t status = static_cast<int32_t>(code[0] | (code[1] << 8) | (code[2] << 16) |
                                        (static_cast<uint32_t>(code[3]) << 24));
  if (status != 0)
    return invalidUsage("bootstrap root refused rank %d of %d (code %d: %s)", rank, nranks, status,
                        refusalText(status));
  std::vector<uint8_t> raw(static_cast<size_t>(nranks) * kWireAddrBytes);
  FrameLimits lim;
  lim.nranks = nranks;
  TIDE_TRY(recvFrame(root, FrameType::kTable, lim, raw.data(), raw.size(), deadline, abortFlag,
                     rootName));
  root.close();
  b->table_.resize(nranks);
  for (int r = 0; r < nranks; ++r) decodeWireAddr(raw.data() + r * kWireAddrBytes, &b->table_[r]);
  if (nranks == 1) {
    *out = std::move(b);
    return Status::Ok();
  }

  // 4. Ring: connect to next, accept from prev (authenticated both ways by the
  //    acceptor's challenge). Strangers are dropped and we keep accepting.
  int next = (rank + 1) % nranks;
  TIDE_TRY(Socket::connect(fromWire(b->table_[next]), deadline, abortFlag, &b->next_));
  (void)b->next_.setNoDelay();
  TIDE_TRY(formRing(listener, b->next_, id, rank, nranks, deadline, abortFlag, &b->prev_));
  (void)b->prev_.setNoDelay();
  *out = std::move(b);
  return Status::Ok();
}

// Sends `bytes` to next while receiving `bytes` from prev, without blocking
// either direction (so large blocks cannot deadlock the ring). Each direction
// is a header then the payload; the received header is judged (type, and the
// length both sides agreed) before a payload byte is read.
Status Bootstrap::exchange(const void* sbuf, void* rbuf, size_t bytes, uint8_t type) {
  Deadline deadline = Deadline::after(timeoutSec_);
  FrameType ft = static_cast<FrameType>(type);
  FrameLimits lim;
  lim.blockBytes = static_cast<uint32_t>(bytes);
  uint8_t shdr[kFrameHeaderBytes], rhdr[kFrameHeaderBytes];
  FrameHeader h;
  h.type = type;
  h.length = static_cast<uint32_t>(bytes);
  encodeFrameHeader(h, shdr);
  const char* sp = static_cast<const char*>(sbuf);
  char* rp = static_cast<char*>(rbuf);
  const size_t total = kFrameHeaderBytes + bytes;
  size_t sent = 0, got = 0;
  while (sent < total || got < total) {
    size_t n = 0;
    if (sent < total) {
      if (sent < kFrameHeaderBytes) {
        TIDE_TRY(next_.sendSome(shdr + sent, kFrameHeaderBytes - sent, &n));
      } else {
        TIDE_TRY(next_.sendSome(sp + (sent - kFrameHeaderBytes), total - sent, &n));
      }
      sent += n;
    }
    size_t m = 0;
    if (got < total) {
      if (got < kFrameHeaderBytes) {
        TIDE_TRY(prev_.recvSome(rhdr + got, kFrameHeaderBytes - got, &m));
        if (got + m == kFrameHeaderBytes) {
          FrameError e = parseFrameHeader(rhdr, ft, lim, &h);
          if (e != FrameError::kOk)
            return remoteError("bootstrap: bad %s frame from rank %d: %s", frameTypeName(type),
                               (rank_ - 1 + nranks_) % nranks_,
                               describeFrameError(e, h, ft, lim).c_str());
        }
      } else {
        TIDE_TRY(prev_.recvSome(rp + (got - kFrameHeaderBytes), total - got, &m));
      }
      got += m;
    }
    if (n == 0 && m == 0) {
      if (abort_ && abort_->load()) return remoteError("bootstrap aborted");
      if (deadline.expired()) return timeoutError("bootstrap exchange timed out");
      pollfd fds[2] = {{next_.fd(), static_cast<short>(sent < total ? POLLOUT : 0), 0},
                       {prev_.fd(), static_cast<short>(got < total ? POLLIN : 0), 0}};
      poll(fds, 2, deadline.remainingMs(100));
    }
  }
  return Status::Ok();
}

Status Bootstrap::allGatherTyped(void* all, size_t bytes, uint8_t type) {
  char* base = static_cast<char*>(all);
  for (int s = 0; s < nranks_ - 1; ++s) {
    size_t sendBlock = static_cast<size_t>((rank_ - s + nranks_) % nranks_);
    size_t recvBlock = static_cast<size_t>((rank_ - s - 1 + nranks_) % nranks_);
    // Blocks above kMaxGatherFrame travel as several frames; both sides cut
    // them the same way.
    for (size_t off = 0; off < bytes; off += kMaxGatherFrame) {
      size_t len = std::min<size_t>(bytes - off, kMaxGatherFrame);
      TIDE_TRY(exchange(base + sendBlock * bytes + off, base + recvBlock * bytes + off, len, type));
    }
  }
  return Status::Ok();
}

Status Bootstrap::allGather(void* all, size_t bytes) {
  return allGatherTyped(all, bytes, static_cast<uint8_t>(FrameType::kGather));
}

Status Bootstrap::barrier() {
  std::vector<char> tmp(nranks_, 0);
  return allGatherTyped(tmp.data(), 1, static_cast<uint8_t>(FrameType::kBarrier));
}

}  // namespace tide
