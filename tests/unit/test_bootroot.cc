// The bootstrap root under junk connections: hello validation, handshake
// deadlines, the lifetime timeout, duplicates, and memory under a burst.
// Ranks run as threads; junk clients speak raw TCP on loopback. Every wait is
// bounded; the whole file runs in about 15 s.
#include <gtest/gtest.h>

#include "bootstrap_util.h"
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/auth.h"
#include "core/bootstrap.h"
#include "core/bootstrap_wire.h"
#include "core/socket.h"
#include "core/unique_id.h"

namespace tide {
namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

void sleepMs(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

// Sets TIDE_TIMEOUT while a root is started (the root reads it once).
class ScopedTimeout {
 public:
  explicit ScopedTimeout(const char* value) {
    const char* old = getenv("TIDE_TIMEOUT");
    had_ = old != nullptr;
    if (had_) old_ = old;
    setenv("TIDE_TIMEOUT", value, 1);
  }
  ~ScopedTimeout() {
    if (had_) {
      setenv("TIDE_TIMEOUT", old_.c_str(), 1);
    } else {
      unsetenv("TIDE_TIMEOUT");
    }
  }

 private:
  bool had_ = false;
  std::string old_;
};

// A loopback listener whose address junk hellos announce: nobody may ever
// connect to it, which would mean the root put a junk address in a table.
struct Trap {
  Socket sock;
  WireAddr addr;
  Trap() {
    SockAddr a;
    EXPECT_TRUE(resolveAddress("127.0.0.1", 0, &a).ok());
    EXPECT_TRUE(Socket::listen(a, 16, &sock).ok());
    EXPECT_TRUE(sock.localAddr(&a).ok());
    addr = toWire(a);
  }
  bool touched() const {
    pollfd p{sock.fd(), POLLIN, 0};
    return poll(&p, 1, 0) > 0;
  }
};

Socket dial(const SockAddr& root) {
  Socket s;
  EXPECT_TRUE(Socket::connect(root, Deadline::after(5), nullptr, &s).ok());
  return s;
}

bool readChallenge(const Socket& s, BootChallenge* ch) {
  return s.recvAll(ch, sizeof(*ch), Deadline::after(5), nullptr).ok() && ch->magic == kBootMagic;
}

BootHello makeHello(const uint8_t secret[kSecretBytes], const BootChallenge& ch, int32_t rank,
                    int32_t nranks, const WireAddr& listen) {
  BootHello h;
  h.rank = rank;
  h.nranks = nranks;
  h.listen = listen;
  int32_t ctx[2] = {rank, nranks};
  Digest p = connectionProof(secret, "tide-bootstrap-root", ch.nonce, ctx, sizeof(ctx));
  memcpy(h.proof, p.data(), p.size());
  return h;
}

// What the root answered after a hello.
struct Reply {
  enum Kind { kTimeout, kEof, kCode } kind = kTimeout;
  int32_t code = -1;
  std::vector<WireAddr> table;  // when code == 0
};

Reply awaitReply(const Socket& s, int nranks, double maxSec,
                 const std::atomic<bool>* stop = nullptr) {
  Reply r;
  Deadline d = Deadline::after(maxSec);
  for (;;) {
    if (d.expired() || (stop && stop->load())) return r;
    pollfd p{s.fd(), POLLIN, 0};
    if (poll(&p, 1, d.remainingMs(50)) > 0) break;
  }
  int32_t code = 0;
  if (!s.recvAll(&code, sizeof(code), Deadline::after(2), nullptr).ok()) {
    r.kind = Reply::kEof;
    return r;
  }
  r.kind = Reply::kCode;
  r.code = code;
  if (code == 0 && nranks > 0 && nranks <= 1024) {
    r.table.resize(nranks);
    if (!s.recvAll(r.table.data(), nranks * sizeof(WireAddr), Deadline::after(2), nullptr).ok())
      r.table.clear();
  }
  return r;
}

// Seconds until the root closed `s` (without reading what it sent), or -1.
double awaitClose(const Socket& s, double maxSec, const std::atomic<bool>* stop = nullptr) {
  Clock::time_point t0 = Clock::now();
  Deadline d = Deadline::after(maxSec);
  while (!d.expired() && !(stop && stop->load())) {
    pollfd p{s.fd(), POLLRDHUP, 0};
    if (poll(&p, 1, d.remainingMs(50)) > 0) return secondsSince(t0);
  }
  return -1;
}

// A real rank: Bootstrap::create, then an allGather that checks every block.
bool realRank(const UniqueIdData& id, int rank, int n) {
  std::unique_ptr<Bootstrap> b;
  std::atomic<bool> abortFlag{false};
  if (!Bootstrap::create(id, rank, n, 20, &abortFlag, &b).ok()) return false;
  std::vector<int32_t> all(n, -1);
  all[rank] = 7 * rank + 1;
  if (!b->allGather(all.data(), sizeof(int32_t)).ok()) return false;
  for (int q = 0; q < n; ++q)
    if (all[q] != 7 * q + 1) return false;
  return true;
}

bool sameAddr(const WireAddr& a, const WireAddr& b) { return memcmp(&a, &b, sizeof(a)) == 0; }

long vmRssKiB() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return atol(line.c_str() + 6);
  return -1;
}

// ---- Pure validation ------------------------------------------------------------

TEST(BootRootWire, HelloVerdicts) {
  UniqueIdData id;
  ASSERT_TRUE(randomBytes(id.secret, sizeof(id.secret)).ok());
  id.authenticated = true;
  BootChallenge ch;
  ASSERT_TRUE(randomBytes(ch.nonce, sizeof(ch.nonce)).ok());
  Trap trap;
  auto hello = [&](int32_t rank, int32_t nranks) {
    return makeHello(id.secret, ch, rank, nranks, trap.addr);
  };
  EXPECT_EQ(checkBootHello(hello(1, 4), ch.nonce, id, 0), HelloVerdict::kAccept);
  EXPECT_EQ(checkBootHello(hello(1, 4), ch.nonce, id, 4), HelloVerdict::kAccept);
  EXPECT_EQ(checkBootHello(hello(1, 8), ch.nonce, id, 4), HelloVerdict::kRefuseNranks);
  EXPECT_EQ(checkBootHello(hello(0, 0x7fffffff), ch.nonce, id, 0), HelloVerdict::kRefuseBad);
  EXPECT_EQ(checkBootHello(hello(0, kMaxBootRanks + 1), ch.nonce, id, 0),
            HelloVerdict::kRefuseBad);
  EXPECT_EQ(checkBootHello(hello(0, 0), ch.nonce, id, 0), HelloVerdict::kRefuseBad);
  EXPECT_EQ(checkBootHello(hello(0, -3), ch.nonce, id, 0), HelloVerdict::kRefuseBad);
  EXPECT_EQ(checkBootHello(hello(-5, 4), ch.nonce, id, 4), HelloVerdict::kRefuseBad);
  EXPECT_EQ(checkBootHello(hello(4, 4), ch.nonce, id, 4), HelloVerdict::kRefuseBad);

  BootHello h = hello(1, 4);
  h.magic ^= 1;
  EXPECT_EQ(checkBootHello(h, ch.nonce, id, 0), HelloVerdict::kDrop);
  h = hello(1, 4);
  h.version = kBootVersion + 1;
  EXPECT_EQ(checkBootHello(h, ch.nonce, id, 0), HelloVerdict::kDrop);
  h = hello(1, 4);
  h.rank = 2;  // the proof covers rank and nranks
  EXPECT_EQ(checkBootHello(h, ch.nonce, id, 0), HelloVerdict::kDrop);
  h = hello(1, 4);
  h.proof[31] ^= 1;
  EXPECT_EQ(checkBootHello(h, ch.nonce, id, 0), HelloVerdict::kDrop);
  BootChallenge other;
  ASSERT_TRUE(randomBytes(other.nonce, sizeof(other.nonce)).ok());
  EXPECT_EQ(checkBootHello(hello(1, 4), other.nonce, id, 0), HelloVerdict::kDrop);  // replay
  // Garbage fields without the secret earn no code at all.
  h = hello(0, 0x7fffffff);
  h.proof[0] ^= 1;
  EXPECT_EQ(checkBootHello(h, ch.nonce, id, 0), HelloVerdict::kDrop);
  h = hello(1, 4);
  h.listen.family = 0;
  EXPECT_EQ(checkBootHello(h, ch.nonce, id, 0), HelloVerdict::kRefuseBad);

  // Without a secret the proof is not checked, the ranges still are.
  UniqueIdData open = id;
  open.authenticated = false;
  h = hello(1, 4);
  memset(h.proof, 0, sizeof(h.proof));
  EXPECT_EQ(checkBootHello(h, ch.nonce, open, 0), HelloVerdict::kAccept);
  h.nranks = 0x7fffffff;
  EXPECT_EQ(checkBootHello(h, ch.nonce, open, 0), HelloVerdict::kRefuseBad);
}

// ---- Lifetime -----------------------------------------------------------------
// These set TIDE_TIMEOUT, so they run first, before other tests start threads.

TEST(BootRoot, GivesUpWithoutNewRanks) {
  UniqueIdData id;
  {
    ScopedTimeout t("1");
    id = startRoot(true);
  }
  Clock::time_point t0 = Clock::now();
  Socket silent = dial(id.root);  // junk does not count as progress
  double closedAt = awaitClose(silent, 5);
  EXPECT_GT(closedAt, 0.0) << "the root never gave up";
  EXPECT_LT(secondsSince(t0), 1.9) << "gave up by the lifetime, before the handshake deadline";
  sleepMs(100);
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&id.root.ss), id.root.len);
  int err = errno;
  ::close(fd);
  EXPECT_TRUE(rc != 0 && err == ECONNREFUSED) << "the root still listens";
}

TEST(BootRoot, ArrivalsExtendTheLifetime) {
  UniqueIdData id;
  {
    ScopedTimeout t("2");
    id = startRoot(true);
  }
  Trap a, b;
  sleepMs(1200);
  Socket r0 = dial(id.root);
  BootChallenge ch;
  ASSERT_TRUE(readChallenge(r0, &ch));
  BootHello h = makeHello(id.secret, ch, 0, 2, a.addr);
  ASSERT_TRUE(r0.sendAll(&h, sizeof(h), Deadline::after(2), nullptr).ok());
  sleepMs(1400);  // 2.6 s after the start, 1.4 s after rank 0
  Socket r1 = dial(id.root);
  ASSERT_TRUE(readChallenge(r1, &ch));
  h = makeHello(id.secret, ch, 1, 2, b.addr);
  ASSERT_TRUE(r1.sendAll(&h, sizeof(h), Deadline::after(2), nullptr).ok());
  Reply x = awaitReply(r0, 2, 5), y = awaitReply(r1, 2, 5);
  EXPECT_EQ(x.kind, Reply::kCode);
  EXPECT_EQ(x.code, 0);
  EXPECT_EQ(y.code, 0);
}

// ---- Handshake rules ---------------------------------------------------------------

TEST(BootRoot, HandshakeDeadlineClosesSilentAndTruncatedPeers) {
  UniqueIdData id = startRoot(true);
  Trap a, b, trap;
  Socket r0 = dial(id.root);
  BootChallenge ch;
  ASSERT_TRUE(readChallenge(r0, &ch));
  BootHello h = makeHello(id.secret, ch, 0, 2, a.addr);
  ASSERT_TRUE(r0.sendAll(&h, sizeof(h), Deadline::after(2), nullptr).ok());

  Clock::time_point t0 = Clock::now();
  Socket silent = dial(id.root);
  Socket truncated = dial(id.root);
  ASSERT_TRUE(readChallenge(truncated, &ch));
  h = makeHello(id.secret, ch, 1, 2, trap.addr);
  ASSERT_TRUE(truncated.sendAll(&h, 30, Deadline::after(2), nullptr).ok());
  EXPECT_GT(awaitClose(silent, 5), 0.0);
  double silentAt = secondsSince(t0);
  Reply t = awaitReply(truncated, 2, 5);
  double truncatedAt = secondsSince(t0);
  EXPECT_EQ(t.kind, Reply::kEof) << "a truncated hello earns no code";
  EXPECT_GT(silentAt, 1.5);
  EXPECT_LT(silentAt, 3.5);
  EXPECT_LT(truncatedAt, 3.5);

  // The root kept going: rank 1 completes the communicator.
  Socket r1 = dial(id.root);
  ASSERT_TRUE(readChallenge(r1, &ch));
  h = makeHello(id.secret, ch, 1, 2, b.addr);
  ASSERT_TRUE(r1.sendAll(&h, sizeof(h), Deadline::after(2), nullptr).ok());
  EXPECT_EQ(awaitReply(r0, 2, 5).code, 0);
  EXPECT_EQ(awaitReply(r1, 2, 5).code, 0);
}

TEST(BootRoot, ImpostorsAndDuplicatesNeverEnterTheTable) {
  UniqueIdData id = startRoot(true);
  uint8_t wrong[kSecretBytes];
  memcpy(wrong, id.secret, kSecretBytes);
  wrong[0] ^= 0xff;
  Trap a, b, trap;
  BootChallenge ch;
  // Impostors come first, for both ranks, and are dropped without a code.
  for (int32_t r : {0, 1}) {
    Socket s = dial(id.root);
    ASSERT_TRUE(readChallenge(s, &ch));
    BootHello h = makeHello(wrong, ch, r, 2, trap.addr);
    ASSERT_TRUE(s.sendAll(&h, sizeof(h), Deadline::after(2), nullptr).ok());
    EXPECT_EQ(awaitReply(s, 2, 5).kind, Reply::kEof) << "impostor for rank " << r;
  }
  Socket r0 = dial(id.root);
  ASSERT_TRUE(readChallenge(r0, &ch));
  BootHello h = makeHello(id.secret, ch, 0, 2, a.addr);
  ASSERT_TRUE(r0.sendAll(&h, sizeof(h), Deadline::after(2), nullptr).ok());
  sleepMs(50);
  // A second, valid rank 0 is refused with code 2; the first one stays.
  Socket dup = dial(id.root);
  ASSERT_TRUE(readChallenge(dup, &ch));
  h = makeHello(id.secret, ch, 0, 2, trap.addr);
  ASSERT_TRUE(dup.sendAll(&h, sizeof(h), Deadline::after(2), nullptr).ok());
  Reply d = awaitReply(dup, 2, 5);
  EXPECT_EQ(d.kind, Reply::kCode);
  EXPECT_EQ(d.code, kBootRefuseDuplicate);
  // A valid hello for another size is refused with code 1.
  Socket mismatch = dial(id.root);
  ASSERT_TRUE(readChallenge(mismatch, &ch));
  h = makeHello(id.secret, ch, 1, 3, trap.addr);
  ASSERT_TRUE(mismatch.sendAll(&h, sizeof(h), Deadline::after(2), nullptr).ok());
  EXPECT_EQ(awaitReply(mismatch, 2, 5).code, kBootRefuseNranks);

  Socket r1 = dial(id.root);
  ASSERT_TRUE(readChallenge(r1, &ch));
  h = makeHello(id.secret, ch, 1, 2, b.addr);
  ASSERT_TRUE(r1.sendAll(&h, sizeof(h), Deadline::after(2), nullptr).ok());
  for (Socket* s : {&r0, &r1}) {
    Reply x = awaitReply(*s, 2, 5);
    ASSERT_EQ(x.code, 0);
    ASSERT_EQ(x.table.size(), 2u);
    EXPECT_TRUE(sameAddr(x.table[0], a.addr));
    EXPECT_TRUE(sameAddr(x.table[1], b.addr));
  }
}

TEST(BootRoot, RankThatHangsUpFreesItsSlot) {
  UniqueIdData id = startRoot(true);
  Trap a, b, gone;
  BootChallenge ch;
  {
    Socket first = dial(id.root);
    ASSERT_TRUE(readChallenge(first, &ch));
    BootHello h = makeHello(id.secret, ch, 0, 2, gone.addr);
    ASSERT_TRUE(first.sendAll(&h, sizeof(h), Deadline::after(2), nullptr).ok());
    sleepMs(50);
  }
  sleepMs(300);
  Socket r0 = dial(id.root), r1 = dial(id.root);
  ASSERT_TRUE(readChallenge(r0, &ch));
  BootHello h = makeHello(id.secret, ch, 0, 2, a.addr);
  ASSERT_TRUE(r0.sendAll(&h, sizeof(h), Deadline::after(2), nullptr).ok());
  ASSERT_TRUE(readChallenge(r1, &ch));
  h = makeHello(id.secret, ch, 1, 2, b.addr);
  ASSERT_TRUE(r1.sendAll(&h, sizeof(h), Deadline::after(2), nullptr).ok());
  Reply x = awaitReply(r0, 2, 5);
  ASSERT_EQ(x.code, 0);
  ASSERT_EQ(x.table.size(), 2u);
  EXPECT_TRUE(sameAddr(x.table[0], a.addr));
  EXPECT_EQ(awaitReply(r1, 2, 5).code, 0);
}

// ---- A real init among junk ---------------------------------------------------------

enum class Junk { kClose, kSilent, kRandom, kFlood, kWrongSecret, kValidGarbage, kTruncated };

struct JunkClient {
  Junk kind;
  int32_t rank = 0;
  int32_t nranks = 4;
  int32_t wantCode = -1;  // kValidGarbage: the code the root must send
  Reply reply;            // hello senders
  double closedAt = -1;   // the others: when the root closed the connection
};

void runJunk(JunkClient* j, const UniqueIdData& id, const WireAddr& trap,
             const std::atomic<bool>* stop) {
  Socket s = dial(id.root);
  if (!s.valid()) return;
  BootChallenge ch;
  switch (j->kind) {
    case Junk::kClose:
      return;
    case Junk::kSilent:
      j->closedAt = awaitClose(s, 30, stop);
      return;
    case Junk::kRandom: {
      std::vector<uint8_t> bytes(1 + (j->rank * 997) % 4096);
      EXPECT_TRUE(randomBytes(bytes.data(), bytes.size()).ok());
      s.sendAll(bytes.data(), bytes.size(), Deadline::after(2), nullptr).ok();
      j->closedAt = awaitClose(s, 30, stop);
      return;
    }
    case Junk::kFlood: {
      std::vector<uint8_t> zeros(1 << 20, 0);  // the root reads only one hello's worth
      s.sendAll(zeros.data(), zeros.size(), Deadline::after(3), nullptr).ok();
      j->closedAt = awaitClose(s, 30, stop);
      return;
    }
    case Junk::kTruncated: {
      if (!readChallenge(s, &ch)) return;
      BootHello h = makeHello(id.secret, ch, j->rank, j->nranks, trap);
      s.sendAll(&h, 30, Deadline::after(2), nullptr).ok();
      j->closedAt = awaitClose(s, 30, stop);
      return;
    }
    case Junk::kWrongSecret:
    case Junk::kValidGarbage: {
      if (!readChallenge(s, &ch)) return;
      uint8_t secret[kSecretBytes];
      memcpy(secret, id.secret, kSecretBytes);
      if (j->kind == Junk::kWrongSecret) secret[5] ^= 0x5a;
      BootHello h = makeHello(secret, ch, j->rank, j->nranks, trap);
      s.sendAll(&h, sizeof(h), Deadline::after(2), nullptr).ok();
      j->reply = awaitReply(s, j->nranks, 30, stop);
      return;
    }
  }
}

std::vector<JunkClient> junkMix() {
  std::vector<JunkClient> v;
  for (int i = 0; i < 4; ++i) v.push_back({Junk::kClose});
  for (int i = 0; i < 6; ++i) v.push_back({Junk::kSilent});
  for (int i = 0; i < 3; ++i) v.push_back({Junk::kRandom, i});
  v.push_back({Junk::kFlood});
  v.push_back({Junk::kWrongSecret, 0, 4});
  v.push_back({Junk::kWrongSecret, 3, 4});
  v.push_back({Junk::kWrongSecret, 0, 0x7fffffff});
  v.push_back({Junk::kWrongSecret, -5, 4});
  v.push_back({Junk::kValidGarbage, 0, 0x7fffffff, kBootRefuseBadHello});
  v.push_back({Junk::kValidGarbage, 0, 0, kBootRefuseBadHello});
  v.push_back({Junk::kValidGarbage, -5, 4, kBootRefuseBadHello});
  v.push_back({Junk::kValidGarbage, 4, 4, kBootRefuseBadHello});
  v.push_back({Junk::kTruncated, 2, 4});
  v.push_back({Junk::kTruncated, 3, 4});
  return v;
}

// Ranks 0-2 start at once; 300 ms later (withJunk: after a valid duplicate of
// rank 1 and a valid wrong-size hello were refused) rank 3 starts. Returns
// the seconds until all four finished their allGather.
double timedInit(bool withJunk, std::vector<JunkClient>* junk, bool* allOk, bool* trapTouched) {
  UniqueIdData id = startRoot(true);
  Trap trap;
  std::atomic<bool> stop{false};
  std::vector<std::thread> junkThreads;
  if (withJunk)
    for (auto& j : *junk) junkThreads.emplace_back(runJunk, &j, std::cref(id), trap.addr, &stop);
  int ok[4] = {0, 0, 0, 0};
  Clock::time_point t0 = Clock::now();
  std::vector<std::thread> ranks;
  for (int r = 0; r < 3; ++r) ranks.emplace_back([&, r] { ok[r] = realRank(id, r, 4); });
  sleepMs(300);
  if (withJunk) {
    BootChallenge ch;
    Socket dup = dial(id.root);
    EXPECT_TRUE(readChallenge(dup, &ch));
    BootHello h = makeHello(id.secret, ch, 1, 4, trap.addr);
    EXPECT_TRUE(dup.sendAll(&h, sizeof(h), Deadline::after(2), nullptr).ok());
    Reply d = awaitReply(dup, 4, 2);
    EXPECT_EQ(d.kind, Reply::kCode);
    EXPECT_EQ(d.code, kBootRefuseDuplicate) << "a valid duplicate of rank 1 must be refused";
    Socket other = dial(id.root);
    EXPECT_TRUE(readChallenge(other, &ch));
    h = makeHello(id.secret, ch, 2, 8, trap.addr);
    EXPECT_TRUE(other.sendAll(&h, sizeof(h), Deadline::after(2), nullptr).ok());
    EXPECT_EQ(awaitReply(other, 8, 2).code, kBootRefuseNranks);
  }
  ranks.emplace_back([&] { ok[3] = realRank(id, 3, 4); });
  for (auto& t : ranks) t.join();
  double seconds = secondsSince(t0);
  // The root closes every pending junk connection once the table is out.
  Clock::time_point grace = Clock::now();
  while (secondsSince(grace) < 3.0) {
    bool open = false;
    for (auto& j : *junk) {
      bool helloSender = j.kind == Junk::kWrongSecret || j.kind == Junk::kValidGarbage;
      if (withJunk && j.kind != Junk::kClose &&
          (helloSender ? j.reply.kind == Reply::kTimeout : j.closedAt < 0))
        open = true;
    }
    if (!open) break;
    sleepMs(50);
  }
  stop = true;
  for (auto& t : junkThreads) t.join();
  *allOk = ok[0] && ok[1] && ok[2] && ok[3];
  *trapTouched = trap.touched();
  return seconds;
}

TEST(BootRoot, JunkDoesNotDelayOrPoisonARealInit) {
  std::vector<JunkClient> none;
  bool ok = false, touched = true;
  double base = timedInit(false, &none, &ok, &touched);
  ASSERT_TRUE(ok) << "the 4-rank init failed without junk";
  std::vector<JunkClient> junk = junkMix();
  ASSERT_GE(junk.size(), 20u);
  double withJunk = timedInit(true, &junk, &ok, &touched);
  EXPECT_TRUE(ok) << "the 4-rank init failed among junk";
  EXPECT_FALSE(touched) << "a junk address reached a rank's table";
  printf("4-rank init: %.3f s alone, %.3f s among %zu junk clients\n", base, withJunk,
         junk.size());
  EXPECT_LT(withJunk, 2.0);
  EXPECT_LT(withJunk, base + 1.0) << "baseline " << base << " s";
  for (size_t i = 0; i < junk.size(); ++i) {
    const JunkClient& j = junk[i];
    SCOPED_TRACE("junk #" + std::to_string(i));
    switch (j.kind) {
      case Junk::kClose:
        break;
      case Junk::kWrongSecret:
        EXPECT_EQ(j.reply.kind, Reply::kEof) << "a wrong secret earns no code and no table";
        break;
      case Junk::kValidGarbage:
        EXPECT_EQ(j.reply.kind, Reply::kCode);
        EXPECT_EQ(j.reply.code, j.wantCode);
        break;
      default:
        EXPECT_GE(j.closedAt, 0.0) << "the root left a junk connection open";
    }
  }
}

// ---- Memory under a burst -----------------------------------------------------------

// Opens `count` junk connections at once (no threads), keeps them open for
// ~600 ms while sampling this process's RSS (the root lives here), and
// returns the largest growth in KiB. `hello` makes each connection send a
// full hello (no valid proof) claiming rank i of `nranks` ranks.
long burstRssGrowthKiB(const UniqueIdData& id, int count, bool hello, int32_t nranks,
                       const WireAddr& listen) {
  long before = vmRssKiB();
  std::atomic<long> peak{before};
  std::atomic<bool> sampling{true};
  std::thread sampler([&] {
    while (sampling) {
      long v = vmRssKiB();
      if (v > peak) peak = v;
      sleepMs(10);
    }
  });
  std::vector<Socket> socks;
  std::vector<uint8_t> noise(4096);
  EXPECT_TRUE(randomBytes(noise.data(), noise.size()).ok());
  for (int i = 0; i < count; ++i) {
    Socket s = dial(id.root);
    if (!s.valid()) continue;
    if (hello) {
      BootHello h;  // sent without reading the challenge: the proof cannot be right
      h.rank = i;
      h.nranks = nranks;
      h.listen = listen;
      s.sendAll(&h, sizeof(h), Deadline::after(1), nullptr).ok();
    } else if (i % 4 == 1) {
      s.sendAll(noise.data(), noise.size(), Deadline::after(1), nullptr).ok();
    } else if (i % 4 == 2) {
      BootHello h;
      h.rank = -5;
      h.nranks = 0x7fffffff;
      s.sendAll(&h, sizeof(h) - 7, Deadline::after(1), nullptr).ok();
    } else if (i % 4 == 3) {
      continue;  // connect and close
    }
    socks.push_back(std::move(s));
  }
  sleepMs(600);
  sampling = false;
  sampler.join();
  return peak - before;
}

TEST(BootRoot, JunkBurstKeepsMemorySmall) {
  Trap trap;
  {
    UniqueIdData id = startRoot(true);
    long grew = burstRssGrowthKiB(id, 200, false, 0, trap.addr);
    printf("RSS growth, 200 junk connections (authenticated root): %ld KiB\n", grew);
    EXPECT_LT(grew, 16 << 10) << "RSS grew by " << grew << " KiB";
    // The root still serves a real communicator after the burst.
    int ok[2] = {0, 0};
    std::thread r1([&] { ok[1] = realRank(id, 1, 2); });
    ok[0] = realRank(id, 0, 2);
    r1.join();
    EXPECT_TRUE(ok[0] && ok[1]);
  }
  {
    // Without a secret any well-formed hello is believed, yet a claim of the
    // largest allowed size must not make the root allocate for it.
    UniqueIdData id = startRoot(false);
    long grew = burstRssGrowthKiB(id, 200, true, kMaxBootRanks, trap.addr);
    printf("RSS growth, 200 hellos claiming %d ranks (open root): %ld KiB\n", kMaxBootRanks,
           grew);
    EXPECT_LT(grew, 16 << 10) << "RSS grew by " << grew << " KiB";
  }
  EXPECT_FALSE(trap.touched());
}

}  // namespace
}  // namespace tide
