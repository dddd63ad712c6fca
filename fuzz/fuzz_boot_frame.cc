// libFuzzer target: the typed-frame layer every bootstrap message goes
// through (parseFrameHeader, describeFrameError, the payload codecs).
// Input: [expected type selector u8][limits nranks i32][limits blockBytes u32]
// then a stream of frames as a receiver would read them. Checks that a header
// is accepted only when every field is exactly right, that the receiver never
// needs more than the length the limits allow, that accepted frames re-encode
// byte for byte, and that error texts are always produced.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "core/boot/bootstrap_frame.h"

namespace {

[[noreturn]] void fail() { __builtin_trap(); }

uint32_t get32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tide;
  if (size < 9) return 0;
  FrameType expected = static_cast<FrameType>(1 + data[0] % 7);
  FrameLimits lim;
  lim.nranks = static_cast<int32_t>(get32(data + 1));
  lim.blockBytes = get32(data + 5);
  const uint8_t* p = data + 9;
  size_t left = size - 9;
  int64_t want = framePayloadLength(expected, lim);
  if (want > static_cast<int64_t>(kMaxBootRanks) * static_cast<int64_t>(kWireAddrBytes) &&
      want > static_cast<int64_t>(kMaxGatherFrame))
    fail();  // a limit no receiver may ever allocate for

  // Walk the stream frame by frame until the first bad header or the end.
  for (int frames = 0; left >= kFrameHeaderBytes && frames < 64; ++frames) {
    FrameHeader h;
    FrameError e = parseFrameHeader(p, expected, lim, &h);
    std::string text = describeFrameError(e, h, expected, lim);
    if (text.empty()) fail();
    FrameHeader d;
    decodeFrameHeader(p, &d);
    if (memcmp(&d, &h, sizeof(d)) != 0) fail();
    uint8_t again[kFrameHeaderBytes];
    encodeFrameHeader(h, again);
    if (memcmp(again, p, kFrameHeaderBytes) != 0) fail();  // the codec is a bijection
    if (e != FrameError::kOk) {
      if (e == FrameError::kLimits && want >= 0) fail();
      return 0;
    }
    if (want < 0 || h.length != want || h.magic != kFrameMagic || h.version != kBootVersion ||
        h.type != static_cast<uint8_t>(expected) || h.flags != 0 || h.reserved != 0)
      fail();
    p += kFrameHeaderBytes;
    left -= kFrameHeaderBytes;
    if (left < h.length) return 0;  // a receiver would wait for the rest, then time out
    if (expected == FrameType::kHello || expected == FrameType::kRingHello) {
      BootHello hello;
      decodeHello(p, &hello);
      uint8_t out[kHelloBytes];
      encodeHello(hello, out);
      if (memcmp(out, p, kHelloBytes) != 0) fail();
      auto f = helloFrame(hello, expected);
      if (memcmp(f.data(), p - kFrameHeaderBytes, f.size()) != 0) fail();
    } else if (expected == FrameType::kTable) {
      for (int32_t r = 0; r < lim.nranks; ++r) {
        WireAddr a;
        decodeWireAddr(p + static_cast<size_t>(r) * kWireAddrBytes, &a);
        uint8_t out[kWireAddrBytes];
        encodeWireAddr(a, out);
        if (memcmp(out, p + static_cast<size_t>(r) * kWireAddrBytes, kWireAddrBytes) != 0) fail();
      }
    } else if (expected == FrameType::kChallenge) {
      auto f = challengeFrame(p);
      if (memcmp(f.data(), p - kFrameHeaderBytes, f.size()) != 0) fail();
    } else if (expected == FrameType::kStatus) {
      auto f = statusFrame(static_cast<int32_t>(get32(p)));
      if (memcmp(f.data(), p - kFrameHeaderBytes, f.size()) != 0) fail();
    }
    p += h.length;
    left -= h.length;
  }
  return 0;
}
