// TcpTransport::connect: listening, address exchange and the authenticated
// handshake (protocol described in tcp_transport.h).
#include "transports/tcp/tcp_transport.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <climits>
#include <cstdarg>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <map>

#include "core/auth.h"
#include "core/config.h"
#include "core/log.h"
#include "core/registry.h"
#include "core/socket.h"
#include "transports/tcp/tcp_connection.h"

namespace tide {
namespace {

constexpr uint32_t kRecordMagic = 0x54637052;
constexpr uint32_t kHelloMagic = 0x54637048;
constexpr uint32_t kAckMagic = 0x5463704b;
constexpr uint32_t kVersion = 1;
constexpr const char* kDataLabel = "tide-tcp-data";
constexpr const char* kAckLabel = "tide-tcp-data-ack";
// Connections still in their handshake at once; more are closed on arrival.
constexpr size_t kMaxPending = 128;
// A connection that has not completed its Hello by then is dropped.
constexpr double kHandshakeSeconds = 10;

// What each rank publishes through allGather.
struct ListenRecord {
  uint32_t magic;
  uint32_t listening;  // 0: "none"
  char addr[120];      // "host:port" or "[v6]:port", NUL-terminated
};
static_assert(sizeof(ListenRecord) == 128);

struct Hello {
  uint32_t magic;
  uint32_t version;
  int32_t from;  // connector's rank
  int32_t to;    // acceptor's rank
  int32_t channel;
  int32_t nranks;
  uint8_t nonce[kNonceBytes];  // connector's challenge for the Ack
  uint8_t proof[32];
};
static_assert(sizeof(Hello) == 72);
constexpr size_t kHelloSigned = offsetof(Hello, proof);

struct Ack {
  uint32_t magic;
  uint32_t version;
  uint8_t proof[32];
};
static_assert(sizeof(Ack) == 40);

// Bytes both proofs cover besides label and nonce: the signed Hello fields,
// the communicator's hash and, for the Ack, the acceptor's nonce.
std::string proofContext(const Hello& h, uint64_t commHash, const uint8_t* acceptorNonce) {
  std::string c(reinterpret_cast<const char*>(&h), kHelloSigned);
  if (acceptorNonce != nullptr) c.append(reinterpret_cast<const char*>(acceptorNonce), kNonceBytes);
  c.append(reinterpret_cast<const char*>(&commHash), sizeof(commHash));
  return c;
}

Digest helloProof(const SetupContext& ctx, const Hello& h, const uint8_t* acceptorNonce) {
  std::string c = proofContext(h, ctx.commHash(), nullptr);
  return connectionProof(ctx.secret(), kDataLabel, acceptorNonce, c.data(), c.size());
}

Digest ackProof(const SetupContext& ctx, const Hello& h, const uint8_t* acceptorNonce) {
  std::string c = proofContext(h, ctx.commHash(), acceptorNonce);
  return connectionProof(ctx.secret(), kAckLabel, h.nonce, c.data(), c.size());
}

// Same code as s, message prefixed with the formatted context.
Status annotate(const Status& s, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
Status annotate(const Status& s, const char* fmt, ...) {
  char buf[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  return Status(s.code(), std::string(buf) + ": " + s.message());
}

// Connects channel `ch` to lower rank `peer` and runs the connector's side of
// the handshake. Blocking, bounded by deadline and the abort flag.
Status connectToPeer(SetupContext& ctx, int peer, const SockAddr& addr, int ch, Deadline deadline,
                     Socket* out) {
  const std::atomic<bool>* abort = &ctx.abortFlag();
  std::string where = addr.str();
  Socket s;
  Status st = Socket::connect(addr, deadline, abort, &s);
  if (!st.ok()) return annotate(st, "tcp: connecting to rank %d at %s", peer, where.c_str());
  uint8_t challenge[kNonceBytes];
  st = s.recvAll(challenge, sizeof(challenge), deadline, abort);
  if (!st.ok()) {
    return annotate(st, "tcp: waiting for the challenge of rank %d at %s", peer, where.c_str());
  }
  Hello h{};
  h.magic = kHelloMagic;
  h.version = kVersion;
  h.from = ctx.rank();
  h.to = peer;
  h.channel = ch;
  h.nranks = ctx.nranks();
  TIDE_TRY(randomBytes(h.nonce, sizeof(h.nonce)));
  Digest proof = helloProof(ctx, h, challenge);
  std::memcpy(h.proof, proof.data(), proof.size());
  st = s.sendAll(&h, sizeof(h), deadline, abort);
  if (!st.ok()) return annotate(st, "tcp: sending hello to rank %d at %s", peer, where.c_str());
  Ack ack{};
  st = s.recvAll(&ack, sizeof(ack), deadline, abort);
  if (st.code() == tideRemoteError) {
    return remoteError(
        "tcp: rank %d at %s refused data connection %d of rank %d (different job secret or "
        "communicator?)",
        peer, where.c_str(), ch, ctx.rank());
  }
  if (!st.ok()) return annotate(st, "tcp: waiting for the answer of rank %d", peer);
  Digest expect = ackProof(ctx, h, challenge);
  if (ack.magic != kAckMagic || ack.version != kVersion ||
      !constantTimeEqual(ack.proof, expect.data(), expect.size())) {
    return remoteError("tcp: the listener at %s failed to prove it is rank %d of this job",
                       where.c_str(), peer);
  }
  *out = std::move(s);
  return Status::Ok();
}

// A connection in the acceptor's side of the handshake.
struct Pending {
  Socket sock;
  uint8_t nonce[kNonceBytes];
  Hello hello;
  size_t got;
  Deadline deadline;
};

// Accepts the kNumChannels connections of every rank in `from` (all higher
// than ours). slots[i * kNumChannels + c] receives rank from[i]'s channel c.
class Acceptor {
 public:
  Acceptor(SetupContext& ctx, const Socket& listener, const std::vector<int>& from)
      : ctx_(ctx), listener_(listener), from_(from), slots_(from.size() * kNumChannels) {
    for (size_t i = 0; i < from.size(); ++i) index_[from[i]] = i;
  }

  std::vector<Socket>& slots() { return slots_; }

  Status run(Deadline deadline) {
    size_t remaining = slots_.size();
    std::vector<pollfd> fds;
    while (remaining > 0) {
      if (ctx_.abortFlag().load(std::memory_order_relaxed))
        return remoteError("tcp: connection setup aborted");
      if (deadline.expired()) {
        return timeoutError("tcp: rank %d timed out waiting for data connections (%s)", ctx_.rank(),
                            missing().c_str());
      }
      fds.clear();
      fds.push_back(pollfd{listener_.fd(), POLLIN, 0});
      for (const Pending& p : pending_) fds.push_back(pollfd{p.sock.fd(), POLLIN, 0});
      int rc = ::poll(fds.data(), fds.size(), deadline.remainingMs(100));
      if (rc < 0 && errno != EINTR) return errnoError(errno, "tcp: poll while accepting");
      // Pending handshakes first (their indices match fds), newest to oldest.
      for (size_t i = pending_.size(); i-- > 0;) {
        bool drop = false;
        if (fds[i + 1].revents != 0) {
          int slot = -1;
          drop = step(pending_[i], &slot);
          if (slot >= 0) {
            slots_[slot] = std::move(pending_[i].sock);
            --remaining;
          }
        } else if (pending_[i].deadline.expired()) {
          TIDE_WARN("tcp: rank %d dropped a connection that did not finish its handshake",
                    ctx_.rank());
          drop = true;
        }
        if (drop) pending_.erase(pending_.begin() + static_cast<long>(i));
      }
      if (fds[0].revents != 0) TIDE_TRY(acceptNew());
    }
    return Status::Ok();
  }

 private:
  Status acceptNew() {
    for (;;) {
      int fd = ::accept4(listener_.fd(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return Status::Ok();
        if (errno == EMFILE || errno == ENFILE) {
          TIDE_WARN("tcp: accept: %s", strerror(errno));
          return Status::Ok();
        }
        return errnoError(errno, "tcp: accept");
      }
      Pending p{Socket(fd), {}, {}, 0, Deadline::after(kHandshakeSeconds)};
      if (pending_.size() >= kMaxPending) {
        TIDE_WARN("tcp: rank %d: too many connections in handshake; closing one", ctx_.rank());
        continue;
      }
      TIDE_TRY(randomBytes(p.nonce, sizeof(p.nonce)));
      size_t sent = 0;
      Status st = p.sock.sendSome(p.nonce, sizeof(p.nonce), &sent);
      if (!st.ok() || sent != sizeof(p.nonce)) continue;  // fresh socket: all or broken
      pending_.push_back(std::move(p));
    }
  }

  // Reads more of p's Hello; when complete, verifies it. Returns true when p
  // is finished (accepted: *slot >= 0, or rejected).
  bool step(Pending& p, int* slot) {
    size_t n = 0;
    Status st =
        p.sock.recvSome(reinterpret_cast<uint8_t*>(&p.hello) + p.got, sizeof(Hello) - p.got, &n);
    if (!st.ok()) {
      TIDE_INFO("tcp: rank %d: a connection closed during its handshake", ctx_.rank());
      return true;
    }
    p.got += n;
    if (p.got < sizeof(Hello)) return false;
    std::string why = verify(p, slot);
    if (!why.empty()) {
      SockAddr from;
      std::string name = p.sock.peerAddr(&from).ok() ? from.str() : "?";
      TIDE_WARN("tcp: rank %d rejected a data connection from %s: %s", ctx_.rank(), name.c_str(),
                why.c_str());
      *slot = -1;
      return true;
    }
    Ack ack{kAckMagic, kVersion, {}};
    Digest proof = ackProof(ctx_, p.hello, p.nonce);
    std::memcpy(ack.proof, proof.data(), proof.size());
    size_t sent = 0;
    st = p.sock.sendSome(&ack, sizeof(ack), &sent);
    if (!st.ok() || sent != sizeof(ack)) {
      TIDE_WARN("tcp: rank %d could not answer rank %d", ctx_.rank(), p.hello.from);
      *slot = -1;
    }
    return true;
  }

  // "" when p's Hello is authentic and expected (then *slot is its slot).
  std::string verify(const Pending& p, int* slot) {
    const Hello& h = p.hello;
    if (h.magic != kHelloMagic || h.version != kVersion) return "not a tide tcp hello";
    if (h.to != ctx_.rank() || h.nranks != ctx_.nranks())
      return "meant for another rank or communicator";
    Digest expect = helloProof(ctx_, h, p.nonce);
    if (!constantTimeEqual(expect.data(), h.proof, expect.size()))
      return "authentication failed (different job secret or communicator?)";
    auto it = index_.find(h.from);
    if (it == index_.end() || h.channel < 0 || h.channel >= kNumChannels)
      return "unexpected rank " + std::to_string(h.from) + " channel " + std::to_string(h.channel);
    int s = static_cast<int>(it->second) * kNumChannels + h.channel;
    if (slots_[s].valid()) return "duplicate connection from rank " + std::to_string(h.from);
    *slot = s;
    return "";
  }

  std::string missing() const {
    std::string m = "missing:";
    for (size_t i = 0; i < slots_.size(); ++i) {
      if (slots_[i].valid()) continue;
      m += " rank " + std::to_string(from_[i / kNumChannels]) + "/ch" +
           std::to_string(i % kNumChannels);
      if (m.size() > 200) return m + " ...";
    }
    return m;
  }

  SetupContext& ctx_;
  const Socket& listener_;
  const std::vector<int>& from_;
  std::vector<Socket> slots_;
  std::map<int, size_t> index_;
  std::vector<Pending> pending_;
};

Status configureDataSocket(const Socket& s, int bufBytes) {
  TIDE_TRY(s.setNoDelay());
  TIDE_TRY(s.setBufferSizes(bufBytes));
  return Status::Ok();
}

}  // namespace

Status TcpTransport::connect(SetupContext& ctx, const std::vector<int>& peers,
                             std::vector<std::unique_ptr<Connection>>* out) {
  const int me = ctx.rank();
  const int n = ctx.nranks();
  out->clear();
  std::vector<std::unique_ptr<Connection>> conns(peers.size() * kNumChannels);
  std::vector<int> lower, higher;
  for (int p : peers) {
    if (p < 0 || p >= n || p == me) return internalError("tcp: bad peer rank %d", p);
    (p < me ? lower : higher).push_back(p);
  }
  uint64_t knob = knobSize(Knob::SocketBufSize);
  int bufBytes = knob > INT_MAX ? INT_MAX : static_cast<int>(knob);

  // 1. Listen when some higher rank will connect to us.
  Socket listener;
  ListenRecord mine{};
  mine.magic = kRecordMagic;
  if (!higher.empty()) {
    SockAddr addr;
    std::string host = ctx.localAddress();
    TIDE_TRY(resolveAddress(host, 0, &addr));
    TIDE_TRY(Socket::listen(addr, SOMAXCONN, &listener));
    TIDE_TRY(listener.setBufferSizes(bufBytes));  // inherited by accepted sockets
    TIDE_TRY(listener.setNonBlocking(true));      // accept4 must never block
    SockAddr bound;
    TIDE_TRY(listener.localAddr(&bound));
    std::string text = bound.str();
    if (text.size() >= sizeof(mine.addr)) return internalError("tcp: address too long");
    std::memcpy(mine.addr, text.c_str(), text.size() + 1);
    mine.listening = 1;
  } else {
    std::strcpy(mine.addr, "none");
  }

  // 2. Exchange records (collective even without peers).
  std::vector<ListenRecord> all(n);
  TIDE_TRY(ctx.allGather(&mine, sizeof(mine), all.data()));
  if (peers.empty()) return Status::Ok();

  Deadline deadline = Deadline::after(ctx.timeoutSeconds());
  std::map<int, size_t> index;
  for (size_t i = 0; i < peers.size(); ++i) index[peers[i]] = i;

  // 3. Connect to lower ranks, ascending.
  for (int p : lower) {
    const ListenRecord& r = all[p];
    if (r.magic != kRecordMagic || !r.listening ||
        std::memchr(r.addr, 0, sizeof(r.addr)) == nullptr)
      return internalError("tcp: rank %d published no listening address", p);
    SockAddr addr;
    TIDE_TRY(parseHostPort(r.addr, &addr));
    for (int c = 0; c < kNumChannels; ++c) {
      Socket s;
      TIDE_TRY(connectToPeer(ctx, p, addr, c, deadline, &s));
      TIDE_TRY(configureDataSocket(s, bufBytes));
      conns[index[p] * kNumChannels + c] = std::make_unique<TcpConnection>(std::move(s), p, c);
    }
  }

  // 4. Accept higher ranks.
  if (!higher.empty()) {
    Acceptor acceptor(ctx, listener, higher);
    TIDE_TRY(acceptor.run(deadline));
    for (size_t i = 0; i < higher.size(); ++i) {
      for (int c = 0; c < kNumChannels; ++c) {
        Socket& s = acceptor.slots()[i * kNumChannels + c];
        TIDE_TRY(configureDataSocket(s, bufBytes));
        conns[index[higher[i]] * kNumChannels + c] =
            std::make_unique<TcpConnection>(std::move(s), higher[i], c);
      }
    }
  }
  *out = std::move(conns);
  TIDE_INFO("tcp: rank %d connected to %zu peers (%zu lower, %zu higher)", me, peers.size(),
            lower.size(), higher.size());
  return Status::Ok();
}

TIDE_ON_LOAD(static TcpTransport transport; ::tide::registerTransport(&transport));

}  // namespace tide
