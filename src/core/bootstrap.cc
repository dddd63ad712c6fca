// Rank side of the bootstrap, plus the unique-id encoding.
#include "core/bootstrap.h"

#include <ifaddrs.h>
#include <net/if.h>
#include <poll.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "core/config.h"
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
};
static_assert(sizeof(PackedId) <= TIDE_UNIQUE_ID_BYTES);

}  // namespace

void encodeUniqueId(const UniqueIdData& data, tideUniqueId* id) {
  PackedId p{};
  p.magic = kUniqueIdMagic;
  p.flags = (data.authenticated ? 1 : 0) | (data.rank0StartsRoot ? 2 : 0);
  p.root = toWire(data.root);
  memcpy(p.secret, data.secret, kSecretBytes);
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

Digest helloProof(const UniqueIdData& id, const char* label, const uint8_t* nonce, int32_t rank,
                  int32_t nranks) {
  int32_t ctx[2] = {rank, nranks};
  return connectionProof(id.secret, label, nonce, ctx, sizeof(ctx));
}

}  // namespace

bool interfaceNameMatches(const std::string& filter, const char* name) {
  std::string f = filter;
  bool exclude = false, exact = false;
  if (!f.empty() && f[0] == '^') {
    exclude = true;
    f.erase(0, 1);
  }
  if (!f.empty() && f[0] == '=') {
    exact = true;
    f.erase(0, 1);
  }
  bool hit = false;
  for (size_t pos = 0; pos <= f.size() && !hit;) {
    size_t end = f.find(',', pos);
    if (end == std::string::npos) end = f.size();
    std::string item = f.substr(pos, end - pos);
    if (!item.empty()) hit = exact ? item == name : strncmp(name, item.c_str(), item.size()) == 0;
    pos = end + 1;
  }
  return exclude ? !hit : hit;
}

Status interfaceAddress(int family, SockAddr* addr) {
  std::string filter = knobString(Knob::SocketIfname);
  if (filter.empty()) return Status::Ok();
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return errnoError(errno, "getifaddrs");
  SockAddr same, other;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || !(i->ifa_flags & IFF_UP)) continue;
    int fam = i->ifa_addr->sa_family;
    if ((fam != AF_INET && fam != AF_INET6) || !interfaceNameMatches(filter, i->ifa_name))
      continue;
    if (fam == AF_INET6 &&
        IN6_IS_ADDR_LINKLOCAL(&reinterpret_cast<const sockaddr_in6*>(i->ifa_addr)->sin6_addr))
      continue;
    SockAddr& slot = fam == family ? same : other;
    if (slot.valid()) continue;
    size_t len = fam == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    memcpy(&slot.ss, i->ifa_addr, len);
    slot.len = static_cast<socklen_t>(len);
  }
  freeifaddrs(list);
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
    return invalidUsage("this communicator's bootstrap listener was already handed to a "
                        "shrink (shrink a communicator at most once; shrink the new one)");
  return startBootstrapRootOn(std::move(listener_), id);
}

Status Bootstrap::create(const UniqueIdData& id, int rank, int nranks, int timeoutSec,
                         const std::atomic<bool>* abortFlag, std::unique_ptr<Bootstrap>* out) {
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

  // 2. Answer the root's challenge with our hello.
  BootChallenge ch;
  TIDE_TRY(root.recvAll(&ch, sizeof(ch), deadline, abortFlag));
  if (ch.magic != kBootMagic) return remoteError("bootstrap root at %s sent a bad challenge",
                                                 id.root.str().c_str());
  BootHello hello;
  hello.rank = rank;
  hello.nranks = nranks;
  hello.listen = toWire(listenAddr);
  Digest proof = helloProof(id, "tide-bootstrap-root", ch.nonce, rank, nranks);
  memcpy(hello.proof, proof.data(), proof.size());
  TIDE_TRY(root.sendAll(&hello, sizeof(hello), deadline, abortFlag));

  // 3. Receive everybody's listening address.
  int32_t status = 0;
  TIDE_TRY(root.recvAll(&status, sizeof(status), deadline, abortFlag));
  if (status != 0)
    return invalidUsage("bootstrap root refused rank %d of %d (code %d: %s)", rank, nranks, status,
                        status == 1 ? "nranks mismatch" : status == 2 ? "duplicate rank"
                                                                      : "bad rank");
  std::vector<WireAddr> table(nranks);
  TIDE_TRY(root.recvAll(table.data(), table.size() * sizeof(WireAddr), deadline, abortFlag));
  root.close();
  b->table_ = table;
  if (nranks == 1) {
    *out = std::move(b);
    return Status::Ok();
  }

  // 4. Ring: connect to next, accept from prev (authenticated both ways by the
  //    acceptor's challenge). Strangers are dropped and we keep accepting.
  int next = (rank + 1) % nranks;
  int prev = (rank - 1 + nranks) % nranks;
  TIDE_TRY(Socket::connect(fromWire(table[next]), deadline, abortFlag, &b->next_));
  bool answeredNext = false;
  for (;;) {
    Socket s;
    TIDE_TRY(listener.accept(&s, deadline, abortFlag));
    BootChallenge mine;
    TIDE_TRY(randomBytes(mine.nonce, sizeof(mine.nonce)));
    if (!s.sendAll(&mine, sizeof(mine), Deadline::after(5), abortFlag).ok()) continue;
    if (!answeredNext) {
      // `next` challenges us as soon as it accepted; it never waits on us
      // first, so this cannot form a cycle.
      BootChallenge theirs;
      TIDE_TRY(b->next_.recvAll(&theirs, sizeof(theirs), deadline, abortFlag));
      if (theirs.magic != kBootMagic)
        return remoteError("bootstrap: bad challenge from rank %d", next);
      BootHello h;
      h.rank = rank;
      h.nranks = nranks;
      Digest p = helloProof(id, "tide-bootstrap-ring", theirs.nonce, rank, nranks);
      memcpy(h.proof, p.data(), p.size());
      TIDE_TRY(b->next_.sendAll(&h, sizeof(h), deadline, abortFlag));
      answeredNext = true;
    }
    BootHello peerHello;
    Status st = s.recvAll(&peerHello, sizeof(peerHello), Deadline::after(5), abortFlag);
    if (!st.ok()) {
      if (abortFlag && abortFlag->load()) return st;
      TIDE_WARN("bootstrap: dropped a connection that did not answer (%s)", st.message().c_str());
      continue;
    }
    Digest want = helloProof(id, "tide-bootstrap-ring", mine.nonce, prev, nranks);
    if (peerHello.magic != kBootMagic || peerHello.rank != prev || peerHello.nranks != nranks ||
        (id.authenticated && !constantTimeEqual(want.data(), peerHello.proof, want.size()))) {
      TIDE_WARN("bootstrap: rejected a ring connection claiming rank %d", peerHello.rank);
      continue;
    }
    b->prev_ = std::move(s);
    break;
  }
  *out = std::move(b);
  return Status::Ok();
}

// Sends `bytes` to next while receiving `bytes` from prev, without blocking
// either direction (so large blocks cannot deadlock the ring).
Status Bootstrap::exchange(const void* sbuf, void* rbuf, size_t bytes) {
  Deadline deadline = Deadline::after(timeoutSec_);
  const char* sp = static_cast<const char*>(sbuf);
  char* rp = static_cast<char*>(rbuf);
  size_t sent = 0, got = 0;
  while (sent < bytes || got < bytes) {
    size_t n = 0;
    if (sent < bytes) {
      TIDE_TRY(next_.sendSome(sp + sent, bytes - sent, &n));
      sent += n;
    }
    size_t m = 0;
    if (got < bytes) {
      TIDE_TRY(prev_.recvSome(rp + got, bytes - got, &m));
      got += m;
    }
    if (n == 0 && m == 0) {
      if (abort_ && abort_->load()) return remoteError("bootstrap aborted");
      if (deadline.expired()) return timeoutError("bootstrap exchange timed out");
      pollfd fds[2] = {{next_.fd(), static_cast<short>(sent < bytes ? POLLOUT : 0), 0},
                       {prev_.fd(), static_cast<short>(got < bytes ? POLLIN : 0), 0}};
      poll(fds, 2, deadline.remainingMs(100));
    }
  }
  return Status::Ok();
}

Status Bootstrap::allGather(void* all, size_t bytes) {
  char* base = static_cast<char*>(all);
  for (int s = 0; s < nranks_ - 1; ++s) {
    int sendBlock = (rank_ - s + nranks_) % nranks_;
    int recvBlock = (rank_ - s - 1 + nranks_) % nranks_;
    TIDE_TRY(exchange(base + sendBlock * bytes, base + recvBlock * bytes, bytes));
  }
  return Status::Ok();
}

Status Bootstrap::barrier() {
  std::vector<char> tmp(nranks_, 0);
  return allGather(tmp.data(), 1);
}

}  // namespace tide
