// Device collective kernels of one node: one-shot and two-shot All-Reduce,
// AllGather, ReduceScatter and Broadcast over peer-mapped scratch (protocol
// and step functions: device_coll_logic.h).
//
// Compiled by nvcc into its own fat binary (sm_80, sm_90, compute_90 PTX)
// that device_coll.cc embeds and loads through the driver API. Kernels are
// extern "C": tide_ar<algo>_<dtype>_<op>, algo 1 = one-shot, 2 = two-shot;
// tide_rs_<dtype>_<op> (ReduceScatter); tide_ag, tide_bc (bytes, any
// dtype); dtype/op numbers as in cuda_kernels.cu, op 4 = Avg. One block per part (Args.nblocks
// blocks), any block size; thread 0 of a block signals and waits, every
// thread of the block reduces/copies. Flags use release/acquire at system
// scope (peers may be other processes or other GPUs); the abort word and the
// error word live in host-mapped memory.
#include <cstddef>
#include <cstdint>

#include "device_coll_logic.h"
#include "device_platform.cuh"
#include "reduce_ops.cuh"

namespace {

namespace dc = tide::cuda::dc;
using tide::cuda::dev::kUnroll;

template <class Codec, class Op, bool kAvg>
struct DevicePlatform : tide::cuda::dev::BlockPlatform {
  __device__ uint64_t exitAdd(uint64_t* w) const {
    __threadfence();
    const auto old = atomicAdd(reinterpret_cast<unsigned long long*>(w), 1ull);
    __threadfence();
    return static_cast<uint64_t>(old);
  }
  __device__ void pause(uint64_t it) const {
    if (it >= 1024) __nanosleep(it >= 65536 ? 4096 : 256);
  }

  // out[i] (and out2[i]) = ins[0][i] op ... op ins[n-1][i] over r.
  __device__ void reduce(char* out, char* out2, char* const* ins, int n, dc::Range r) const {
    using S = typename Codec::Store;
    constexpr uint64_t kVec = 16 / sizeof(S);
    S* o = reinterpret_cast<S*>(out);
    S* o2 = reinterpret_cast<S*>(out2);
    // r.lo is a vector multiple; scratch areas are 16-byte aligned, user
    // buffers (direct mode, out) need not be.
    bool vec = aligned16(o) && (o2 == nullptr || aligned16(o2));
    for (int k = 0; k < n; ++k) vec = vec && aligned16(ins[k]);
    const uint64_t nVec = vec ? (r.hi - r.lo) / kVec : 0;
    const uint64_t v0 = r.lo / kVec;
    const uint64_t vEnd = v0 + nVec;
    const uint64_t stride = blockDim.x;
    // kUnroll vectors per thread per round, every load issued before the
    // first store, so each thread keeps kUnroll x 16 bytes in flight per
    // input; the rest one vector at a time.
    uint64_t v = v0 + threadIdx.x;
    for (; v + (kUnroll - 1) * stride < vEnd; v += kUnroll * stride) {
      Vec<S> acc[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        acc[u].v = reinterpret_cast<const uint4*>(ins[0])[v + u * stride];
      for (int k = 1; k < n; ++k) {
        Vec<S> x[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
          x[u].v = reinterpret_cast<const uint4*>(ins[k])[v + u * stride];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
          for (uint64_t j = 0; j < kVec; ++j)
            acc[u].s[j] = combine<Codec, Op>(acc[u].s[j], x[u].s[j]);
        }
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if constexpr (kAvg) {
#pragma unroll
          for (uint64_t j = 0; j < kVec; ++j)
            acc[u].s[j] = tide::cuda::dev::finishAvg<Codec, kAvg>(acc[u].s[j], nranks);
        }
        reinterpret_cast<uint4*>(o)[v + u * stride] = acc[u].v;
        if (o2 != nullptr) reinterpret_cast<uint4*>(o2)[v + u * stride] = acc[u].v;
      }
    }
    for (; v < vEnd; v += stride) {
      Vec<S> acc, x;
      acc.v = reinterpret_cast<const uint4*>(ins[0])[v];
      for (int k = 1; k < n; ++k) {
        x.v = reinterpret_cast<const uint4*>(ins[k])[v];
#pragma unroll
        for (uint64_t j = 0; j < kVec; ++j) acc.s[j] = combine<Codec, Op>(acc.s[j], x.s[j]);
      }
      if constexpr (kAvg) {
#pragma unroll
        for (uint64_t j = 0; j < kVec; ++j)
          acc.s[j] = tide::cuda::dev::finishAvg<Codec, kAvg>(acc.s[j], nranks);
      }
      reinterpret_cast<uint4*>(o)[v] = acc.v;
      if (o2 != nullptr) reinterpret_cast<uint4*>(o2)[v] = acc.v;
    }
    for (uint64_t i = r.lo + nVec * kVec + threadIdx.x; i < r.hi; i += blockDim.x) {
      S acc = reinterpret_cast<const S*>(ins[0])[i];
      for (int k = 1; k < n; ++k)
        acc = combine<Codec, Op>(acc, reinterpret_cast<const S*>(ins[k])[i]);
      acc = tide::cuda::dev::finishAvg<Codec, kAvg>(acc, nranks);
      o[i] = acc;
      if (o2 != nullptr) o2[i] = acc;
    }
  }

  __device__ void copy(char* dst, const char* src, dc::Range r) const {
    using S = typename Codec::Store;
    constexpr uint64_t kVec = 16 / sizeof(S);
    S* d = reinterpret_cast<S*>(dst);
    const S* s = reinterpret_cast<const S*>(src);
    const uint64_t nVec = aligned16(d) && aligned16(s) ? (r.hi - r.lo) / kVec : 0;
    const uint64_t v0 = r.lo / kVec;
    const uint64_t vEnd = v0 + nVec;
    const uint64_t stride = blockDim.x;
    uint64_t v = v0 + threadIdx.x;
    for (; v + (kUnroll - 1) * stride < vEnd; v += kUnroll * stride) {  // loads, then stores
      uint4 t[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) t[u] = reinterpret_cast<const uint4*>(s)[v + u * stride];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) reinterpret_cast<uint4*>(d)[v + u * stride] = t[u];
    }
    for (; v < vEnd; v += stride)
      reinterpret_cast<uint4*>(d)[v] = reinterpret_cast<const uint4*>(s)[v];
    for (uint64_t i = r.lo + nVec * kVec + threadIdx.x; i < r.hi; i += blockDim.x) d[i] = s[i];
  }
};

// One block = one part. The grid has exactly a.nblocks blocks (the call
// counter's exit count relies on it).
template <class Codec, class Op, bool kTwoShot, bool kAvg = false>
__device__ void allReduceBlock(const dc::Args& a) {
  __shared__ uint64_t word;
  DevicePlatform<Codec, Op, kAvg> p{&word, a.errorWord, a.nranks};
  // An earlier call of this rank failed: its peers are out of step, give up
  // (the error is sticky, so the call counter no longer matters). Read by one
  // thread and shared, so the whole block leaves together.
  const uint64_t failed = p.share(threadIdx.x == 0 ? *p.error : 0);
  if (failed != 0) return;
  dc::runKindPart<dc::kAllReduce>(p, a, static_cast<int>(blockIdx.x), kTwoShot);
}

// AllGather / ReduceScatter / Broadcast: one block = one part, as above.
// AG and Broadcast move bytes (Args.elemSize 1), so one kernel serves every
// dtype; ReduceScatter reduces with Codec/Op like the All-Reduce.
template <int kKind, class Codec, class Op, bool kAvg = false>
__device__ void collBlock(const dc::Args& a) {
  __shared__ uint64_t word;
  DevicePlatform<Codec, Op, kAvg> p{&word, a.errorWord, a.nranks};
  const uint64_t failed = p.share(threadIdx.x == 0 ? *p.error : 0);
  if (failed != 0) return;
  dc::runKindPart<kKind>(p, a, static_cast<int>(blockIdx.x), false);
}

}  // namespace

#define TIDE_AR_KERNELS(T, O, CODEC, OP, AVG)                                                    \
  extern "C" __global__ void __launch_bounds__(512) tide_ar1_##T##_##O(tide::cuda::dc::Args a) { \
    allReduceBlock<CODEC, OP, false, AVG>(a);                                                    \
  }                                                                                              \
  extern "C" __global__ void __launch_bounds__(512) tide_ar2_##T##_##O(tide::cuda::dc::Args a) { \
    allReduceBlock<CODEC, OP, true, AVG>(a);                                                     \
  }
#define TIDE_RS_KERNEL(T, O, CODEC, OP, AVG)                                                    \
  extern "C" __global__ void __launch_bounds__(512) tide_rs_##T##_##O(tide::cuda::dc::Args a) { \
    collBlock<tide::cuda::dc::kReduceScatter, CODEC, OP, AVG>(a);                               \
  }
// Op 4 is Avg: Sum, then finish() on the reduced value.
#define TIDE_AR_OPS(T, CODEC)                 \
  TIDE_AR_KERNELS(T, 0, CODEC, OpSum, false)  \
  TIDE_AR_KERNELS(T, 1, CODEC, OpProd, false) \
  TIDE_AR_KERNELS(T, 2, CODEC, OpMax, false)  \
  TIDE_AR_KERNELS(T, 3, CODEC, OpMin, false)  \
  TIDE_AR_KERNELS(T, 4, CODEC, OpSum, true)   \
  TIDE_RS_KERNEL(T, 0, CODEC, OpSum, false)   \
  TIDE_RS_KERNEL(T, 1, CODEC, OpProd, false)  \
  TIDE_RS_KERNEL(T, 2, CODEC, OpMax, false)   \
  TIDE_RS_KERNEL(T, 3, CODEC, OpMin, false)   \
  TIDE_RS_KERNEL(T, 4, CODEC, OpSum, true)

// Byte movers: one kernel each for every dtype.
extern "C" __global__ void __launch_bounds__(512) tide_ag(tide::cuda::dc::Args a) {
  collBlock<tide::cuda::dc::kAllGather, Plain<uint8_t>, OpSum>(a);
}
extern "C" __global__ void __launch_bounds__(512) tide_bc(tide::cuda::dc::Args a) {
  collBlock<tide::cuda::dc::kBroadcast, Plain<uint8_t>, OpSum>(a);
}

TIDE_AR_OPS(0, Plain<int8_t>)
TIDE_AR_OPS(1, Plain<uint8_t>)
TIDE_AR_OPS(2, Plain<int32_t>)
TIDE_AR_OPS(3, Plain<uint32_t>)
TIDE_AR_OPS(4, Plain<int64_t>)
TIDE_AR_OPS(5, Plain<uint64_t>)
TIDE_AR_OPS(6, Half)
TIDE_AR_OPS(7, Plain<float>)
TIDE_AR_OPS(8, Plain<double>)
TIDE_AR_OPS(9, Bf16)
TIDE_AR_OPS(10, E4m3)
TIDE_AR_OPS(11, E5m2)
