// SHA-256 (FIPS 180-4), HMAC-SHA256 (RFC 2104) and the helpers of core/auth.h.
//
// All functions are thread-safe and allocation-free except secretFromString
// (which only reads its argument). Nothing here logs key material.
#include "core/auth.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace tide {
namespace {

// First 32 bits of the fractional parts of the cube roots of the first 64
// primes (FIPS 180-4, section 4.2.2).
constexpr uint32_t kRound[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

// First 32 bits of the fractional parts of the square roots of the first 8
// primes (FIPS 180-4, section 5.3.3).
constexpr uint32_t kInitial[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                  0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};

constexpr size_t kBlockBytes = 64;

inline uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

inline uint32_t loadBe32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

inline void storeBe32(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v >> 24);
  p[1] = static_cast<uint8_t>(v >> 16);
  p[2] = static_cast<uint8_t>(v >> 8);
  p[3] = static_cast<uint8_t>(v);
}

// Incremental SHA-256: update() any number of times, then finish() once.
class Sha256 {
 public:
  Sha256() { std::memcpy(h_, kInitial, sizeof(h_)); }

  void update(const void* data, size_t len) {
    const uint8_t* p = static_cast<const uint8_t*>(data);
    total_ += len;
    if (fill_ > 0) {
      size_t take = std::min(len, kBlockBytes - fill_);
      std::memcpy(block_ + fill_, p, take);
      fill_ += take;
      p += take;
      len -= take;
      if (fill_ < kBlockBytes) return;
      compress(block_);
      fill_ = 0;
    }
    for (; len >= kBlockBytes; p += kBlockBytes, len -= kBlockBytes) compress(p);
    if (len > 0) {
      std::memcpy(block_, p, len);
      fill_ = len;
    }
  }

  Digest finish() {
    // Padding (section 5.1.1): a 1 bit, zeros, then the bit length in 64 bits.
    uint64_t bits = total_ * 8;
    block_[fill_++] = 0x80;
    if (fill_ > kBlockBytes - 8) {
      std::memset(block_ + fill_, 0, kBlockBytes - fill_);
      compress(block_);
      fill_ = 0;
    }
    std::memset(block_ + fill_, 0, kBlockBytes - 8 - fill_);
    storeBe32(block_ + 56, static_cast<uint32_t>(bits >> 32));
    storeBe32(block_ + 60, static_cast<uint32_t>(bits));
    compress(block_);
    Digest out;
    for (int i = 0; i < 8; ++i) storeBe32(out.data() + 4 * i, h_[i]);
    std::memset(block_, 0, sizeof(block_));
    return out;
  }

 private:
  // One application of the compression function (section 6.2.2).
  void compress(const uint8_t* blk) {
    uint32_t w[64];
    for (int t = 0; t < 16; ++t) w[t] = loadBe32(blk + 4 * t);
    for (int t = 16; t < 64; ++t) {
      uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
      uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
      w[t] = s1 + w[t - 7] + s0 + w[t - 16];
    }
    uint32_t a = h_[0], b = h_[1], c = h_[2], d = h_[3];
    uint32_t e = h_[4], f = h_[5], g = h_[6], h = h_[7];
    for (int t = 0; t < 64; ++t) {
      uint32_t big1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
      uint32_t ch = (e & f) ^ (~e & g);
      uint32_t t1 = h + big1 + ch + kRound[t] + w[t];
      uint32_t big0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
      uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
      uint32_t t2 = big0 + maj;
      h = g;
      g = f;
      f = e;
      e = d + t1;
      d = c;
      c = b;
      b = a;
      a = t1 + t2;
    }
    h_[0] += a;
    h_[1] += b;
    h_[2] += c;
    h_[3] += d;
    h_[4] += e;
    h_[5] += f;
    h_[6] += g;
    h_[7] += h;
  }

  uint32_t h_[8];
  uint8_t block_[kBlockBytes] = {};
  size_t fill_ = 0;
  uint64_t total_ = 0;
};

// Incremental HMAC-SHA256 (RFC 2104 with B = 64, L = 32).
class HmacSha256 {
 public:
  HmacSha256(const void* key, size_t keyLen) {
    uint8_t k[kBlockBytes] = {};
    if (keyLen > kBlockBytes) {
      Digest kd = sha256(key, keyLen);
      std::memcpy(k, kd.data(), kd.size());
    } else if (keyLen > 0) {
      std::memcpy(k, key, keyLen);
    }
    uint8_t pad[kBlockBytes];
    for (size_t i = 0; i < kBlockBytes; ++i) pad[i] = k[i] ^ 0x36;
    inner_.update(pad, kBlockBytes);
    for (size_t i = 0; i < kBlockBytes; ++i) pad[i] = k[i] ^ 0x5c;
    outer_.update(pad, kBlockBytes);
    // Do not leave key material on the stack.
    volatile uint8_t* vk = k;
    volatile uint8_t* vp = pad;
    for (size_t i = 0; i < kBlockBytes; ++i) {
      vk[i] = 0;
      vp[i] = 0;
    }
  }

  void update(const void* data, size_t len) { inner_.update(data, len); }

  Digest finish() {
    Digest in = inner_.finish();
    outer_.update(in.data(), in.size());
    return outer_.finish();
  }

 private:
  Sha256 inner_;
  Sha256 outer_;
};

// Reads n bytes from /dev/urandom (fallback when getrandom is unavailable).
Status urandomBytes(uint8_t* p, size_t n) {
  int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errnoError(errno, "cannot open /dev/urandom");
  while (n > 0) {
    ssize_t r = ::read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      int err = r < 0 ? errno : EIO;
      ::close(fd);
      return errnoError(err, "cannot read /dev/urandom");
    }
    p += r;
    n -= static_cast<size_t>(r);
  }
  ::close(fd);
  return Status::Ok();
}

}  // namespace

Digest sha256(const void* data, size_t len) {
  Sha256 s;
  s.update(data, len);
  return s.finish();
}

Digest hmacSha256(const void* key, size_t keyLen, const void* data, size_t len) {
  HmacSha256 m(key, keyLen);
  m.update(data, len);
  return m.finish();
}

bool constantTimeEqual(const void* a, const void* b, size_t n) {
  // Touches every byte regardless of where the first difference is.
  const volatile uint8_t* pa = static_cast<const volatile uint8_t*>(a);
  const volatile uint8_t* pb = static_cast<const volatile uint8_t*>(b);
  uint8_t diff = 0;
  for (size_t i = 0; i < n; ++i) diff |= static_cast<uint8_t>(pa[i] ^ pb[i]);
  return diff == 0;
}

Status randomBytes(void* buf, size_t n) {
  uint8_t* p = static_cast<uint8_t*>(buf);
  while (n > 0) {
    // Blocks only until the kernel pool is initialized (early boot).
    ssize_t r = ::getrandom(p, n, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno == ENOSYS) return urandomBytes(p, n);
      return errnoError(errno, "getrandom failed");
    }
    p += r;
    n -= static_cast<size_t>(r);
  }
  return Status::Ok();
}

void secretFromString(const std::string& text, uint8_t out[kSecretBytes]) {
  Digest d = sha256(text.data(), text.size());
  std::memcpy(out, d.data(), kSecretBytes);
}

Digest connectionProof(const uint8_t secret[kSecretBytes], const char* label,
                       const uint8_t nonce[kNonceBytes], const void* context, size_t contextLen) {
  // The label's terminating NUL is hashed too, so label and nonce cannot be
  // shifted against each other.
  HmacSha256 m(secret, kSecretBytes);
  m.update(label, std::strlen(label) + 1);
  m.update(nonce, kNonceBytes);
  if (contextLen > 0) m.update(context, contextLen);
  return m.finish();
}

}  // namespace tide
