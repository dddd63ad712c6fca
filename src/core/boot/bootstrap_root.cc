// The bootstrap root: a short-lived background thread that collects every
// rank's listening address and hands out the table.
//
// One thread runs a poll() loop over non-blocking sockets, so no peer can
// stall another: each accepted connection gets its own challenge and must
// deliver a complete, authentic hello frame within kHandshake of being
// accepted. The 16-byte frame header is judged (magic, version, type, exact
// length) as soon as it is in, before the payload is read; nothing is
// allocated on a peer's say-so before its proof checks out; the pending set
// is capped and sheds its oldest members under a flood.
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <system_error>
#include <thread>
#include <vector>

#include "core/boot/bootstrap.h"
#include "core/boot/bootstrap_frame.h"
#include "core/boot/bootstrap_wire.h"
#include "core/config.h"
#include "core/if_addrs.h"
#include "core/if_filter.h"
#include "core/log.h"

namespace tide {

HelloVerdict checkBootHello(const BootHello& h, const uint8_t nonce[kNonceBytes],
                            const UniqueIdData& id, int32_t expectNranks) {
  if (id.authenticated) {
    Digest want = helloProof(id.secret, "tide-bootstrap-root", nonce, h);
    if (!constantTimeEqual(want.data(), h.proof, want.size())) return HelloVerdict::kDrop;
  }
  if (h.nranks <= 0 || h.nranks > kMaxBootRanks) return HelloVerdict::kRefuseBad;
  if (expectNranks > 0 && h.nranks != expectNranks) return HelloVerdict::kRefuseNranks;
  if (h.rank < 0 || h.rank >= h.nranks) return HelloVerdict::kRefuseBad;
  if ((h.listen.family != AF_INET && h.listen.family != AF_INET6) || h.listen.port == 0)
    return HelloVerdict::kRefuseBad;
  return HelloVerdict::kAccept;
}

namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kHandshake = std::chrono::seconds(2);           // accept -> complete hello
constexpr auto kMinEvictAge = std::chrono::milliseconds(100);  // spare fresh connections
constexpr auto kAcceptPause = std::chrono::milliseconds(100);  // after EMFILE and the like
constexpr size_t kBasePending = 64;
constexpr size_t kPendingPerRank = 4;
constexpr int kAcceptBatch = 64;  // accepts per loop turn, so handshakes keep moving
constexpr int kMaxPollMs = 500;
constexpr size_t kLoudRefusals = 8;  // refusals and hang-ups logged as warnings
constexpr size_t kLoudVersions = 4;  // version mismatches logged as warnings

struct RootState {
  Socket listener;
  UniqueIdData id;
  int timeoutSec = 0;
};

// A connection that has not yet delivered an accepted hello. Fixed size:
// nothing here grows with what the peer sends.
struct Pending {
  Socket sock;
  Clock::time_point acceptedAt;
  uint8_t nonce[kNonceBytes];
  std::array<uint8_t, kFrameHeaderBytes + kNonceBytes> challenge;
  size_t challengeSent = 0;
  uint8_t frame[kFrameHeaderBytes + kHelloBytes];  // raw hello frame as received
  size_t frameGot = 0;
  BootHello hello;    // decoded once complete
  bool done = false;  // closed or promoted; swept at the end of the loop turn
};

// A rank whose hello was accepted; keeps its connection for the table.
struct Member {
  Socket sock;
  WireAddr listen;
  size_t sent = 0;  // bytes of the reply sent (distribution phase)
};

int msUntil(Clock::time_point t, Clock::time_point now) {
  if (t <= now) return 0;
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t - now).count() + 1;
  return ms > kMaxPollMs ? kMaxPollMs : static_cast<int>(ms);
}

std::string peerName(const Socket& s) {
  SockAddr a;
  return s.peerAddr(&a).ok() ? a.str() : std::string("?");
}

// Serves one communicator creation. Owned by the root thread; not shared.
class RootServer {
 public:
  explicit RootServer(std::unique_ptr<RootState> st) : st_(std::move(st)) {}
  ~RootServer() {
    // The secret does not outlive the root.
    volatile uint8_t* p = st_->id.secret;
    for (size_t i = 0; i < kSecretBytes; ++i) p[i] = 0;
  }

  void run() {
    progress_ = Deadline::after(st_->timeoutSec);
    if (!st_->listener.setNonBlocking(true).ok()) {
      TIDE_WARN("bootstrap root: cannot make the listener non-blocking; giving up");
      return;
    }
    if (gather()) distribute();
    if (dropped_ > 0)
      TIDE_WARN(
          "bootstrap root: closed %zu connection(s) that did not complete a valid "
          "handshake (%zu malformed frames, %zu failed authentication, %zu timed out, "
          "%zu shed under load)",
          dropped_, badFrame_, badAuth_, expired_, evicted_);
  }

 private:
  size_t cap() const {
    return kBasePending + kPendingPerRank * static_cast<size_t>(std::max(nranks_, 0));
  }

  Pending* oldest() {
    for (auto& p : pending_)
      if (!p->done) return p.get();
    return nullptr;
  }

  // Closes a pending connection, first sending `code` when it is non-zero.
  void closePending(Pending& c, int32_t code, const char* why) {
    if (code != 0) {
      size_t n = 0;
      // A fresh connection has room for one status frame; if not, the peer
      // gets a truncated one, which it reports as such.
      auto f = statusFrame(code);
      (void)c.sock.sendSome(f.data(), f.size(), &n);
    }
    TIDE_INFO("bootstrap root: closed a connection from %s (%s)", peerName(c.sock).c_str(), why);
    c.sock.close();
    c.done = true;
    --live_;
  }

  void dropJunk(Pending& c, const char* why) {
    ++dropped_;
    closePending(c, 0, why);
  }

  // Refuses an authentic hello with `code`. Refusals (and members hanging
  // up) point at a misconfigured job, so the first few are warnings; later
  // ones only INFO, so no peer can flood the log.
  void refuse(Pending& c, int32_t code, const char* why) {
    const BootHello& h = c.hello;
    if (++refused_ <= kLoudRefusals) {
      TIDE_WARN("bootstrap root: refused rank %d of %d from %s: %s (communicator size %d)", h.rank,
                h.nranks, peerName(c.sock).c_str(), why, nranks_);
    } else {
      TIDE_INFO("bootstrap root: refused rank %d of %d: %s", h.rank, h.nranks, why);
    }
    closePending(c, code, why);
  }

  // Judges a complete hello: keeps the connection as a member or closes it.
  void finishHello(Pending& c) {
    const BootHello& h = c.hello;
    switch (checkBootHello(h, c.nonce, st_->id, nranks_)) {
      case HelloVerdict::kDrop:
        ++badAuth_;
        dropJunk(c, "wrong proof (not this job's secret)");
        return;
      case HelloVerdict::kRefuseNranks:
        refuse(c, kBootRefuseNranks, "nranks mismatch");
        return;
      case HelloVerdict::kRefuseBad:
        refuse(c, kBootRefuseBadHello, "bad rank, nranks or address");
        return;
      case HelloVerdict::kAccept:
        break;
    }
    if (members_.count(h.rank)) {
      refuse(c, kBootRefuseDuplicate, "duplicate rank; the first one stays");
      return;
    }
    if (nranks_ == 0) nranks_ = h.nranks;
    Member& m = members_[h.rank];
    m.sock = std::move(c.sock);
    m.listen = h.listen;
    c.done = true;
    --live_;
    progress_ = Deadline::after(st_->timeoutSec);
    TIDE_INFO("bootstrap root: rank %d of %d arrived (%zu so far)", h.rank, nranks_,
              members_.size());
  }

  // Judges the hello frame's header the moment it is complete; false when
  // the connection was dropped.
  bool checkHeader(Pending& c) {
    FrameHeader h;
    FrameError e = parseFrameHeader(c.frame, FrameType::kHello, {}, &h);
    if (e == FrameError::kOk) return true;
    ++badFrame_;
    std::string why = describeFrameError(e, h, FrameType::kHello, {});
    if (e == FrameError::kVersion && ++versions_ <= kLoudVersions) {
      TIDE_WARN("bootstrap root: %s sent a hello with %s", peerName(c.sock).c_str(), why.c_str());
    }
    dropJunk(c, why.c_str());
    return false;
  }

  // Moves the handshake of `c` forward after poll reported `revents`.
  void service(Pending& c, short revents) {
    if (revents & (POLLERR | POLLNVAL)) return dropJunk(c, "socket error");
    if (c.challengeSent < c.challenge.size()) {
      size_t n = 0;
      if (!c.sock
               .sendSome(c.challenge.data() + c.challengeSent, c.challenge.size() - c.challengeSent,
                         &n)
               .ok())
        return dropJunk(c, "closed before the challenge");
      c.challengeSent += n;
      return;
    }
    if (!(revents & (POLLIN | POLLHUP))) return;
    // Header first, then exactly one hello payload: extra bytes stay in the
    // kernel, and a bad header ends the connection before its payload.
    size_t want = c.frameGot < kFrameHeaderBytes ? kFrameHeaderBytes : sizeof(c.frame);
    size_t n = 0;
    if (!c.sock.recvSome(c.frame + c.frameGot, want - c.frameGot, &n).ok())
      return dropJunk(c, "closed during the handshake");
    c.frameGot += n;
    if (c.frameGot == kFrameHeaderBytes && n > 0 && !checkHeader(c)) return;
    if (c.frameGot == sizeof(c.frame)) {
      decodeHello(c.frame + kFrameHeaderBytes, &c.hello);
      finishHello(c);
    }
  }

  // Whether the listener may be polled now (below the cap, or the oldest
  // pending connection is old enough to be shed for a newcomer).
  bool canAccept(Clock::time_point now) {
    if (now < acceptPausedUntil_) return false;
    if (live_ < cap()) return true;
    Pending* o = oldest();
    return o && now - o->acceptedAt >= kMinEvictAge;
  }

  void acceptSome(Clock::time_point now) {
    for (int i = 0; i < kAcceptBatch; ++i) {
      if (live_ >= cap()) {
        Pending* o = oldest();
        if (!o || now - o->acceptedAt < kMinEvictAge) return;
        ++evicted_;
        dropJunk(*o, "pending connection cap reached");
      }
      int fd = ::accept4(st_->listener.fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        int err = errno;
        if (err == EINTR || err == ECONNABORTED) continue;
        if (err == EAGAIN || err == EWOULDBLOCK) return;
        // Out of descriptors or memory: shed the oldest unauthenticated
        // connection if there is one, and let the backlog wait a moment.
        if (Pending* o = oldest(); o && (err == EMFILE || err == ENFILE)) {
          ++evicted_;
          dropJunk(*o, "out of file descriptors");
        }
        TIDE_INFO("bootstrap root: accept failed (%s); pausing", strerror(err));
        acceptPausedUntil_ = now + kAcceptPause;
        return;
      }
      auto c = std::make_unique<Pending>();
      c->sock = Socket(fd);
      c->acceptedAt = now;
      ++live_;
      if (!randomBytes(c->nonce, sizeof(c->nonce)).ok()) {
        dropJunk(*c, "no randomness for the challenge");
        continue;
      }
      c->challenge = challengeFrame(c->nonce);
      service(*c, POLLOUT);  // the challenge nearly always fits at once
      if (!c->done) pending_.push_back(std::move(c));
    }
  }

  void sweep() {
    pending_.erase(std::remove_if(pending_.begin(), pending_.end(),
                                  [](const std::unique_ptr<Pending>& p) { return p->done; }),
                   pending_.end());
  }

  // Runs until every rank arrived (true) or the root gives up (false).
  bool gather() {
    std::vector<pollfd> fds;
    std::vector<Pending*> polledPending;
    std::vector<int32_t> polledMembers;
    while (nranks_ == 0 || static_cast<int32_t>(members_.size()) < nranks_) {
      if (progress_.expired()) {
        TIDE_WARN(
            "bootstrap root: giving up after %zu of %d ranks arrived (no new rank for "
            "%d s, TIDE_TIMEOUT)",
            members_.size(), nranks_, st_->timeoutSec);
        return false;
      }
      Clock::time_point now = Clock::now();
      // Pending connections sit in accept order, so deadlines expire front first.
      for (auto& p : pending_) {
        if (p->done) continue;
        if (now - p->acceptedAt < kHandshake) break;
        ++expired_;
        dropJunk(*p, "handshake deadline passed");
      }
      sweep();

      fds.clear();
      polledPending.clear();
      polledMembers.clear();
      int timeoutMs = progress_.remainingMs(kMaxPollMs);
      bool listen = canAccept(now);
      if (listen) {
        fds.push_back({st_->listener.fd(), POLLIN, 0});
      } else if (now < acceptPausedUntil_) {
        timeoutMs = std::min(timeoutMs, msUntil(acceptPausedUntil_, now));
      } else if (Pending* o = oldest()) {
        timeoutMs = std::min(timeoutMs, msUntil(o->acceptedAt + kMinEvictAge, now));
      }
      if (Pending* o = oldest())
        timeoutMs = std::min(timeoutMs, msUntil(o->acceptedAt + kHandshake, now));
      for (auto& p : pending_) {
        short ev = p->challengeSent < p->challenge.size() ? POLLOUT : POLLIN;
        fds.push_back({p->sock.fd(), ev, 0});
        polledPending.push_back(p.get());
      }
      // Members are watched only for hanging up, which frees their rank.
      for (auto& [rank, m] : members_) {
        fds.push_back({m.sock.fd(), POLLRDHUP, 0});
        polledMembers.push_back(rank);
      }

      int rc = ::poll(fds.data(), fds.size(), timeoutMs);
      if (rc < 0) {
        if (errno == EINTR) continue;
        TIDE_WARN("bootstrap root: poll failed (%s); giving up", strerror(errno));
        return false;
      }
      if (rc == 0) continue;
      size_t base = listen ? 1 : 0;
      for (size_t i = 0; i < polledPending.size(); ++i) {
        short re = fds[base + i].revents;
        if (re && !polledPending[i]->done) service(*polledPending[i], re);
      }
      base += polledPending.size();
      for (size_t i = 0; i < polledMembers.size(); ++i) {
        if (!(fds[base + i].revents & (POLLRDHUP | POLLHUP | POLLERR))) continue;
        if (++refused_ <= kLoudRefusals) {
          TIDE_WARN("bootstrap root: rank %d hung up before the table was ready; slot freed",
                    polledMembers[i]);
        } else {
          TIDE_INFO("bootstrap root: rank %d hung up; slot freed", polledMembers[i]);
        }
        members_.erase(polledMembers[i]);
      }
      if (listen && (fds[0].revents & POLLIN)) acceptSome(Clock::now());
      sweep();
    }
    return true;
  }

  // Sends every member status 0 and the table, all connections at once so a
  // slow reader delays nobody; bounded by TIDE_TIMEOUT.
  void distribute() {
    st_->listener.close();
    for (auto& p : pending_)
      if (!p->done) dropJunk(*p, "the table is complete");
    pending_.clear();

    // One buffer for everyone: status frame (0), then the table frame.
    auto ok = statusFrame(0);
    const size_t tableAt = ok.size() + kFrameHeaderBytes;
    std::vector<uint8_t> reply(tableAt + members_.size() * kWireAddrBytes, 0);
    memcpy(reply.data(), ok.data(), ok.size());
    FrameHeader th;
    th.type = static_cast<uint8_t>(FrameType::kTable);
    th.length = static_cast<uint32_t>(members_.size() * kWireAddrBytes);
    encodeFrameHeader(th, reply.data() + ok.size());
    for (auto& [rank, m] : members_)
      encodeWireAddr(m.listen, reply.data() + tableAt + static_cast<size_t>(rank) * kWireAddrBytes);
    Deadline deadline = Deadline::after(st_->timeoutSec);
    std::vector<pollfd> fds;
    std::vector<int32_t> ranks;
    for (;;) {
      fds.clear();
      ranks.clear();
      for (auto& [rank, m] : members_) {
        if (!m.sock.valid() || m.sent == reply.size()) continue;
        size_t n = 0;
        Status s = m.sock.sendSome(reply.data() + m.sent, reply.size() - m.sent, &n);
        if (!s.ok()) {
          TIDE_WARN("bootstrap root: rank %d went away: %s", rank, s.message().c_str());
          m.sock.close();
          continue;
        }
        m.sent += n;
        if (m.sent < reply.size()) {
          fds.push_back({m.sock.fd(), POLLOUT, 0});
          ranks.push_back(rank);
        }
      }
      if (fds.empty()) break;
      if (deadline.expired()) {
        TIDE_WARN("bootstrap root: %zu rank(s) did not read the table in time", fds.size());
        break;
      }
      int rc = ::poll(fds.data(), fds.size(), deadline.remainingMs(kMaxPollMs));
      if (rc < 0 && errno != EINTR) {
        TIDE_WARN("bootstrap root: poll failed (%s) while sending the table", strerror(errno));
        break;
      }
    }
    TIDE_INFO("bootstrap root: served %d ranks", nranks_);
  }

  std::unique_ptr<RootState> st_;
  std::vector<std::unique_ptr<Pending>> pending_;  // accept order
  size_t live_ = 0;                                // pending connections not yet done
  std::map<int32_t, Member> members_;              // by rank; at most nranks_ entries
  int32_t nranks_ = 0;                             // 0 until the first accepted hello
  Deadline progress_;                              // reset whenever a rank arrives
  Clock::time_point acceptPausedUntil_{};
  size_t dropped_ = 0, badFrame_ = 0, badAuth_ = 0, expired_ = 0, evicted_ = 0, refused_ = 0;
  size_t versions_ = 0;
};

void serveRoot(std::unique_ptr<RootState> st) {
  RootServer server(std::move(st));
  server.run();
}

}  // namespace

Status startBootstrapRootOn(Socket listener, const UniqueIdData& id) {
  auto st = std::make_unique<RootState>();
  st->listener = std::move(listener);
  st->id = id;
  SockAddr where;
  TIDE_TRY(st->listener.localAddr(&where));
  st->id.root = where;
  st->timeoutSec = static_cast<int>(knobInt(Knob::Timeout));
  TIDE_INFO("bootstrap root listening on %s", where.str().c_str());
  try {
    std::thread(serveRoot, std::move(st)).detach();
  } catch (const std::system_error& e) {
    return systemError("cannot start the bootstrap root thread: %s", e.what());
  }
  return Status::Ok();
}

Status startBootstrapRoot(UniqueIdData* data) {
  Socket listener;
  TIDE_TRY(Socket::listen(data->root, SOMAXCONN, &listener));
  TIDE_TRY(listener.localAddr(&data->root));
  return startBootstrapRootOn(std::move(listener), *data);
}

// Address for a root started by tideGetUniqueId: the first up, non-loopback
// IPv4 interface selected by TIDE_SOCKET_IFNAME (if set), else loopback.
Status defaultRootAddress(SockAddr* out) {
  std::string want = knobString(Knob::SocketIfname);
  std::vector<NetInterface> ifs;
  if (listInterfaces(&ifs).ok()) {
    for (const NetInterface& i : ifs) {
      if (i.family != AF_INET || !i.up()) continue;
      if (want.empty() ? i.loopback() : !interfaceNameMatches(want, i.name)) continue;
      *out = i.addr;
      out->setPort(0);
      return Status::Ok();
    }
  }
  return resolveAddress("127.0.0.1", 0, out);
}

}  // namespace tide
