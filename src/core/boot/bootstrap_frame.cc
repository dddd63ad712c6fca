// Typed bootstrap frames: encoding, header validation and blocking frame I/O.
#include "core/boot/bootstrap_frame.h"

#include <cstdio>
#include <cstring>
#include <vector>

namespace tide {

namespace {

void put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
void put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint16_t get16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t get32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}

// First 4 bytes (little-endian) of every version-1 message: "tideBoot".
constexpr uint32_t kV1Magic = 0x426f6f74;

}  // namespace

int64_t framePayloadLength(FrameType type, const FrameLimits& lim) {
  switch (type) {
    case FrameType::kChallenge:
      return kNonceBytes;
    case FrameType::kHello:
    case FrameType::kRingHello:
      return kHelloBytes;
    case FrameType::kStatus:
      return 4;
    case FrameType::kTable:
      if (lim.nranks < 1 || lim.nranks > kMaxBootRanks) return -1;
      return static_cast<int64_t>(lim.nranks) * kWireAddrBytes;
    case FrameType::kGather:
      if (lim.blockBytes < 1 || lim.blockBytes > kMaxGatherFrame) return -1;
      return lim.blockBytes;
    case FrameType::kBarrier:
      return 1;
  }
  return -1;
}

const char* frameTypeName(uint8_t type) {
  switch (static_cast<FrameType>(type)) {
    case FrameType::kChallenge:
      return "challenge";
    case FrameType::kHello:
      return "hello";
    case FrameType::kStatus:
      return "status";
    case FrameType::kTable:
      return "address table";
    case FrameType::kRingHello:
      return "ring hello";
    case FrameType::kGather:
      return "allGather block";
    case FrameType::kBarrier:
      return "barrier";
  }
  return "unknown";
}

void encodeFrameHeader(const FrameHeader& h, uint8_t out[kFrameHeaderBytes]) {
  put32(out, h.magic);
  put16(out + 4, h.version);
  out[6] = h.type;
  out[7] = h.flags;
  put32(out + 8, h.length);
  put32(out + 12, h.reserved);
}

void decodeFrameHeader(const uint8_t in[kFrameHeaderBytes], FrameHeader* out) {
  out->magic = get32(in);
  out->version = get16(in + 4);
  out->type = in[6];
  out->flags = in[7];
  out->length = get32(in + 8);
  out->reserved = get32(in + 12);
}

FrameError parseFrameHeader(const uint8_t in[kFrameHeaderBytes], FrameType expected,
                            const FrameLimits& lim, FrameHeader* out) {
  decodeFrameHeader(in, out);
  if (out->magic != kFrameMagic) return FrameError::kMagic;
  if (out->version != kBootVersion) return FrameError::kVersion;
  if (out->type != static_cast<uint8_t>(expected)) return FrameError::kType;
  if (out->flags != 0 || out->reserved != 0) return FrameError::kReserved;
  int64_t want = framePayloadLength(expected, lim);
  if (want < 0) return FrameError::kLimits;
  if (out->length != want) return FrameError::kLength;
  return FrameError::kOk;
}

std::string describeFrameError(FrameError e, const FrameHeader& got, FrameType expected,
                               const FrameLimits& lim) {
  char buf[160];
  const char* want = frameTypeName(static_cast<uint8_t>(expected));
  switch (e) {
    case FrameError::kOk:
      snprintf(buf, sizeof(buf), "valid %s frame", want);
      break;
    case FrameError::kMagic:
      if (got.magic == kV1Magic) {
        snprintf(buf, sizeof(buf),
                 "bootstrap protocol version 1 (no frame header), but this process speaks "
                 "version %u (mixed Tide builds in one job?)",
                 static_cast<unsigned>(kBootVersion));
        break;
      }
      snprintf(buf, sizeof(buf), "magic 0x%08x, not a Tide bootstrap frame (0x%08x)", got.magic,
               kFrameMagic);
      break;
    case FrameError::kVersion:
      snprintf(buf, sizeof(buf),
               "bootstrap protocol version %u, but this process speaks version %u (mixed Tide "
               "builds in one job?)",
               got.version, static_cast<unsigned>(kBootVersion));
      break;
    case FrameError::kType:
      snprintf(buf, sizeof(buf), "frame type %u (%s), expected %s", got.type,
               frameTypeName(got.type), want);
      break;
    case FrameError::kReserved:
      snprintf(buf, sizeof(buf), "flags 0x%02x / reserved 0x%08x set in a %s frame (must be 0)",
               got.flags, got.reserved, want);
      break;
    case FrameError::kLength:
      snprintf(buf, sizeof(buf), "length %u, but %s frames carry exactly %lld bytes here",
               got.length, want, static_cast<long long>(framePayloadLength(expected, lim)));
      break;
    case FrameError::kLimits:
      snprintf(buf, sizeof(buf), "no valid length for a %s frame (nranks %d, block %u bytes)", want,
               lim.nranks, lim.blockBytes);
      break;
  }
  return buf;
}

void encodeWireAddr(const WireAddr& a, uint8_t out[kWireAddrBytes]) {
  put16(out, a.family);
  put16(out + 2, a.port);
  memcpy(out + 4, a.addr, sizeof(a.addr));
}

void decodeWireAddr(const uint8_t in[kWireAddrBytes], WireAddr* out) {
  out->family = get16(in);
  out->port = get16(in + 2);
  memcpy(out->addr, in + 4, sizeof(out->addr));
}

void encodeHello(const BootHello& h, uint8_t out[kHelloBytes]) {
  put32(out, static_cast<uint32_t>(h.rank));
  put32(out + 4, static_cast<uint32_t>(h.nranks));
  encodeWireAddr(h.listen, out + 8);
  memcpy(out + 8 + kWireAddrBytes, h.proof, sizeof(h.proof));
}

void decodeHello(const uint8_t in[kHelloBytes], BootHello* out) {
  out->rank = static_cast<int32_t>(get32(in));
  out->nranks = static_cast<int32_t>(get32(in + 4));
  decodeWireAddr(in + 8, &out->listen);
  memcpy(out->proof, in + 8 + kWireAddrBytes, sizeof(out->proof));
}

Digest helloProof(const uint8_t secret[kSecretBytes], const char* label,
                  const uint8_t nonce[kNonceBytes], const BootHello& h) {
  uint8_t ctx[8 + kWireAddrBytes];
  put32(ctx, static_cast<uint32_t>(h.rank));
  put32(ctx + 4, static_cast<uint32_t>(h.nranks));
  encodeWireAddr(h.listen, ctx + 8);
  return connectionProof(secret, label, nonce, ctx, sizeof(ctx));
}

namespace {

void putHeader(FrameType type, uint32_t len, uint8_t* out) {
  FrameHeader h;
  h.type = static_cast<uint8_t>(type);
  h.length = len;
  encodeFrameHeader(h, out);
}

}  // namespace

std::array<uint8_t, kFrameHeaderBytes + kNonceBytes> challengeFrame(
    const uint8_t nonce[kNonceBytes]) {
  std::array<uint8_t, kFrameHeaderBytes + kNonceBytes> f;
  putHeader(FrameType::kChallenge, kNonceBytes, f.data());
  memcpy(f.data() + kFrameHeaderBytes, nonce, kNonceBytes);
  return f;
}

std::array<uint8_t, kFrameHeaderBytes + kHelloBytes> helloFrame(const BootHello& h,
                                                                FrameType type) {
  std::array<uint8_t, kFrameHeaderBytes + kHelloBytes> f;
  putHeader(type, kHelloBytes, f.data());
  encodeHello(h, f.data() + kFrameHeaderBytes);
  return f;
}

std::array<uint8_t, kFrameHeaderBytes + 4> statusFrame(int32_t code) {
  std::array<uint8_t, kFrameHeaderBytes + 4> f;
  putHeader(FrameType::kStatus, 4, f.data());
  put32(f.data() + kFrameHeaderBytes, static_cast<uint32_t>(code));
  return f;
}

Status sendFrame(const Socket& s, FrameType type, const void* payload, uint32_t len,
                 Deadline deadline, const std::atomic<bool>* abortFlag) {
  std::vector<uint8_t> f(kFrameHeaderBytes + len);
  putHeader(type, len, f.data());
  if (len > 0) memcpy(f.data() + kFrameHeaderBytes, payload, len);
  return s.sendAll(f.data(), f.size(), deadline, abortFlag);
}

Status recvFrame(const Socket& s, FrameType type, const FrameLimits& lim, void* buf, size_t len,
                 Deadline deadline, const std::atomic<bool>* abortFlag, const std::string& from) {
  if (framePayloadLength(type, lim) != static_cast<int64_t>(len))
    return internalError("bootstrap: receive buffer of %zu bytes for a %s frame", len,
                         frameTypeName(static_cast<uint8_t>(type)));
  uint8_t raw[kFrameHeaderBytes];
  TIDE_TRY(s.recvAll(raw, sizeof(raw), deadline, abortFlag));
  FrameHeader h;
  FrameError e = parseFrameHeader(raw, type, lim, &h);
  if (e != FrameError::kOk)
    return remoteError("bootstrap: bad %s frame from %s: %s",
                       frameTypeName(static_cast<uint8_t>(type)), from.c_str(),
                       describeFrameError(e, h, type, lim).c_str());
  return s.recvAll(buf, len, deadline, abortFlag);
}

}  // namespace tide
