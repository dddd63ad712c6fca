// Stripe arithmetic and the stripe header's wire form of the socket net.
#include <endian.h>

#include <algorithm>
#include <cstring>

#include "transports/socket/socket_net.h"

namespace tide {
namespace {

constexpr uint64_t kMinStripe = 64 << 10;
constexpr uint64_t kStripeAlign = 4096;
// A stripe's length travels in 32 bits (SocketStripeHeader::len).
constexpr uint64_t kMaxStripe = uint64_t{1} << 30;

}  // namespace

void socketStripes(uint64_t total, int nsocks, int* count, uint64_t* stripeBytes) {
  if (total <= kMaxStripe && (nsocks <= 1 || total < 2 * kMinStripe)) {
    *count = 1;
    *stripeBytes = total;
    return;
  }
  uint64_t n = std::min<uint64_t>(static_cast<uint64_t>(std::max(nsocks, 1)), total / kMinStripe);
  n = std::max(n, (total + kMaxStripe - 1) / kMaxStripe);  // more stripes than sockets
  uint64_t per = (total + n - 1) / n;
  per = (per + kStripeAlign - 1) / kStripeAlign * kStripeAlign;
  *count = static_cast<int>((total + per - 1) / per);
  *stripeBytes = per;
}

void encodeStripeHeader(const SocketStripeHeader& h, uint8_t* out) {
  uint32_t w32[2] = {htole32(h.magic), htole32(h.seq)};
  uint64_t w64[2] = {htole64(h.total), htole64(h.offset)};
  uint32_t t32[2] = {htole32(h.len), htole32(static_cast<uint32_t>(h.tag))};
  std::memcpy(out, w32, 8);
  std::memcpy(out + 8, w64, 16);
  std::memcpy(out + 24, t32, 8);
}

SocketStripeHeader decodeStripeHeader(const uint8_t* in) {
  uint32_t w32[2], t32[2];
  uint64_t w64[2];
  std::memcpy(w32, in, 8);
  std::memcpy(w64, in + 8, 16);
  std::memcpy(t32, in + 24, 8);
  return SocketStripeHeader{le32toh(w32[0]), le32toh(w32[1]),
                            le64toh(w64[0]), le64toh(w64[1]),
                            le32toh(t32[0]), static_cast<int32_t>(le32toh(t32[1]))};
}

}  // namespace tide
