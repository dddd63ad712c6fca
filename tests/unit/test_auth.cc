// SHA-256 against FIPS 180-4 examples, HMAC-SHA256 against RFC 4231, and the
// other helpers of core/auth.h.
#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "core/auth.h"

namespace tide {
namespace {

std::string hex(const uint8_t* p, size_t n) {
  static const char* kDigits = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s += kDigits[p[i] >> 4];
    s += kDigits[p[i] & 15];
  }
  return s;
}

std::string hex(const Digest& d) { return hex(d.data(), d.size()); }

std::string sha(const std::string& m) { return hex(sha256(m.data(), m.size())); }

std::string hmac(const std::string& key, const std::string& data) {
  return hex(hmacSha256(key.data(), key.size(), data.data(), data.size()));
}

TEST(Sha256, FipsExamples) {
  EXPECT_EQ(sha("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopq"
                "klmnopqrlmnopqrsmnopqrstnopqrstu"),
            "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  EXPECT_EQ(sha(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// Lengths around the padding boundaries (55/56 and 64 bytes per block).
TEST(Sha256, PaddingBoundaries) {
  struct Case {
    size_t len;
    const char* digest;
  };
  const Case cases[] = {
      {55, "e7313d333c272e639f790978283f9eb392e843d0f29b7016828bb1daa4aac70b"},
      {56, "4324d65f3c103567f5589c710bc08f8523f929a9272e3af36fc968e52abc6c27"},
      {63, "81c80242132f230c3bd41b3e63bbcff16107339549214a99614ff26664625055"},
      {64, "39e3d7b6b5d075d37d053ad89b24b41bef4f3c29760c84447cab3f3be1882241"},
      {65, "aacca6ff74fdbb296d165a45cecfa04e5127bc008770fbbdd48006f2d2fae95e"},
      {119, "9ce7368e4daf32341631b492e80359dc9f594b48453cd0dd5bf0b19279cc177e"},
      {120, "7836b787757e95e58b3ca5aec90b1b004e8deba1e50e9675af9cabf1a13a04b5"},
      {128, "d2742f1f4ac6bb7ca2b239ee18402ba8b3f9f8e652d2a72973c2b9ba11c08cf6"},
  };
  for (const Case& c : cases) {
    std::vector<uint8_t> m(c.len);
    for (size_t i = 0; i < c.len; ++i) m[i] = static_cast<uint8_t>(i * 7 + 3);
    EXPECT_EQ(hex(sha256(m.data(), m.size())), c.digest) << "length " << c.len;
  }
}

TEST(HmacSha256, Rfc4231) {
  EXPECT_EQ(hmac(std::string(20, '\x0b'), "Hi There"),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  EXPECT_EQ(hmac("Jefe", "what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_EQ(hmac(std::string(20, '\xaa'), std::string(50, '\xdd')),
            "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  std::string key4;
  for (int i = 1; i <= 25; ++i) key4 += static_cast<char>(i);
  EXPECT_EQ(hmac(key4, std::string(50, '\xcd')),
            "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
  // Test case 5 specifies only the first 128 bits.
  EXPECT_EQ(hmac(std::string(20, '\x0c'), "Test With Truncation").substr(0, 32),
            "a3b6167473100ee06e0c796c2955552b");
  EXPECT_EQ(
      hmac(std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First"),
      "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  EXPECT_EQ(hmac(std::string(131, '\xaa'),
                 "This is a test using a larger than block-size key and a larger than block-size "
                 "data. The key needs to be hashed before being used by the HMAC algorithm."),
            "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

TEST(Auth, ConstantTimeEqual) {
  uint8_t a[32], b[32];
  for (int i = 0; i < 32; ++i) a[i] = b[i] = static_cast<uint8_t>(i * 13);
  EXPECT_TRUE(constantTimeEqual(a, b, sizeof(a)));
  EXPECT_TRUE(constantTimeEqual(a, b, 0));
  for (int i = 0; i < 32; ++i) {
    b[i] ^= 0x80;
    EXPECT_FALSE(constantTimeEqual(a, b, sizeof(a))) << "byte " << i;
    b[i] ^= 0x80;
  }
  b[31] ^= 1;
  EXPECT_TRUE(constantTimeEqual(a, b, 31));
}

TEST(Auth, RandomBytesDoNotRepeat) {
  std::set<std::string> seen;
  for (int i = 0; i < 200; ++i) {
    uint8_t buf[kNonceBytes];
    ASSERT_TRUE(randomBytes(buf, sizeof(buf)).ok());
    EXPECT_TRUE(seen.insert(hex(buf, sizeof(buf))).second);
  }
  // Larger than one getrandom call may return; must fill every byte.
  std::vector<uint8_t> big(1 << 20, 0);
  ASSERT_TRUE(randomBytes(big.data(), big.size()).ok());
  size_t zeros = 0;
  for (uint8_t v : big) zeros += v == 0;
  EXPECT_LT(zeros, big.size() / 128);  // expected about 1/256
  EXPECT_TRUE(randomBytes(nullptr, 0).ok());
}

TEST(Auth, SecretFromString) {
  uint8_t s[kSecretBytes];
  secretFromString("abc", s);
  // First 16 bytes of SHA-256("abc").
  EXPECT_EQ(hex(s, sizeof(s)), "ba7816bf8f01cfea414140de5dae2223");
  uint8_t t[kSecretBytes];
  secretFromString("abd", t);
  EXPECT_FALSE(constantTimeEqual(s, t, kSecretBytes));
}

TEST(Auth, ConnectionProof) {
  uint8_t secret[kSecretBytes] = {};
  uint8_t nonce[kNonceBytes];
  for (int i = 0; i < 16; ++i) nonce[i] = static_cast<uint8_t>(i);
  // HMAC(secret, "tide-tcp-data" NUL || nonce || "ctx"), computed independently.
  EXPECT_EQ(hex(connectionProof(secret, "tide-tcp-data", nonce, "ctx", 3)),
            "5768f1ada56826759da6ebf8199b9bb7850caa4c5f3fd3a88ff4de6a2a34a4e2");
  Digest base = connectionProof(secret, "x", nonce, "ctx", 3);
  EXPECT_NE(base, connectionProof(secret, "y", nonce, "ctx", 3));
  EXPECT_NE(base, connectionProof(secret, "x", nonce, "ctX", 3));
  nonce[0] ^= 1;
  EXPECT_NE(base, connectionProof(secret, "x", nonce, "ctx", 3));
  nonce[0] ^= 1;
  secret[15] = 1;
  EXPECT_NE(base, connectionProof(secret, "x", nonce, "ctx", 3));
}

}  // namespace
}  // namespace tide
