// Device kernels of the FIFO ring All-Reduce (protocol and step function:
// device_ring_logic.h). nvcc only; device_ring.cu instantiates them for
// every dtype x op as extern "C" kernels tide_ring_<dtype>_<op> (numbers as
// in cuda_kernels.cu, op 4 = Avg).
//
// Launch contract: exactly RingArgs.nblocks blocks (one per part), any block
// size up to 512, all blocks of all ranks co-resident (the parts wait for
// each other across ranks); no dynamic shared memory. Thread 0 of a block
// waits and signals; every thread of the block moves data, 16 bytes at a
// time when every pointer of a piece is 16-byte aligned (FIFO slots always
// are; user buffers may not be), elementwise otherwise. 16- and 8-bit floats
// are widened to fp32 for each operation and rounded back (reduce_ops.cuh),
// as on the host. Head/tail use release/acquire at system scope (peers may be
// other processes or GPUs); the abort word and the error word live in
// host-mapped memory. Incoming FIFO data is written by a peer, so it is read
// with L1-bypassing loads.
#pragma once

#include <cstddef>
#include <cstdint>

#include "device_platform.cuh"
#include "device_ring_logic.h"
#include "reduce_ops.cuh"

namespace {

namespace rg = tide::cuda::ring;

template <class Codec, class Op, bool kAvg>
struct RingPlatform : tide::cuda::dev::BlockPlatform {
  using S = typename Codec::Store;
  static constexpr uint64_t kVec = 16 / sizeof(S);

  // Spin, then back off with __nanosleep so waiting blocks free issue slots.
  __device__ void pause(uint64_t it) const {
    if (it >= 256) __nanosleep(it >= 65536 ? 4096 : 128);
  }

  // out[i] (and out2[i]) = acc[i] op own[i], finished when `last`.
  __device__ void combine(char* out, char* out2, const char* acc, const char* own, uint64_t len,
                          bool last) const {
    S* o = reinterpret_cast<S*>(out);
    S* o2 = reinterpret_cast<S*>(out2);
    const S* x = reinterpret_cast<const S*>(acc);
    const S* y = reinterpret_cast<const S*>(own);
    const bool vec =
        aligned16(o) && (o2 == nullptr || aligned16(o2)) && aligned16(x) && aligned16(y);
    const uint64_t nVec = vec ? len / kVec : 0;
    const bool fin = kAvg && last;
    constexpr int kU = tide::cuda::dev::kUnroll;
    const uint64_t stride = blockDim.x;
    uint64_t v = threadIdx.x;
    for (; v + (kU - 1) * stride < nVec; v += kU * stride) {  // loads, then stores
      Vec<S> a[kU], b[kU];
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        a[u].v = __ldcg(reinterpret_cast<const uint4*>(x) + v + u * stride);
        b[u].v = reinterpret_cast<const uint4*>(y)[v + u * stride];
      }
#pragma unroll
      for (int u = 0; u < kU; ++u) {
#pragma unroll
        for (uint64_t j = 0; j < kVec; ++j) {
          a[u].s[j] = ::combine<Codec, Op>(a[u].s[j], b[u].s[j]);
          if (fin) a[u].s[j] = tide::cuda::dev::finishAvg<Codec, kAvg>(a[u].s[j], nranks);
        }
        reinterpret_cast<uint4*>(o)[v + u * stride] = a[u].v;
        if (o2 != nullptr) reinterpret_cast<uint4*>(o2)[v + u * stride] = a[u].v;
      }
    }
    for (; v < nVec; v += stride) {
      Vec<S> a, b;
      a.v = __ldcg(reinterpret_cast<const uint4*>(x) + v);
      b.v = reinterpret_cast<const uint4*>(y)[v];
#pragma unroll
      for (uint64_t j = 0; j < kVec; ++j) {
        a.s[j] = ::combine<Codec, Op>(a.s[j], b.s[j]);
        if (fin) a.s[j] = tide::cuda::dev::finishAvg<Codec, kAvg>(a.s[j], nranks);
      }
      reinterpret_cast<uint4*>(o)[v] = a.v;
      if (o2 != nullptr) reinterpret_cast<uint4*>(o2)[v] = a.v;
    }
    for (uint64_t i = nVec * kVec + threadIdx.x; i < len; i += blockDim.x) {
      const volatile S* vx = x;
      S r = ::combine<Codec, Op>(vx[i], y[i]);
      if (fin) r = tide::cuda::dev::finishAvg<Codec, kAvg>(r, nranks);
      o[i] = r;
      if (o2 != nullptr) o2[i] = r;
    }
  }

  // out[i] (and out2[i]) = src[i].
  __device__ void copy(char* out, char* out2, const char* src, uint64_t len) const {
    S* o = reinterpret_cast<S*>(out);
    S* o2 = reinterpret_cast<S*>(out2);
    const S* s = reinterpret_cast<const S*>(src);
    const bool vec = aligned16(o) && (o2 == nullptr || aligned16(o2)) && aligned16(s);
    const uint64_t nVec = vec ? len / kVec : 0;
    constexpr int kU = tide::cuda::dev::kUnroll;
    const uint64_t stride = blockDim.x;
    uint64_t v = threadIdx.x;
    for (; v + (kU - 1) * stride < nVec; v += kU * stride) {  // loads, then stores
      uint4 d[kU];
#pragma unroll
      for (int u = 0; u < kU; ++u)
        d[u] = __ldcg(reinterpret_cast<const uint4*>(s) + v + u * stride);
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        reinterpret_cast<uint4*>(o)[v + u * stride] = d[u];
        if (o2 != nullptr) reinterpret_cast<uint4*>(o2)[v + u * stride] = d[u];
      }
    }
    for (; v < nVec; v += stride) {
      const uint4 d = __ldcg(reinterpret_cast<const uint4*>(s) + v);
      reinterpret_cast<uint4*>(o)[v] = d;
      if (o2 != nullptr) reinterpret_cast<uint4*>(o2)[v] = d;
    }
    for (uint64_t i = nVec * kVec + threadIdx.x; i < len; i += blockDim.x) {
      const volatile S* vs = s;
      const S d = vs[i];
      o[i] = d;
      if (o2 != nullptr) o2[i] = d;
    }
  }
};

// One block = one part. A rank whose error word is set (an earlier call or
// another block failed) gives up at once: its peers are out of step.
template <class Codec, class Op, bool kAvg>
__device__ void ringBlock(const rg::RingArgs& a) {
  __shared__ uint64_t word;
  RingPlatform<Codec, Op, kAvg> p{&word, a.errorWord, a.nranks};
  const uint64_t failed = p.share(threadIdx.x == 0 ? *p.error : 0);
  if (failed != 0) return;
  rg::ringPart(p, a, static_cast<int>(blockIdx.x));
}

}  // namespace
