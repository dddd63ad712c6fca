// Memory layout of the small-collective lane's shared segment
// (transports/shm/lane.cc). Shared by every rank of one communicator on one
// node; all offsets are from the segment start.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "core/transport.h"

namespace tide::shm {

constexpr uint64_t kLaneMagic = 0x31656e616c656469ULL;  // "idelane1"
constexpr size_t kLaneLine = 64;

struct LaneSegHeader {
  uint64_t magic;  // written last by the creator
  uint64_t commHash;
  uint64_t maxBytes;
  int32_t nranks;
  int32_t pad;
};

// One published contribution. The data follows the header directly, in the
// same cache line, so small contributions move with the sequence word.
// Written only by the slot's rank; `seq` (the call number) is stored last,
// with release order, and read with acquire order.
struct SlotHead {
  std::atomic<uint64_t> seq;
  uint32_t tag;  // operation tag of the call
  uint32_t pad;
  uint64_t bytes;  // contribution size
  char* data() { return reinterpret_cast<char*>(this + 1); }
  const char* data() const { return reinterpret_cast<const char*>(this + 1); }
};
static_assert(sizeof(SlotHead) == 24, "the data must start in the sequence word's line");

// Per rank: one line for its Doorbell, then two slots (call parity).
class LaneLayout {
 public:
  LaneLayout(int nranks, size_t maxBytes)
      : nranks_(static_cast<size_t>(nranks)),
        slotStride_(roundUp(sizeof(SlotHead) + maxBytes, kLaneLine)),
        rankStride_(roundUp(kLaneLine + 2 * slotStride_, 4096)) {}
  size_t bellOffset(int rank) const { return kFirst + rankStride_ * static_cast<size_t>(rank); }
  size_t slotOffset(int rank, int parity) const {
    return bellOffset(rank) + kLaneLine + slotStride_ * static_cast<size_t>(parity);
  }
  size_t totalBytes() const { return kFirst + rankStride_ * nranks_; }

 private:
  static constexpr size_t kFirst = 4096;  // the header's page
  static size_t roundUp(size_t v, size_t a) { return (v + a - 1) / a * a; }
  size_t nranks_;
  size_t slotStride_;
  size_t rankStride_;
};

static_assert(sizeof(Doorbell) <= kLaneLine, "a Doorbell must fit its line");

}  // namespace tide::shm
