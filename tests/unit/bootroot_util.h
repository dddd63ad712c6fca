// Raw-TCP clients of the bootstrap root, shared by test_bootroot.cc and
// test_bootjunk.cc: they speak the typed frames of core/boot/bootstrap_frame.h by
// hand so tests can send anything, valid or not. Every wait is bounded.
#pragma once

#include <gtest/gtest.h>
#include <poll.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap_util.h"
#include "core/auth.h"
#include "core/boot/bootstrap.h"
#include "core/boot/bootstrap_frame.h"
#include "core/boot/bootstrap_wire.h"
#include "core/socket.h"
#include "core/unique_id.h"

namespace tide {
namespace bootroot {

using Clock = std::chrono::steady_clock;

inline double secondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

inline void sleepMs(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

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

inline Socket dial(const SockAddr& root) {
  Socket s;
  EXPECT_TRUE(Socket::connect(root, Deadline::after(5), nullptr, &s).ok());
  return s;
}

// A frame header with any field values, encoded as on the wire.
inline std::vector<uint8_t> rawHeader(uint8_t type, uint32_t length,
                                      uint16_t version = kBootVersion, uint32_t magic = kFrameMagic,
                                      uint8_t flags = 0) {
  FrameHeader h;
  h.magic = magic;
  h.version = version;
  h.type = type;
  h.flags = flags;
  h.length = length;
  std::vector<uint8_t> v(kFrameHeaderBytes);
  encodeFrameHeader(h, v.data());
  return v;
}

// Reads the root's challenge frame; false when it is missing or malformed.
inline bool readChallenge(const Socket& s, uint8_t nonce[kNonceBytes]) {
  return recvFrame(s, FrameType::kChallenge, {}, nonce, kNonceBytes, Deadline::after(5), nullptr,
                   "root")
      .ok();
}

inline BootHello makeHello(const uint8_t secret[kSecretBytes], const uint8_t nonce[kNonceBytes],
                           int32_t rank, int32_t nranks, const WireAddr& listen) {
  BootHello h;
  h.rank = rank;
  h.nranks = nranks;
  h.listen = listen;
  Digest p = helloProof(secret, "tide-bootstrap-root", nonce, h);
  memcpy(h.proof, p.data(), p.size());
  return h;
}

// Sends the first `bytes` bytes (default: all) of h's hello frame.
inline bool sendHello(const Socket& s, const BootHello& h, size_t bytes = 0) {
  auto f = helloFrame(h, FrameType::kHello);
  return s.sendAll(f.data(), bytes ? bytes : f.size(), Deadline::after(2), nullptr).ok();
}

// What the root answered after a hello.
struct Reply {
  enum Kind { kTimeout, kEof, kCode } kind = kTimeout;
  int32_t code = -1;
  std::vector<WireAddr> table;  // when code == 0
};

inline Reply awaitReply(const Socket& s, int nranks, double maxSec,
                        const std::atomic<bool>* stop = nullptr) {
  Reply r;
  Deadline d = Deadline::after(maxSec);
  for (;;) {
    if (d.expired() || (stop && stop->load())) return r;
    pollfd p{s.fd(), POLLIN, 0};
    if (poll(&p, 1, d.remainingMs(50)) > 0) break;
  }
  uint8_t code[4];
  if (!recvFrame(s, FrameType::kStatus, {}, code, 4, Deadline::after(2), nullptr, "root").ok()) {
    r.kind = Reply::kEof;
    return r;
  }
  r.kind = Reply::kCode;
  r.code = static_cast<int32_t>(code[0] | (code[1] << 8) | (code[2] << 16) |
                                (static_cast<uint32_t>(code[3]) << 24));
  if (r.code == 0 && nranks > 0 && nranks <= 1024) {
    std::vector<uint8_t> raw(nranks * kWireAddrBytes);
    FrameLimits lim;
    lim.nranks = nranks;
    if (recvFrame(s, FrameType::kTable, lim, raw.data(), raw.size(), Deadline::after(2), nullptr,
                  "root")
            .ok()) {
      r.table.resize(nranks);
      for (int i = 0; i < nranks; ++i) decodeWireAddr(raw.data() + i * kWireAddrBytes, &r.table[i]);
    }
  }
  return r;
}

// Seconds until the root closed `s` (without reading what it sent), or -1.
inline double awaitClose(const Socket& s, double maxSec, const std::atomic<bool>* stop = nullptr) {
  Clock::time_point t0 = Clock::now();
  Deadline d = Deadline::after(maxSec);
  while (!d.expired() && !(stop && stop->load())) {
    pollfd p{s.fd(), POLLRDHUP, 0};
    if (poll(&p, 1, d.remainingMs(50)) > 0) return secondsSince(t0);
  }
  return -1;
}

// A real rank: Bootstrap::create, then an allGather that checks every block.
inline bool realRank(const UniqueIdData& id, int rank, int n) {
  std::unique_ptr<Bootstrap> b;
  std::atomic<bool> abortFlag{false};
  if (!Bootstrap::create(id, rank, n, 20, &abortFlag, &b).ok()) return false;
  std::vector<int32_t> all(n, -1);
  all[rank] = 7 * rank + 1;
  if (!b->allGather(all.data(), sizeof(int32_t)).ok()) return false;
  for (int q = 0; q < n; ++q)
    if (all[q] != 7 * q + 1) return false;
  return b->barrier().ok();
}

inline bool sameAddr(const WireAddr& a, const WireAddr& b) {
  return memcmp(&a, &b, sizeof(a)) == 0;
}

inline long vmRssKiB() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return atol(line.c_str() + 6);
  return -1;
}

}  // namespace bootroot
}  // namespace tide
