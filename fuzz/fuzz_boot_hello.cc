// libFuzzer target: the bootstrap root's judgement of what a stranger sends
// on a fresh connection: the hello frame's header (parseFrameHeader), then
// the payload (decodeHello, checkBootHello) against an authenticated and an
// open communicator. Input: the hello frame as received, then an optional
// int32 communicator size. Checks the verdict's invariants: without the
// secret nothing is accepted or refused with a code, and an accepted hello
// is in range.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/boot/bootstrap_frame.h"
#include "core/boot/bootstrap_wire.h"

namespace {

[[noreturn]] void fail() { __builtin_trap(); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tide;
  constexpr size_t kFrame = kFrameHeaderBytes + kHelloBytes;
  uint8_t frame[kFrame] = {};
  memcpy(frame, data, size < kFrame ? size : kFrame);
  int32_t expect = 0;
  if (size > kFrame) memcpy(&expect, data + kFrame, size - kFrame < 4 ? size - kFrame : 4);
  FrameHeader h;
  FrameError e = parseFrameHeader(frame, FrameType::kHello, {}, &h);
  if (describeFrameError(e, h, FrameType::kHello, {}).empty()) fail();
  if (e != FrameError::kOk) return 0;  // the root drops it before reading the payload
  if (size < kFrame) return 0;         // ... or at the handshake deadline
  BootHello hello;
  decodeHello(frame + kFrameHeaderBytes, &hello);
  uint8_t nonce[kNonceBytes] = {};
  for (size_t i = 0; i < kNonceBytes; ++i) nonce[i] = static_cast<uint8_t>(i * 7 + 1);

  UniqueIdData open;
  open.authenticated = false;
  HelloVerdict v = checkBootHello(hello, nonce, open, expect);
  if (v == HelloVerdict::kAccept) {
    if (hello.nranks <= 0 || hello.nranks > kMaxBootRanks || hello.rank < 0 ||
        hello.rank >= hello.nranks)
      fail();
    if (expect > 0 && hello.nranks != expect) fail();
    if (hello.listen.port == 0) fail();
    FrameLimits lim;  // the table the root would then build is within bounds
    lim.nranks = hello.nranks;
    if (framePayloadLength(FrameType::kTable, lim) < 0) fail();
  }

  UniqueIdData closed;
  closed.authenticated = true;
  for (size_t i = 0; i < kSecretBytes; ++i) closed.secret[i] = static_cast<uint8_t>(0xA5 ^ i);
  v = checkBootHello(hello, nonce, closed, expect);
  // A random proof matching HMAC-SHA256 would be a finding of its own.
  if (v != HelloVerdict::kDrop) fail();
  return 0;
}
