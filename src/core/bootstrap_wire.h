// Validation of the bootstrap root's handshake frames (internal to the root;
// declared here so unit tests can check it directly).
//
// The root reads exactly one fixed-size BootHello per connection and judges it
// with checkBootHello before it keeps or allocates anything for the peer.
#pragma once

#include <cstdint>

#include "core/auth.h"
#include "core/bootstrap.h"
#include "core/unique_id.h"

namespace tide {

// Largest communicator the root serves; larger claims are refused.
constexpr int32_t kMaxBootRanks = 1 << 20;

// Refusal codes: the int32 the root sends instead of 0 before closing.
// bootstrap.cc prints 1 as "nranks mismatch", 2 as "duplicate rank", others
// as "bad rank".
constexpr int32_t kBootRefuseNranks = 1;
constexpr int32_t kBootRefuseDuplicate = 2;
constexpr int32_t kBootRefuseBadHello = 3;

enum class HelloVerdict {
  kAccept,        // well-formed and authentic; the caller still checks duplicates
  kDrop,          // not from this job (magic, version or proof): close without a code
  kRefuseNranks,  // authentic, but nranks differs from the communicator's
  kRefuseBad,     // authentic, but nranks or rank out of range, or no usable address
};

// Judges a received hello. `nonce` is the challenge sent on that connection;
// `expectNranks` is the communicator size once known, else 0. The proof is
// checked (in constant time, when id.authenticated) before any field that
// would earn a refusal code, so a peer without the secret learns nothing.
// Pure: no allocation, no logging; thread-safe.
HelloVerdict checkBootHello(const BootHello& h, const uint8_t nonce[kNonceBytes],
                            const UniqueIdData& id, int32_t expectNranks);

}  // namespace tide
