// Residual storage and the serialized two-point state (error_feedback.h).
#include "algorithms/compression/error_feedback.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

namespace tide::codec {
namespace {

constexpr uint32_t kMagic = 0x46454454u;  // "TDEF"
constexpr uint32_t kVersion = 1;
constexpr size_t kHeaderBytes = 32;
// Sizes above this cannot be a real state (and would overflow the byte count).
constexpr uint64_t kMaxElems = uint64_t{1} << 58;

struct Header {
  uint32_t magic;
  uint32_t version;
  uint64_t counter;
  uint64_t senderElems;
  uint64_t ownerElems;
};
static_assert(sizeof(Header) == kHeaderBytes, "the state header is 32 bytes");

}  // namespace

bool Residual::resize(size_t n) noexcept {
  try {
    r_.resize(n, 0.0f);
  } catch (...) {  // bad_alloc / length_error: the vector is unchanged
    return false;
  }
  return true;
}

void Residual::reset() noexcept { std::fill(r_.begin(), r_.end(), 0.0f); }

double Residual::norm() const noexcept {
  double s = 0;
  for (const float v : r_) s += static_cast<double>(v) * static_cast<double>(v);
  return std::sqrt(s);
}

void FeedbackState::reset() noexcept {
  sender.reset();
  owner.reset();
  counter = 0;
}

size_t FeedbackState::stateBytes() const noexcept {
  return kHeaderBytes + (sender.size() + owner.size()) * sizeof(float);
}

bool FeedbackState::save(void* buf, size_t bytes) const noexcept {
  if (buf == nullptr || bytes < stateBytes()) return false;
  const Header h = {kMagic, kVersion, counter, sender.size(), owner.size()};
  auto* p = static_cast<unsigned char*>(buf);
  std::memcpy(p, &h, sizeof(h));
  p += sizeof(h);
  if (sender.size() != 0) std::memcpy(p, sender.data(), sender.size() * sizeof(float));
  p += sender.size() * sizeof(float);
  if (owner.size() != 0) std::memcpy(p, owner.data(), owner.size() * sizeof(float));
  return true;
}

bool FeedbackState::load(const void* buf, size_t bytes) noexcept {
  if (buf == nullptr || bytes < kHeaderBytes) return false;
  Header h;
  std::memcpy(&h, buf, sizeof(h));
  if (h.magic != kMagic || h.version != kVersion) return false;
  if (h.senderElems > kMaxElems || h.ownerElems > kMaxElems) return false;
  if (bytes != kHeaderBytes + (h.senderElems + h.ownerElems) * sizeof(float)) return false;
  Residual s;
  Residual o;
  if (!s.resize(h.senderElems) || !o.resize(h.ownerElems)) return false;
  const auto* p = static_cast<const unsigned char*>(buf) + kHeaderBytes;
  if (s.size() != 0) std::memcpy(s.data(), p, s.size() * sizeof(float));
  p += s.size() * sizeof(float);
  if (o.size() != 0) std::memcpy(o.data(), p, o.size() * sizeof(float));
  sender = std::move(s);
  owner = std::move(o);
  counter = h.counter;
  return true;
}

}  // namespace tide::codec
