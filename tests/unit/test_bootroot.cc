// The bootstrap's typed frames and the root's rules for well-formed peers:
// the pure frame parser, hello validation, handshake deadlines, the lifetime
// timeout, duplicates, and a rank facing a misbehaving root. Junk
// connections during a real init are in test_bootjunk.cc. Ranks run as
// threads; raw clients speak TCP on loopback. Every wait is bounded.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "bootroot_util.h"
#include "core/boot/bootstrap_frame.h"

namespace tide {
namespace {

using namespace bootroot;  // NOLINT(build/namespaces): test helpers only

// ---- Frame parser (pure) ---------------------------------------------------------------

TEST(BootFrame, HeaderByteLayoutIsLittleEndian) {
  std::vector<uint8_t> h = rawHeader(static_cast<uint8_t>(FrameType::kTable), 0x01020304);
  const uint8_t want[kFrameHeaderBytes] = {'T', 'd', 'B', 'f', kBootVersion, 0, 4, 0, 4, 3, 2, 1,
                                           0,   0,   0,   0};
  EXPECT_EQ(memcmp(h.data(), want, sizeof(want)), 0);
  FrameHeader d;
  decodeFrameHeader(h.data(), &d);
  EXPECT_EQ(d.magic, kFrameMagic);
  EXPECT_EQ(d.version, kBootVersion);
  EXPECT_EQ(d.type, 4);
  EXPECT_EQ(d.length, 0x01020304u);
  EXPECT_EQ(d.reserved, 0u);
  EXPECT_EQ(kBootVersion, 2) << "typed frames are protocol version 2";
}

TEST(BootFrame, FixedTypesAcceptOnlyTheirExactLength) {
  struct Case {
    FrameType type;
    uint32_t len;
  };
  for (Case c : {Case{FrameType::kChallenge, kNonceBytes}, Case{FrameType::kHello, kHelloBytes},
                 Case{FrameType::kRingHello, kHelloBytes}, Case{FrameType::kStatus, 4},
                 Case{FrameType::kBarrier, 1}}) {
    SCOPED_TRACE(frameTypeName(static_cast<uint8_t>(c.type)));
    FrameHeader got;
    uint8_t t = static_cast<uint8_t>(c.type);
    EXPECT_EQ(parseFrameHeader(rawHeader(t, c.len).data(), c.type, {}, &got), FrameError::kOk);
    for (uint32_t bad : {0u, c.len - 1, c.len + 1, 0xFFFFFFFFu, 0x80000000u}) {
      if (bad == c.len) continue;
      EXPECT_EQ(parseFrameHeader(rawHeader(t, bad).data(), c.type, {}, &got), FrameError::kLength)
          << bad;
    }
  }
  EXPECT_EQ(kHelloBytes, 60u);
}

TEST(BootFrame, VariableLengthsFollowWhatTheReceiverKnows) {
  FrameHeader got;
  const uint8_t table = static_cast<uint8_t>(FrameType::kTable);
  FrameLimits four;
  four.nranks = 4;
  EXPECT_EQ(parseFrameHeader(rawHeader(table, 80).data(), FrameType::kTable, four, &got),
            FrameError::kOk);
  EXPECT_EQ(parseFrameHeader(rawHeader(table, 100).data(), FrameType::kTable, four, &got),
            FrameError::kLength);  // a table for more ranks than agreed
  EXPECT_EQ(parseFrameHeader(rawHeader(table, 0xFFFFFFFF).data(), FrameType::kTable, four, &got),
            FrameError::kLength);
  for (int32_t n : {0, -1, kMaxBootRanks + 1}) {
    FrameLimits lim;
    lim.nranks = n;
    EXPECT_EQ(parseFrameHeader(rawHeader(table, 0).data(), FrameType::kTable, lim, &got),
              FrameError::kLimits)
        << n;
  }
  FrameLimits largest;
  largest.nranks = kMaxBootRanks;
  EXPECT_EQ(framePayloadLength(FrameType::kTable, largest),
            static_cast<int64_t>(kMaxBootRanks) * kWireAddrBytes);

  const uint8_t gather = static_cast<uint8_t>(FrameType::kGather);
  FrameLimits block;
  block.blockBytes = 4096;
  EXPECT_EQ(parseFrameHeader(rawHeader(gather, 4096).data(), FrameType::kGather, block, &got),
            FrameError::kOk);
  EXPECT_EQ(parseFrameHeader(rawHeader(gather, 4097).data(), FrameType::kGather, block, &got),
            FrameError::kLength);
  block.blockBytes = kMaxGatherFrame;
  EXPECT_EQ(framePayloadLength(FrameType::kGather, block), kMaxGatherFrame);
  block.blockBytes = kMaxGatherFrame + 1;
  EXPECT_EQ(framePayloadLength(FrameType::kGather, block), -1);
  block.blockBytes = 0;
  EXPECT_EQ(framePayloadLength(FrameType::kGather, block), -1);
}

TEST(BootFrame, ErrorsNameTheWrongField) {
  FrameHeader got;
  const uint8_t hello = static_cast<uint8_t>(FrameType::kHello);
  auto check = [&](std::vector<uint8_t> raw, FrameError want, const char* text) {
    FrameError e = parseFrameHeader(raw.data(), FrameType::kHello, {}, &got);
    EXPECT_EQ(e, want);
    std::string msg = describeFrameError(e, got, FrameType::kHello, {});
    EXPECT_NE(msg.find(text), std::string::npos) << msg;
  };
  check(rawHeader(hello, kHelloBytes, kBootVersion, 0xdeadbeef), FrameError::kMagic, "magic");
  check(rawHeader(hello, 0xFFFFFFFF, kBootVersion, 0xdeadbeef), FrameError::kMagic, "magic");
  check(rawHeader(hello, kHelloBytes, 3), FrameError::kVersion, "version 3");
  check(rawHeader(hello, kHelloBytes, 1), FrameError::kVersion, "speaks version 2");
  // A version-1 peer sends no header: its first bytes are the old 8-byte magic.
  std::vector<uint8_t> v1 = {'t', 'o', 'o', 'B', 'e', 'd', 'i', 't', 1, 0, 0, 0, 0, 0, 0, 0};
  check(v1, FrameError::kMagic, "version 1");
  check(rawHeader(static_cast<uint8_t>(FrameType::kTable), kHelloBytes), FrameError::kType,
        "type 4 (address table), expected hello");
  check(rawHeader(200, kHelloBytes), FrameError::kType, "unknown");
  check(rawHeader(hello, kHelloBytes, kBootVersion, kFrameMagic, 1), FrameError::kReserved,
        "flags");
  std::vector<uint8_t> reserved = rawHeader(hello, kHelloBytes);
  reserved[15] = 1;
  check(reserved, FrameError::kReserved, "reserved");
  check(rawHeader(hello, 0xFFFFFFFF), FrameError::kLength, "length 4294967295");
  check(rawHeader(hello, 0xFFFFFFFF), FrameError::kLength, "exactly 60");
}

TEST(BootFrame, PayloadCodecsRoundTripAndProofsCoverEveryField) {
  uint8_t secret[kSecretBytes], nonce[kNonceBytes];
  ASSERT_TRUE(randomBytes(secret, sizeof(secret)).ok());
  ASSERT_TRUE(randomBytes(nonce, sizeof(nonce)).ok());
  Trap trap;
  BootHello h = makeHello(secret, nonce, 3, 8, trap.addr);
  auto f = helloFrame(h, FrameType::kHello);
  FrameHeader got;
  ASSERT_EQ(parseFrameHeader(f.data(), FrameType::kHello, {}, &got), FrameError::kOk);
  BootHello back;
  decodeHello(f.data() + kFrameHeaderBytes, &back);
  EXPECT_EQ(back.rank, 3);
  EXPECT_EQ(back.nranks, 8);
  EXPECT_TRUE(sameAddr(back.listen, trap.addr));
  EXPECT_EQ(memcmp(back.proof, h.proof, sizeof(h.proof)), 0);
  Digest base = helloProof(secret, "tide-bootstrap-root", nonce, back);
  BootHello other = back;
  other.listen.port ^= 1;  // a stranger cannot redirect a rank's address
  EXPECT_NE(helloProof(secret, "tide-bootstrap-root", nonce, other), base);
  other = back;
  other.nranks = 9;
  EXPECT_NE(helloProof(secret, "tide-bootstrap-root", nonce, other), base);
  EXPECT_NE(helloProof(secret, "tide-bootstrap-ring", nonce, back), base);

  auto s = statusFrame(-2);
  ASSERT_EQ(parseFrameHeader(s.data(), FrameType::kStatus, {}, &got), FrameError::kOk);
  EXPECT_EQ(s[kFrameHeaderBytes], 0xfe);
  EXPECT_EQ(s[kFrameHeaderBytes + 3], 0xff);
  auto c = challengeFrame(nonce);
  ASSERT_EQ(parseFrameHeader(c.data(), FrameType::kChallenge, {}, &got), FrameError::kOk);
  EXPECT_EQ(memcmp(c.data() + kFrameHeaderBytes, nonce, kNonceBytes), 0);
}

// ---- Hello validation (pure) -------------------------------------------------------------

TEST(BootRootWire, HelloVerdicts) {
  UniqueIdData id;
  ASSERT_TRUE(randomBytes(id.secret, sizeof(id.secret)).ok());
  id.authenticated = true;
  uint8_t ch[kNonceBytes];
  ASSERT_TRUE(randomBytes(ch, sizeof(ch)).ok());
  Trap trap;
  auto hello = [&](int32_t rank, int32_t nranks) {
    return makeHello(id.secret, ch, rank, nranks, trap.addr);
  };
  EXPECT_EQ(checkBootHello(hello(1, 4), ch, id, 0), HelloVerdict::kAccept);
  EXPECT_EQ(checkBootHello(hello(1, 4), ch, id, 4), HelloVerdict::kAccept);
  EXPECT_EQ(checkBootHello(hello(1, 8), ch, id, 4), HelloVerdict::kRefuseNranks);
  EXPECT_EQ(checkBootHello(hello(0, 0x7fffffff), ch, id, 0), HelloVerdict::kRefuseBad);
  EXPECT_EQ(checkBootHello(hello(0, kMaxBootRanks + 1), ch, id, 0), HelloVerdict::kRefuseBad);
  EXPECT_EQ(checkBootHello(hello(0, kMaxBootRanks), ch, id, 0), HelloVerdict::kAccept);
  EXPECT_EQ(checkBootHello(hello(0, 0), ch, id, 0), HelloVerdict::kRefuseBad);
  EXPECT_EQ(checkBootHello(hello(0, -3), ch, id, 0), HelloVerdict::kRefuseBad);
  EXPECT_EQ(checkBootHello(hello(-5, 4), ch, id, 4), HelloVerdict::kRefuseBad);
  EXPECT_EQ(checkBootHello(hello(4, 4), ch, id, 4), HelloVerdict::kRefuseBad);

  BootHello h = hello(1, 4);
  h.rank = 2;  // the proof covers rank, nranks and the address
  EXPECT_EQ(checkBootHello(h, ch, id, 0), HelloVerdict::kDrop);
  h = hello(1, 4);
  h.listen.port ^= 0x100;
  EXPECT_EQ(checkBootHello(h, ch, id, 0), HelloVerdict::kDrop);
  h = hello(1, 4);
  h.proof[31] ^= 1;
  EXPECT_EQ(checkBootHello(h, ch, id, 0), HelloVerdict::kDrop);
  uint8_t other[kNonceBytes];
  ASSERT_TRUE(randomBytes(other, sizeof(other)).ok());
  EXPECT_EQ(checkBootHello(hello(1, 4), other, id, 0), HelloVerdict::kDrop);  // replay
  // Garbage fields without the secret earn no code at all.
  h = hello(0, 0x7fffffff);
  h.proof[0] ^= 1;
  EXPECT_EQ(checkBootHello(h, ch, id, 0), HelloVerdict::kDrop);
  h = hello(1, 4);
  h.listen.family = 0;
  Digest p = helloProof(id.secret, "tide-bootstrap-root", ch, h);
  memcpy(h.proof, p.data(), p.size());
  EXPECT_EQ(checkBootHello(h, ch, id, 0), HelloVerdict::kRefuseBad);

  // Without a secret the proof is not checked, the ranges still are.
  UniqueIdData open = id;
  open.authenticated = false;
  h = hello(1, 4);
  memset(h.proof, 0, sizeof(h.proof));
  EXPECT_EQ(checkBootHello(h, ch, open, 0), HelloVerdict::kAccept);
  h.nranks = 0x7fffffff;
  EXPECT_EQ(checkBootHello(h, ch, open, 0), HelloVerdict::kRefuseBad);
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
  uint8_t ch[kNonceBytes];
  ASSERT_TRUE(readChallenge(r0, ch));
  BootHello h = makeHello(id.secret, ch, 0, 2, a.addr);
  ASSERT_TRUE(sendHello(r0, h));
  sleepMs(1400);  // 2.6 s after the start, 1.4 s after rank 0
  Socket r1 = dial(id.root);
  ASSERT_TRUE(readChallenge(r1, ch));
  h = makeHello(id.secret, ch, 1, 2, b.addr);
  ASSERT_TRUE(sendHello(r1, h));
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
  uint8_t ch[kNonceBytes];
  ASSERT_TRUE(readChallenge(r0, ch));
  BootHello h = makeHello(id.secret, ch, 0, 2, a.addr);
  ASSERT_TRUE(sendHello(r0, h));

  Clock::time_point t0 = Clock::now();
  Socket silent = dial(id.root);
  Socket truncated = dial(id.root);
  ASSERT_TRUE(readChallenge(truncated, ch));
  h = makeHello(id.secret, ch, 1, 2, trap.addr);
  ASSERT_TRUE(sendHello(truncated, h, 30));
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
  ASSERT_TRUE(readChallenge(r1, ch));
  h = makeHello(id.secret, ch, 1, 2, b.addr);
  ASSERT_TRUE(sendHello(r1, h));
  EXPECT_EQ(awaitReply(r0, 2, 5).code, 0);
  EXPECT_EQ(awaitReply(r1, 2, 5).code, 0);
}

TEST(BootRoot, ImpostorsAndDuplicatesNeverEnterTheTable) {
  UniqueIdData id = startRoot(true);
  uint8_t wrong[kSecretBytes];
  memcpy(wrong, id.secret, kSecretBytes);
  wrong[0] ^= 0xff;
  Trap a, b, trap;
  uint8_t ch[kNonceBytes];
  // Impostors come first, for both ranks, and are dropped without a code.
  for (int32_t r : {0, 1}) {
    Socket s = dial(id.root);
    ASSERT_TRUE(readChallenge(s, ch));
    BootHello h = makeHello(wrong, ch, r, 2, trap.addr);
    ASSERT_TRUE(sendHello(s, h));
    EXPECT_EQ(awaitReply(s, 2, 5).kind, Reply::kEof) << "impostor for rank " << r;
  }
  Socket r0 = dial(id.root);
  ASSERT_TRUE(readChallenge(r0, ch));
  BootHello h = makeHello(id.secret, ch, 0, 2, a.addr);
  ASSERT_TRUE(sendHello(r0, h));
  sleepMs(50);
  // A second, valid rank 0 is refused with code 2; the first one stays.
  Socket dup = dial(id.root);
  ASSERT_TRUE(readChallenge(dup, ch));
  h = makeHello(id.secret, ch, 0, 2, trap.addr);
  ASSERT_TRUE(sendHello(dup, h));
  Reply d = awaitReply(dup, 2, 5);
  EXPECT_EQ(d.kind, Reply::kCode);
  EXPECT_EQ(d.code, kBootRefuseDuplicate);
  // A valid hello for another size is refused with code 1.
  Socket mismatch = dial(id.root);
  ASSERT_TRUE(readChallenge(mismatch, ch));
  h = makeHello(id.secret, ch, 1, 3, trap.addr);
  ASSERT_TRUE(sendHello(mismatch, h));
  EXPECT_EQ(awaitReply(mismatch, 2, 5).code, kBootRefuseNranks);

  Socket r1 = dial(id.root);
  ASSERT_TRUE(readChallenge(r1, ch));
  h = makeHello(id.secret, ch, 1, 2, b.addr);
  ASSERT_TRUE(sendHello(r1, h));
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
  uint8_t ch[kNonceBytes];
  {
    Socket first = dial(id.root);
    ASSERT_TRUE(readChallenge(first, ch));
    BootHello h = makeHello(id.secret, ch, 0, 2, gone.addr);
    ASSERT_TRUE(sendHello(first, h));
    sleepMs(50);
  }
  sleepMs(300);
  Socket r0 = dial(id.root), r1 = dial(id.root);
  ASSERT_TRUE(readChallenge(r0, ch));
  BootHello h = makeHello(id.secret, ch, 0, 2, a.addr);
  ASSERT_TRUE(sendHello(r0, h));
  ASSERT_TRUE(readChallenge(r1, ch));
  h = makeHello(id.secret, ch, 1, 2, b.addr);
  ASSERT_TRUE(sendHello(r1, h));
  Reply x = awaitReply(r0, 2, 5);
  ASSERT_EQ(x.code, 0);
  ASSERT_EQ(x.table.size(), 2u);
  EXPECT_TRUE(sameAddr(x.table[0], a.addr));
  EXPECT_EQ(awaitReply(r1, 2, 5).code, 0);
}

// ---- A rank facing a misbehaving root ------------------------------------------------

// A one-connection fake root: sends `first`, reads the rank's hello frame
// (when `readHello`), then sends `then` and keeps the connection open until
// the rank hangs up (at most 5 s).
class FakeRoot {
 public:
  FakeRoot(std::vector<uint8_t> first, bool readHello, std::vector<uint8_t> then) {
    SockAddr a;
    EXPECT_TRUE(resolveAddress("127.0.0.1", 0, &a).ok());
    EXPECT_TRUE(Socket::listen(a, 4, &listener_).ok());
    EXPECT_TRUE(listener_.localAddr(&addr_).ok());
    thread_ = std::thread([this, first, readHello, then] {
      Socket s;
      if (!listener_.accept(&s, Deadline::after(5), nullptr).ok()) return;
      s.sendAll(first.data(), first.size(), Deadline::after(2), nullptr).ok();
      if (readHello) {
        uint8_t f[kFrameHeaderBytes + kHelloBytes];
        gotHello_ = s.recvAll(f, sizeof(f), Deadline::after(2), nullptr).ok();
      }
      if (!then.empty()) s.sendAll(then.data(), then.size(), Deadline::after(2), nullptr).ok();
      awaitClose(s, 5);
    });
  }
  ~FakeRoot() { thread_.join(); }
  UniqueIdData id() const {
    UniqueIdData d;
    d.root = addr_;
    d.authenticated = true;
    return d;
  }
  bool gotHello() const { return gotHello_; }

 private:
  Socket listener_;
  SockAddr addr_;
  std::atomic<bool> gotHello_{false};
  std::thread thread_;
};

std::vector<uint8_t> cat(std::vector<uint8_t> a, const std::vector<uint8_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::vector<uint8_t> validChallenge() {
  uint8_t nonce[kNonceBytes] = {1, 2, 3};
  auto c = challengeFrame(nonce);
  return {c.begin(), c.end()};
}

// Runs rank 0 of 2 against the fake root; returns the error and its latency.
Status rankAgainst(const FakeRoot& root, double* seconds) {
  std::unique_ptr<Bootstrap> b;
  std::atomic<bool> abortFlag{false};
  Clock::time_point t0 = Clock::now();
  Status s = Bootstrap::create(root.id(), 0, 2, 5, &abortFlag, &b);
  *seconds = secondsSince(t0);
  return s;
}

TEST(BootRank, MismatchedRootVersionFailsClearly) {
  const uint8_t challenge = static_cast<uint8_t>(FrameType::kChallenge);
  {
    FakeRoot root(cat(rawHeader(challenge, kNonceBytes, 3), std::vector<uint8_t>(16)), false, {});
    double sec = 0;
    Status s = rankAgainst(root, &sec);
    EXPECT_EQ(s.code(), tideRemoteError);
    EXPECT_NE(s.message().find("version 3, but this process speaks version 2"), std::string::npos)
        << s.message();
    EXPECT_NE(s.message().find("bootstrap root at 127.0.0.1:"), std::string::npos);
    EXPECT_LT(sec, 1.0);
  }
  {
    // A version-1 root: 8-byte magic and a nonce, no header.
    std::vector<uint8_t> v1 = {'t', 'o', 'o', 'B', 'e', 'd', 'i', 't'};
    v1.resize(24, 7);
    FakeRoot root(v1, false, {});
    double sec = 0;
    Status s = rankAgainst(root, &sec);
    EXPECT_NE(s.message().find("protocol version 1"), std::string::npos) << s.message();
    EXPECT_LT(sec, 1.0);
  }
}

TEST(BootRank, OversizedOrWrongReplyIsRefusedBeforeAllocation) {
  const uint8_t table = static_cast<uint8_t>(FrameType::kTable);
  auto ok = statusFrame(0);
  std::vector<uint8_t> status0(ok.begin(), ok.end());
  struct Case {
    std::vector<uint8_t> reply;
    const char* text;
  };
  std::vector<Case> cases = {
      {cat(status0, rawHeader(table, 0xFFFFFFFF)), "length 4294967295"},
      {cat(status0, rawHeader(table, 3 * kWireAddrBytes)), "length 60, but address table"},
      {cat(status0, rawHeader(static_cast<uint8_t>(FrameType::kChallenge), kNonceBytes)),
       "type 1 (challenge), expected address table"},
      {rawHeader(static_cast<uint8_t>(FrameType::kStatus), 0x7fffffff), "length 2147483647"},
      {cat(rawHeader(static_cast<uint8_t>(FrameType::kStatus), 4), {2, 0, 0, 0}), "duplicate rank"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    long before = vmRssKiB();
    FakeRoot root(validChallenge(), true, c.reply);
    double sec = 0;
    Status s = rankAgainst(root, &sec);
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find(c.text), std::string::npos) << s.message();
    EXPECT_TRUE(root.gotHello());
    EXPECT_LT(sec, 1.0) << "judged from the header, not after a timeout";
    EXPECT_LT(vmRssKiB() - before, 4 << 10);
  }
}

}  // namespace
}  // namespace tide
