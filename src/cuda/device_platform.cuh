// Device-side primitives shared by the kernels of the one-node engines
// (device_coll.cu, device_ring.cuh): the block-level platform that the step
// functions of device_coll_logic.h / device_ring_logic.h are templates over,
// and the Avg finish. nvcc only.
//
// Flags use release/acquire at system scope (peers may be other processes or
// other GPUs); the error word lives in host-mapped memory and is accessed
// with plain volatile loads and stores (PCIe need not support atomics).
#pragma once

#include <cstdint>

#include "reduce_ops.cuh"

namespace tide::cuda::dev {

// 16-byte vectors each thread moves per round of a copy or reduction loop,
// all loads before the stores (memory-level parallelism: one vector per
// thread in flight leaves the kernels latency-bound).
inline constexpr int kUnroll = 4;

// Avg: the sum's final value divided by the rank count (integers: truncating
// division; floats: multiplied by 1/n in the compute type), applied once to
// the reduced value, so every rank stores the same bits.
template <class Codec, bool kAvg>
__device__ typename Codec::Store finishAvg(typename Codec::Store acc, int n) {
  if constexpr (!kAvg) {
    return acc;
  } else {
    using C = typename Codec::Comp;
    if constexpr (isIntegral<C>()) {
      return Codec::store(static_cast<C>(Codec::load(acc) / static_cast<C>(n)));
    } else {
      return Codec::store(Codec::load(acc) * (static_cast<C>(1) / static_cast<C>(n)));
    }
  }
}

// The waiting/signalling half of a platform: thread 0 of a block is the
// leader that signals and waits; share() hands it a value to every thread.
struct BlockPlatform {
  uint64_t* shared;                // one word of shared memory for share()
  const volatile uint32_t* error;  // this rank's error word: another block failed
  int nranks;                      // Avg divisor

  __device__ bool leader() const { return threadIdx.x == 0; }
  __device__ uint64_t share(uint64_t v) const {
    if (threadIdx.x == 0) *shared = v;
    __syncthreads();
    const uint64_t r = *shared;
    __syncthreads();
    return r;
  }
  __device__ void barrier() const { __syncthreads(); }
  __device__ void signal(uint64_t* f, uint64_t v) const {
    __threadfence_system();
    asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(f), "l"(v) : "memory");
  }
  __device__ uint64_t poll(const uint64_t* f) const {
    uint64_t v;
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(f) : "memory");
    return v;
  }
  __device__ uint64_t nowNs() const {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
  }
  __device__ bool aborted(const volatile uint32_t* w) const { return *w != 0 || *error != 0; }
  // A racing second code may win; any code is a correct report.
  __device__ void setError(uint32_t* w, uint32_t code) const {
    volatile uint32_t* vw = w;
    if (*vw == 0) *vw = code;
    __threadfence_system();
  }
};

}  // namespace tide::cuda::dev
