// libFuzzer target: the bootstrap root's hello validation (checkBootHello),
// fed arbitrary bytes as the frame a stranger sends, judged against an
// authenticated and an open communicator of a size taken from the input.
// Also checks the verdict's invariants: without the secret nothing is
// accepted or refused with a code, and an accepted hello is in range.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/bootstrap_wire.h"

namespace {

[[noreturn]] void fail() { __builtin_trap(); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tide;
  BootHello h;
  memset(&h, 0, sizeof(h));
  memcpy(&h, data, size < sizeof(h) ? size : sizeof(h));
  int32_t expect = 0;
  if (size > sizeof(h))
    memcpy(&expect, data + sizeof(h), size - sizeof(h) < 4 ? size - sizeof(h) : 4);
  uint8_t nonce[kNonceBytes] = {};
  for (size_t i = 0; i < kNonceBytes; ++i) nonce[i] = static_cast<uint8_t>(i * 7 + 1);

  UniqueIdData open;
  open.authenticated = false;
  HelloVerdict v = checkBootHello(h, nonce, open, expect);
  if (v == HelloVerdict::kAccept) {
    if (h.nranks <= 0 || h.nranks > kMaxBootRanks || h.rank < 0 || h.rank >= h.nranks) fail();
    if (expect > 0 && h.nranks != expect) fail();
    if (h.listen.port == 0) fail();
  }

  UniqueIdData closed;
  closed.authenticated = true;
  for (size_t i = 0; i < kSecretBytes; ++i) closed.secret[i] = static_cast<uint8_t>(0xA5 ^ i);
  v = checkBootHello(h, nonce, closed, expect);
  // A random proof matching HMAC-SHA256 would be a finding of its own.
  if (v != HelloVerdict::kDrop) fail();
  return 0;
}
