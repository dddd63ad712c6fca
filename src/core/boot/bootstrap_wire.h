// Validation of the bootstrap root's handshake frames (internal to the root;
// declared here so unit tests can check it directly).
//
// The root reads exactly one hello frame per connection: it judges the header
// with parseFrameHeader as soon as its 16 bytes are in, then reads the fixed
// 60-byte payload and judges it with checkBootHello, before it keeps or
// allocates anything for the peer.
#pragma once

#include <cstdint>

#include "core/auth.h"
#include "core/boot/bootstrap.h"
#include "core/boot/bootstrap_frame.h"
#include "core/unique_id.h"

namespace tide {

// Refusal codes: the int32 of the status frame the root sends instead of 0
// before closing.
// bootstrap.cc prints 1 as "nranks mismatch", 2 as "duplicate rank", others
// as "bad rank".
constexpr int32_t kBootRefuseNranks = 1;
constexpr int32_t kBootRefuseDuplicate = 2;
constexpr int32_t kBootRefuseBadHello = 3;

enum class HelloVerdict {
  kAccept,        // well-formed and authentic; the caller still checks duplicates
  kDrop,          // not from this job (wrong proof): close without a code
  kRefuseNranks,  // authentic, but nranks differs from the communicator's
  kRefuseBad,     // authentic, but nranks or rank out of range, or no usable address
};

// Judges a received hello payload (its frame header already passed
// parseFrameHeader). `nonce` is the challenge sent on that connection;
// `expectNranks` is the communicator size once known, else 0. The proof is
// checked (in constant time, when id.authenticated) before any field that
// would earn a refusal code, so a peer without the secret learns nothing.
// Pure: no allocation, no logging; thread-safe.
HelloVerdict checkBootHello(const BootHello& h, const uint8_t nonce[kNonceBytes],
                            const UniqueIdData& id, int32_t expectNranks);

}  // namespace tide
