// Keyed authentication for bootstrap and data connections.
//
// Challenge-response: the acceptor sends a random nonce; the connector answers
// HMAC-SHA256(secret, label || nonce || payload); the acceptor compares in
// constant time. The secret is never sent and never logged.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/status.h"

namespace tide {

using Digest = std::array<uint8_t, 32>;
constexpr size_t kSecretBytes = 16;
constexpr size_t kNonceBytes = 16;

Digest sha256(const void* data, size_t len);
Digest hmacSha256(const void* key, size_t keyLen, const void* data, size_t len);
// Constant-time equality of two byte strings of length n.
bool constantTimeEqual(const void* a, const void* b, size_t n);
// Fills buf from the OS random source (getrandom).
Status randomBytes(void* buf, size_t n);
// 16-byte secret derived from an arbitrary string (SHA-256, truncated).
void secretFromString(const std::string& text, uint8_t out[kSecretBytes]);

// Proof for a connection: HMAC(secret, label || nonce || context).
Digest connectionProof(const uint8_t secret[kSecretBytes], const char* label,
                       const uint8_t nonce[kNonceBytes], const void* context, size_t contextLen);

}  // namespace tide
