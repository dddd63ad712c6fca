// The FIFO ring All-Reduce kernels (device_ring.cuh) for every dtype x op,
// compiled by nvcc into their own fat binary (sm_80, sm_90, compute_90 PTX;
// src/cuda/meson.build). extern "C" names for the driver API:
// tide_ring_<dtype>_<op>, dtype/op numbers as in cuda_kernels.cu, op 4 = Avg.
// Launch: RingArgs by value, gridDim.x == RingArgs.nblocks, blockDim.x <= 512.
#include <cstddef>
#include <cstdint>

#include "device_ring.cuh"

#define TIDE_RING_KERNEL(T, O, CODEC, OP, AVG)            \
  extern "C" __global__ void __launch_bounds__(512)       \
      tide_ring_##T##_##O(tide::cuda::ring::RingArgs a) { \
    ringBlock<CODEC, OP, AVG>(a);                         \
  }
// Op 4 is Avg: Sum, finished once on the reduced value.
#define TIDE_RING_OPS(T, CODEC)                \
  TIDE_RING_KERNEL(T, 0, CODEC, OpSum, false)  \
  TIDE_RING_KERNEL(T, 1, CODEC, OpProd, false) \
  TIDE_RING_KERNEL(T, 2, CODEC, OpMax, false)  \
  TIDE_RING_KERNEL(T, 3, CODEC, OpMin, false)  \
  TIDE_RING_KERNEL(T, 4, CODEC, OpSum, true)

TIDE_RING_OPS(0, Plain<int8_t>)
TIDE_RING_OPS(1, Plain<uint8_t>)
TIDE_RING_OPS(2, Plain<int32_t>)
TIDE_RING_OPS(3, Plain<uint32_t>)
TIDE_RING_OPS(4, Plain<int64_t>)
TIDE_RING_OPS(5, Plain<uint64_t>)
TIDE_RING_OPS(6, Half)
TIDE_RING_OPS(7, Plain<float>)
TIDE_RING_OPS(8, Plain<double>)
TIDE_RING_OPS(9, Bf16)
TIDE_RING_OPS(10, E4m3)
TIDE_RING_OPS(11, E5m2)
