// The CPU node that the device collective engine's logic tests
// (test_device_coll_logic.cc: All-Reduce; test_device_coll_kinds.cc:
// AllGather, ReduceScatter, Broadcast and a mix) run the kernels' step
// functions on (src/cuda/device_coll_logic.h): every rank's scratch in host
// memory, one "thread" per part, the host reduction kernels for the element
// math, and the bit-for-bit comparison of results.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "../gpu/nan_elem.h"
#include "core/kernels.h"
#include "core/types.h"
#include "cuda/device_coll_logic.h"
#include "device_logic_host.h"

namespace tide::cuda::dc::hostnode {

// One part of one rank on the CPU: a single "thread" per block.
struct HostPlatform : testhost::HostWaits {
  ReduceFn fn;
  int elemSize;
  std::vector<uint8_t>* tmp;

  uint64_t exitAdd(uint64_t* w) const {
    return std::atomic_ref<uint64_t>(*w).fetch_add(1, std::memory_order_acq_rel);
  }
  void reduce(char* out, char* out2, char* const* ins, int n, Range r) const {
    const size_t len = r.hi - r.lo;
    const size_t off = r.lo * elemSize;
    if (len == 0) return;  // empty slice: buffers may be null
    tmp->resize(len * elemSize);
    memcpy(tmp->data(), ins[0] + off, len * elemSize);
    for (int k = 1; k < n; ++k) fn(tmp->data(), tmp->data(), ins[k] + off, len);
    memcpy(out + off, tmp->data(), len * elemSize);
    if (out2 != nullptr) memcpy(out2 + off, tmp->data(), len * elemSize);
  }
  void copy(char* dst, const char* src, Range r) const {
    if (r.hi == r.lo) return;
    memcpy(dst + r.lo * elemSize, src + r.lo * elemSize, (r.hi - r.lo) * elemSize);
  }
};

// The node: every rank's scratch (flag area + two input areas) in host memory.
struct Node {
  int n;
  size_t areaBytes;
  std::vector<std::vector<uint64_t>> scratch;  // 8-byte aligned storage
  uint32_t abortWord = 0;
  std::vector<uint32_t> errorWord;

  Node(int ranks, size_t area) : n(ranks), areaBytes((area + 15) / 16 * 16), errorWord(ranks, 0) {
    for (int r = 0; r < n; ++r) scratch.emplace_back(scratchBytes(areaBytes) / 8 + 2, 0);
  }
  char* base(int r) { return reinterpret_cast<char*>(scratch[r].data()); }
  // Calls rank r completed (its device-side counter).
  uint64_t counter(int r) { return reinterpret_cast<uint64_t*>(base(r))[kSeqWord]; }
  // What the host side passes to a kernel: nothing depends on the call's
  // sequence number (scratch mode: the kernel copies `input` in).
  Args args(int rank, const void* input, uint64_t count, int elemSize, int nblocks, char* out,
            uint64_t timeoutNs) {
    Args a{};
    a.rank = rank;
    a.nranks = n;
    a.nblocks = nblocks;
    a.elemSize = elemSize;
    a.count = count;
    a.timeoutNs = timeoutNs;
    a.copyIn = 1;
    a.areaBytes = areaBytes;
    a.input = static_cast<const char*>(input);
    for (int q = 0; q < n; ++q) a.base[q] = base(q);
    a.out = out;
    a.abortWord = &abortWord;
    a.errorWord = &errorWord[rank];
    return a;
  }
};

inline constexpr uint64_t kLongNs = 20'000'000'000ull;  // 20 s: never hit by a healthy run

// Runs the parts of one rank in order (the same order on every rank), each
// from counter read to counter advance, as the kernel's blocks do.
inline uint32_t runRank(bool twoShot, const Args& a, ReduceFn fn) {
  std::vector<uint8_t> tmp;
  HostPlatform p{{}, fn, a.elemSize, &tmp};
  uint32_t first = 0;
  for (int b = 0; b < a.nblocks; ++b) {
    const uint32_t code = runPart(p, a, b, twoShot);
    if (first == 0) first = code;
  }
  return first;
}

// Byte-equal, except that a NaN matches any NaN: random inputs hold NaNs, and
// the host kernels' vector and scalar paths (which one runs depends on where a
// slice starts and how the library was compiled) may return different NaN
// payloads.
inline bool sameResult(tideDataType_t dt, const uint8_t* got, const uint8_t* want, uint64_t count) {
  const size_t es = dtypeSize(dt);
  for (uint64_t i = 0; i < count; ++i) {
    const uint8_t* g = got + i * es;
    const uint8_t* w = want + i * es;
    if (memcmp(g, w, es) == 0) continue;
    if (tide_test::isNan(g, dt) && tide_test::isNan(w, dt)) continue;
    return false;
  }
  return true;
}

inline void fillRandom(std::vector<uint8_t>* v, uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (auto& x : *v) x = static_cast<uint8_t>(rng());
}

}  // namespace tide::cuda::dc::hostnode
