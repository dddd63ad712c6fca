// Typed frames: the one envelope of every bootstrap message (root handshake,
// status/refusal, address table, ring handshake, allGather/barrier blocks).
//
// Byte layout (every integer little-endian, whatever the host):
//   frame  = header (16 bytes) || payload (header.length bytes)
//   header = magic u32 (kFrameMagic) | version u16 (kBootVersion) | type u8 |
//            flags u8 (0) | length u32 | reserved u32 (0)
// Each type's payload has an exact length the receiver knows before reading
// it (see framePayloadLength), so a receiver reads the 16 header bytes, judges
// them with parseFrameHeader and only then reads (or allocates for) the
// payload. Payload layouts:
//   kChallenge   nonce[16]
//   kHello       rank i32 | nranks i32 | listen WireAddr (20) | proof[32]
//   kRingHello   as kHello; listen is all zero
//   kStatus      code i32 (0: accepted, else a kBootRefuse* code)
//   kTable       nranks x WireAddr, rank order
//   kGather      one block of an allGather step (the size both sides agreed)
//   kBarrier     one byte
//   WireAddr     family u16 (AF_INET/AF_INET6) | port u16 | addr[16]
//
// Everything here except sendFrame/recvFrame is pure (no I/O, no logging, no
// allocation on the peer's say-so) and thread-safe; the fuzzers include it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/auth.h"
#include "core/boot/bootstrap.h"
#include "core/socket.h"
#include "core/status.h"

namespace tide {

constexpr uint32_t kFrameMagic = 0x66426454;  // bytes "TdBf"
constexpr size_t kFrameHeaderBytes = 16;
constexpr size_t kWireAddrBytes = 20;
constexpr size_t kHelloBytes = 8 + kWireAddrBytes + 32;
// Largest communicator the root serves; larger claims are refused.
constexpr int32_t kMaxBootRanks = 1 << 20;
// allGather blocks larger than this travel as several kGather frames.
constexpr uint32_t kMaxGatherFrame = 1u << 30;

enum class FrameType : uint8_t {
  kChallenge = 1,
  kHello = 2,
  kStatus = 3,
  kTable = 4,
  kRingHello = 5,
  kGather = 6,
  kBarrier = 7,
};

struct FrameHeader {
  uint32_t magic = kFrameMagic;
  uint16_t version = kBootVersion;
  uint8_t type = 0;
  uint8_t flags = 0;
  uint32_t length = 0;
  uint32_t reserved = 0;
};

// What the receiver already knows (and validated) that fixes the length of
// the variable-size types: kTable needs nranks in [1, kMaxBootRanks], kGather
// needs blockBytes in [1, kMaxGatherFrame].
struct FrameLimits {
  int32_t nranks = 0;
  uint32_t blockBytes = 0;
};

enum class FrameError {
  kOk,
  kMagic,     // not a Tide bootstrap frame
  kVersion,   // another protocol version
  kType,      // unknown type, or not the one expected here
  kReserved,  // flags or reserved bits set
  kLength,    // payload length differs from the type's exact length
  kLimits,    // the receiver's own limits are invalid for `expected` (a local bug)
};

// Exact payload length of `type` under `lim`, or -1 when `lim` does not
// determine it (out of range) or the type is unknown.
int64_t framePayloadLength(FrameType type, const FrameLimits& lim);
const char* frameTypeName(uint8_t type);

void encodeFrameHeader(const FrameHeader& h, uint8_t out[kFrameHeaderBytes]);
void decodeFrameHeader(const uint8_t in[kFrameHeaderBytes], FrameHeader* out);
// Decodes and judges a received header against the type the receiver waits
// for. Checks, in order: magic, version, type, flags/reserved, length. *out
// always receives the decoded fields (for the error text).
FrameError parseFrameHeader(const uint8_t in[kFrameHeaderBytes], FrameType expected,
                            const FrameLimits& lim, FrameHeader* out);
// Names the wrong field with the value received and the value wanted, e.g.
// "length 4294967295, but hello frames carry exactly 60 bytes".
std::string describeFrameError(FrameError e, const FrameHeader& got, FrameType expected,
                               const FrameLimits& lim);

void encodeWireAddr(const WireAddr& a, uint8_t out[kWireAddrBytes]);
void decodeWireAddr(const uint8_t in[kWireAddrBytes], WireAddr* out);

// Payload of kHello and kRingHello.
struct BootHello {
  int32_t rank = -1;
  int32_t nranks = 0;
  WireAddr listen;
  uint8_t proof[32] = {};
};
void encodeHello(const BootHello& h, uint8_t out[kHelloBytes]);
void decodeHello(const uint8_t in[kHelloBytes], BootHello* out);
// HMAC(secret, label || nonce || rank || nranks || listen), the fields in
// their wire encoding: a peer without the secret can alter none of them.
Digest helloProof(const uint8_t secret[kSecretBytes], const char* label,
                  const uint8_t nonce[kNonceBytes], const BootHello& h);

// Complete small frames, ready to send.
std::array<uint8_t, kFrameHeaderBytes + kNonceBytes> challengeFrame(
    const uint8_t nonce[kNonceBytes]);
std::array<uint8_t, kFrameHeaderBytes + kHelloBytes> helloFrame(const BootHello& h, FrameType type);
std::array<uint8_t, kFrameHeaderBytes + 4> statusFrame(int32_t code);

// Blocking frame I/O bounded by `deadline` and `abortFlag` (socket.h rules).
// sendFrame sends header and payload as one write. recvFrame reads a header,
// judges it, then reads exactly the payload into buf, whose size must be the
// type's exact length under `lim`. `from` names the peer in errors
// ("bootstrap root at 1.2.3.4:5", "rank 3"); a malformed frame is a
// tideRemoteError naming the wrong field.
Status sendFrame(const Socket& s, FrameType type, const void* payload, uint32_t len,
                 Deadline deadline, const std::atomic<bool>* abortFlag);
Status recvFrame(const Socket& s, FrameType type, const FrameLimits& lim, void* buf, size_t len,
                 Deadline deadline, const std::atomic<bool>* abortFlag, const std::string& from);

}  // namespace tide
