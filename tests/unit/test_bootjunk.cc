// The bootstrap root under junk connections during a real 4-rank init:
// connect-and-close, silence, random bytes, floods, wrong secrets, authentic
// out-of-range hellos, truncated frames and malformed frame headers (length
// 0xFFFFFFFF, wrong type, wrong version, bad magic, flags, oversized table
// claims), plus a valid duplicate rank and a wrong communicator size. The init
// must not slow by more than 1 s, nothing junk may enter a table, and the
// root's memory stays flat under a burst. Ranks run as threads; the whole
// file runs in about 10 s.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bootroot_util.h"
#include "core/boot/bootstrap_frame.h"

namespace tide {
namespace {

using namespace bootroot;  // NOLINT(build/namespaces): test helpers only

// ---- A real init among junk ---------------------------------------------------------

enum class Junk {
  kClose,         // connect and close
  kSilent,        // connect, send nothing, wait up to 30 s
  kRandom,        // random bytes, no challenge read
  kFlood,         // 1 MiB of zeros
  kWrongSecret,   // a well-formed hello with a wrong proof
  kValidGarbage,  // an authentic hello with out-of-range fields
  kTruncated,     // part of an authentic hello frame, then silence
  kHeader,        // a malformed frame header (then up to 1 KiB of filler)
};

struct JunkClient {
  Junk kind;
  int32_t rank = 0;
  int32_t nranks = 4;
  int32_t wantCode = -1;        // kValidGarbage: the code the root must send
  std::vector<uint8_t> header;  // kHeader: sent after reading the challenge
  size_t truncateAt = 30;       // kTruncated: bytes of the hello frame sent
  Reply reply;                  // hello senders
  double closedAt = -1;         // the others: when the root closed the connection
};

void runJunk(JunkClient* j, const UniqueIdData& id, const WireAddr& trap,
             const std::atomic<bool>* stop) {
  Socket s = dial(id.root);
  if (!s.valid()) return;
  uint8_t ch[kNonceBytes];
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
      if (!readChallenge(s, ch)) return;
      BootHello h = makeHello(id.secret, ch, j->rank, j->nranks, trap);
      sendHello(s, h, j->truncateAt);
      j->closedAt = awaitClose(s, 30, stop);
      return;
    }
    case Junk::kHeader: {
      if (!readChallenge(s, ch)) return;
      std::vector<uint8_t> bytes = j->header;
      bytes.resize(bytes.size() + 1024, 0x41);
      s.sendAll(bytes.data(), bytes.size(), Deadline::after(2), nullptr).ok();
      j->closedAt = awaitClose(s, 30, stop);
      return;
    }
    case Junk::kWrongSecret:
    case Junk::kValidGarbage: {
      if (!readChallenge(s, ch)) return;
      uint8_t secret[kSecretBytes];
      memcpy(secret, id.secret, kSecretBytes);
      if (j->kind == Junk::kWrongSecret) secret[5] ^= 0x5a;
      BootHello h = makeHello(secret, ch, j->rank, j->nranks, trap);
      sendHello(s, h);
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
  v.push_back({Junk::kValidGarbage, 1, kMaxBootRanks + 1, kBootRefuseBadHello});
  v.push_back({Junk::kTruncated, 2, 4});
  v.push_back({Junk::kTruncated, 3, 4});
  JunkClient headerOnly{Junk::kTruncated, 3, 4};
  headerOnly.truncateAt = kFrameHeaderBytes - 5;  // a truncated header
  v.push_back(headerOnly);
  const uint8_t hello = static_cast<uint8_t>(FrameType::kHello);
  const uint8_t table = static_cast<uint8_t>(FrameType::kTable);
  for (std::vector<uint8_t> h : {rawHeader(hello, 0xFFFFFFFF),                  // length
                                 rawHeader(hello, 0),                           // length
                                 rawHeader(hello, kHelloBytes, 1),              // version
                                 rawHeader(hello, kHelloBytes, 3),              // version
                                 rawHeader(hello, kHelloBytes, 2, 0x12345678),  // magic
                                 rawHeader(table, 4 * kWireAddrBytes),          // type
                                 rawHeader(table, 0xFFFFFFFF),                  // oversized table
                                 rawHeader(hello, kHelloBytes, 2, kFrameMagic, 0x80)}) {
    JunkClient c{Junk::kHeader};
    c.header = h;
    v.push_back(c);
  }
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
    uint8_t ch[kNonceBytes];
    Socket dup = dial(id.root);
    EXPECT_TRUE(readChallenge(dup, ch));
    BootHello h = makeHello(id.secret, ch, 1, 4, trap.addr);
    EXPECT_TRUE(sendHello(dup, h));
    Reply d = awaitReply(dup, 4, 2);
    EXPECT_EQ(d.kind, Reply::kCode);
    EXPECT_EQ(d.code, kBootRefuseDuplicate) << "a valid duplicate of rank 1 must be refused";
    Socket other = dial(id.root);
    EXPECT_TRUE(readChallenge(other, ch));
    h = makeHello(id.secret, ch, 2, 8, trap.addr);
    EXPECT_TRUE(sendHello(other, h));
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

TEST(BootJunk, JunkDoesNotDelayOrPoisonARealInit) {
  std::vector<JunkClient> none;
  bool ok = false, touched = true;
  double base = timedInit(false, &none, &ok, &touched);
  ASSERT_TRUE(ok) << "the 4-rank init failed without junk";
  std::vector<JunkClient> junk = junkMix();
  ASSERT_GE(junk.size(), 20u);
  double withJunk = timedInit(true, &junk, &ok, &touched);
  EXPECT_TRUE(ok) << "the 4-rank init failed among junk";
  EXPECT_FALSE(touched) << "a junk address reached a rank's table";
  printf("4-rank init: %.3f s alone, %.3f s among %zu junk clients\n", base, withJunk, junk.size());
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
      case Junk::kHeader:
        // Judged from the 16 header bytes: closed at once, not at the 2 s
        // handshake deadline.
        EXPECT_GE(j.closedAt, 0.0) << "the root left a malformed header open";
        EXPECT_LT(j.closedAt, 1.0) << "a malformed header waited for the handshake deadline";
        break;
      default:
        EXPECT_GE(j.closedAt, 0.0) << "the root left a junk connection open";
    }
  }
}

// ---- Strangers on a rank's ring listener --------------------------------------------

// Reads one frame of `type` with a payload of `len` bytes from s.
bool readFrame(const Socket& s, FrameType type, void* buf, size_t len) {
  FrameLimits lim;
  lim.blockBytes = static_cast<uint32_t>(len);
  return recvFrame(s, type, lim, buf, len, Deadline::after(5), nullptr, "rank 0").ok();
}

bool writeFrame(const Socket& s, FrameType type, const void* buf, uint32_t len) {
  return sendFrame(s, type, buf, len, Deadline::after(5), nullptr).ok();
}

// Rank 1 of 2 is played by hand so the test knows rank 0's listener and can
// aim strangers at it (silent, malformed header, wrong proof, wrong rank)
// before the real ring connection: rank 0 must handshake them side by side
// and finish its ring, allGather and barrier well within 1 s.
TEST(BootJunk, StrangersOnARanksListenerDoNotDelayTheRing) {
  UniqueIdData id = startRoot(true);
  SockAddr a;
  ASSERT_TRUE(resolveAddress("127.0.0.1", 0, &a).ok());
  Socket mine;
  ASSERT_TRUE(Socket::listen(a, 16, &mine).ok());
  ASSERT_TRUE(mine.localAddr(&a).ok());

  std::atomic<bool> done{false};
  std::atomic<int> ok0{0};
  std::thread rank0([&] {
    std::unique_ptr<Bootstrap> b;
    std::atomic<bool> abortFlag{false};
    if (!Bootstrap::create(id, 0, 2, 20, &abortFlag, &b).ok()) return;
    int32_t all[2] = {11, -1};
    if (!b->allGather(all, sizeof(int32_t)).ok() || all[1] != 22) return;
    ok0 = b->barrier().ok() ? 1 : 0;
    done = true;
  });
  Socket root = dial(id.root);
  uint8_t ch[kNonceBytes];
  ASSERT_TRUE(readChallenge(root, ch));
  ASSERT_TRUE(sendHello(root, makeHello(id.secret, ch, 1, 2, toWire(a))));
  Reply r = awaitReply(root, 2, 5);
  ASSERT_EQ(r.code, 0);
  ASSERT_EQ(r.table.size(), 2u);
  SockAddr rank0Addr = fromWire(r.table[0]);

  Clock::time_point t0 = Clock::now();
  Socket silent = dial(rank0Addr);
  Socket badHeader = dial(rank0Addr);
  ASSERT_TRUE(readFrame(badHeader, FrameType::kChallenge, ch, kNonceBytes));
  std::vector<uint8_t> h = rawHeader(static_cast<uint8_t>(FrameType::kRingHello), 0xFFFFFFFF);
  ASSERT_TRUE(badHeader.sendAll(h.data(), h.size(), Deadline::after(2), nullptr).ok());
  uint8_t wrong[kSecretBytes];
  memcpy(wrong, id.secret, kSecretBytes);
  wrong[1] ^= 1;
  for (int variant = 0; variant < 2; ++variant) {  // wrong secret, then wrong rank
    Socket s = dial(rank0Addr);
    ASSERT_TRUE(readFrame(s, FrameType::kChallenge, ch, kNonceBytes));
    BootHello rh;
    rh.rank = variant == 0 ? 1 : 0;
    rh.nranks = 2;
    Digest p = helloProof(variant == 0 ? wrong : id.secret, "tide-bootstrap-ring", ch, rh);
    memcpy(rh.proof, p.data(), p.size());
    auto f = helloFrame(rh, FrameType::kRingHello);
    ASSERT_TRUE(s.sendAll(f.data(), f.size(), Deadline::after(2), nullptr).ok());
    EXPECT_GT(awaitClose(s, 2), -1.0) << "rank 0 kept a ring impostor open";
  }
  sleepMs(50);

  // The real ring: connect to rank 0 (our next) and accept rank 0 (our prev).
  Socket next = dial(rank0Addr);
  ASSERT_TRUE(readFrame(next, FrameType::kChallenge, ch, kNonceBytes));
  BootHello rh;
  rh.rank = 1;
  rh.nranks = 2;
  Digest p = helloProof(id.secret, "tide-bootstrap-ring", ch, rh);
  memcpy(rh.proof, p.data(), p.size());
  auto f = helloFrame(rh, FrameType::kRingHello);
  ASSERT_TRUE(next.sendAll(f.data(), f.size(), Deadline::after(2), nullptr).ok());
  Socket prev;
  ASSERT_TRUE(mine.accept(&prev, Deadline::after(5), nullptr).ok());
  uint8_t nonce[kNonceBytes];
  ASSERT_TRUE(randomBytes(nonce, sizeof(nonce)).ok());
  auto c = challengeFrame(nonce);
  ASSERT_TRUE(prev.sendAll(c.data(), c.size(), Deadline::after(2), nullptr).ok());
  uint8_t body[kHelloBytes];
  ASSERT_TRUE(readFrame(prev, FrameType::kRingHello, body, sizeof(body)));
  BootHello theirs;
  decodeHello(body, &theirs);
  Digest want = helloProof(id.secret, "tide-bootstrap-ring", nonce, theirs);
  EXPECT_EQ(memcmp(want.data(), theirs.proof, want.size()), 0) << "rank 0's ring proof";

  // allGather (4 bytes) and barrier (1 byte) as rank 1.
  int32_t mineBlock = 22, theirBlock = 0;
  ASSERT_TRUE(writeFrame(next, FrameType::kGather, &mineBlock, 4));
  ASSERT_TRUE(readFrame(prev, FrameType::kGather, &theirBlock, 4));
  EXPECT_EQ(theirBlock, 11);
  uint8_t zero = 0, got = 1;
  ASSERT_TRUE(writeFrame(next, FrameType::kBarrier, &zero, 1));
  ASSERT_TRUE(readFrame(prev, FrameType::kBarrier, &got, 1));
  rank0.join();
  double seconds = secondsSince(t0);
  printf("rank 0's ring among 4 strangers on its listener: %.3f s\n", seconds);
  EXPECT_EQ(ok0.load(), 1);
  EXPECT_LT(seconds, 1.0) << "a stranger on the listener held up the ring";
}

// ---- The secret never reaches the log -------------------------------------------

constexpr const char* kLoggedSecret = "boot-junk-log-secret-6f1d";

bool fileContains(const std::string& text, const void* needle, size_t n) {
  return n > 0 && std::search(text.begin(), text.end(), static_cast<const char*>(needle),
                              static_cast<const char*>(needle) + n) != text.end();
}

std::string hex(const uint8_t* p, size_t n, const char* digits) {
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s += digits[p[i] >> 4];
    s += digits[p[i] & 15];
  }
  return s;
}

// In a child process (the log level is read once per process): a 2-rank
// init with TIDE_SECRET among wrong-secret and valid-but-refused hellos,
// logging at TRACE into a file. The parent then searches the log for the
// secret as text, raw bytes and hex.
TEST(BootJunk, SecretNeverLogged) {
  if (getenv("TIDE_BOOTJUNK_LOG_CHILD")) {
    UniqueIdData id;
    ASSERT_TRUE(resolveAddress("127.0.0.1", 0, &id.root).ok());
    secretFromEnvironment(id.secret, &id.authenticated);
    ASSERT_TRUE(id.authenticated);
    ASSERT_TRUE(startBootstrapRoot(&id).ok());
    Trap trap;
    for (int i = 0; i < 3; ++i) {
      Socket s = dial(id.root);
      uint8_t ch[kNonceBytes];
      ASSERT_TRUE(readChallenge(s, ch));
      uint8_t secret[kSecretBytes];
      memcpy(secret, id.secret, kSecretBytes);
      if (i < 2) secret[i] ^= 1;  // wrong secrets; the last one is valid but out of range
      ASSERT_TRUE(sendHello(s, makeHello(secret, ch, i < 2 ? 0 : 9, 2, trap.addr)));
      awaitReply(s, 2, 2);
    }
    int ok[2] = {0, 0};
    std::thread r1([&] { ok[1] = realRank(id, 1, 2); });
    ok[0] = realRank(id, 0, 2);
    r1.join();
    EXPECT_TRUE(ok[0] && ok[1]);
    return;
  }
  char path[] = "/tmp/tide-bootjunk-log-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  // Everything the child needs is built before fork: it only calls execve.
  std::vector<std::string> env = {"TIDE_BOOTJUNK_LOG_CHILD=1",
                                  std::string("TIDE_SECRET=") + kLoggedSecret, "TIDE_DEBUG=TRACE",
                                  std::string("TIDE_DEBUG_FILE=") + path};
  for (char** e = environ; *e != nullptr; ++e)
    if (strncmp(*e, "TIDE_", 5) != 0) env.emplace_back(*e);
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  char exe[] = "/proc/self/exe", name[] = "unit_bootjunk",
       filter[] = "--gtest_filter=BootJunk.SecretNeverLogged";
  char* argv[] = {name, filter, nullptr};
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    execve(exe, argv, envp.data());
    _exit(127);
  }
  int status = 0;
  Deadline d = Deadline::after(30);
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (d.expired()) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      FAIL() << "the child did not finish in 30 s";
    }
    sleepMs(20);
  }
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  std::ifstream f(path);
  std::string log((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  unlink(path);
  EXPECT_NE(log.find("bootstrap root"), std::string::npos) << "the child logged nothing";
  uint8_t secret[kSecretBytes];
  secretFromString(kLoggedSecret, secret);
  EXPECT_EQ(log.find(kLoggedSecret), std::string::npos);
  EXPECT_FALSE(fileContains(log, secret, kSecretBytes));
  EXPECT_EQ(log.find(hex(secret, kSecretBytes, "0123456789abcdef")), std::string::npos);
  EXPECT_EQ(log.find(hex(secret, kSecretBytes, "0123456789ABCDEF")), std::string::npos);
  EXPECT_EQ(log.find(hex(secret, 4, "0123456789abcdef")), std::string::npos);
  printf("TRACE log of the child: %zu bytes, no trace of the secret\n", log.size());
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
      auto f = helloFrame(h, FrameType::kHello);
      s.sendAll(f.data(), f.size(), Deadline::after(1), nullptr).ok();
    } else if (i % 4 == 1) {
      s.sendAll(noise.data(), noise.size(), Deadline::after(1), nullptr).ok();
    } else if (i % 4 == 2) {
      BootHello h;
      h.rank = -5;
      h.nranks = 0x7fffffff;
      auto f = helloFrame(h, FrameType::kHello);
      s.sendAll(f.data(), f.size() - 7, Deadline::after(1), nullptr).ok();
    } else if (i % 8 == 4) {
      // A header claiming 4 GiB: must cost the root nothing.
      std::vector<uint8_t> big = rawHeader(static_cast<uint8_t>(FrameType::kHello), 0xFFFFFFFF);
      s.sendAll(big.data(), big.size(), Deadline::after(1), nullptr).ok();
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

TEST(BootJunk, JunkBurstKeepsMemorySmall) {
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
    printf("RSS growth, 200 hellos claiming %d ranks (open root): %ld KiB\n", kMaxBootRanks, grew);
    EXPECT_LT(grew, 16 << 10) << "RSS grew by " << grew << " KiB";
  }
  EXPECT_FALSE(trap.touched());
}

}  // namespace
}  // namespace tide
