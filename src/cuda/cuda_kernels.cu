// CUDA reduction, scale and divide kernels for device buffers.
//
// Compiled by nvcc into one fat binary (sm_80, sm_90 and compute_90 PTX) that
// cuda_kernels.cc embeds and loads through the driver API, so libtide.so has
// no link-time dependency on CUDA. Every kernel is extern "C" with a name the
// host side builds from the dtype and op numbers (tide_reduce_<dtype>_<op>,
// tide_scale_<dtype>, tide_divide_<dtype>).
//
// Numerics are those of core/kernels.h and bit-identical to the host table:
// 16- and 8-bit floats are widened to fp32, combined and rounded back to
// nearest-even (fp8 saturating); integers wrap; Max/Min let a NaN win and
// return the second operand on ties. Memory is accessed in 16-byte vectors
// when all pointers are 16-byte aligned, element-wise otherwise. dst may be
// equal to a or b (same index), not shifted against them.
#include <cstddef>
#include <cstdint>

#include "reduce_ops.cuh"

namespace {

template <class Codec, class Op>
TIDE_DEV void reduceBody(void* dst, const void* a, const void* b, uint64_t n) {
  using S = typename Codec::Store;
  constexpr uint64_t kVec = 16 / sizeof(S);
  S* d = static_cast<S*>(dst);
  const S* x = static_cast<const S*>(a);
  const S* y = static_cast<const S*>(b);
  const uint64_t tid = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  const uint64_t nVec = (aligned16(d) && aligned16(x) && aligned16(y)) ? n / kVec : 0;
  for (uint64_t v = tid; v < nVec; v += stride) {
    Vec<S> p, q, r;
    p.v = reinterpret_cast<const uint4*>(x)[v];
    q.v = reinterpret_cast<const uint4*>(y)[v];
#pragma unroll
    for (uint64_t j = 0; j < kVec; ++j) r.s[j] = combine<Codec, Op>(p.s[j], q.s[j]);
    reinterpret_cast<uint4*>(d)[v] = r.v;
  }
  for (uint64_t i = nVec * kVec + tid; i < n; i += stride) d[i] = combine<Codec, Op>(x[i], y[i]);
}

template <class Codec>
TIDE_DEV void scaleBody(void* dst, const void* src, uint64_t n, double scalar) {
  using S = typename Codec::Store;
  using C = typename Codec::Comp;
  constexpr uint64_t kVec = 16 / sizeof(S);
  const C s = static_cast<C>(scalar);
  S* d = static_cast<S*>(dst);
  const S* x = static_cast<const S*>(src);
  const uint64_t tid = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  const uint64_t nVec = (aligned16(d) && aligned16(x)) ? n / kVec : 0;
  for (uint64_t v = tid; v < nVec; v += stride) {
    Vec<S> p, r;
    p.v = reinterpret_cast<const uint4*>(x)[v];
#pragma unroll
    for (uint64_t j = 0; j < kVec; ++j) r.s[j] = Codec::store(Codec::load(p.s[j]) * s);
    reinterpret_cast<uint4*>(d)[v] = r.v;
  }
  for (uint64_t i = nVec * kVec + tid; i < n; i += stride)
    d[i] = Codec::store(Codec::load(x[i]) * s);
}

// Integer division truncating like C; divisor 0 copies; a divisor beyond the
// type's range gives 0 (or -1 for the minimum divided by max + 1).
template <class T, T kMin, T kMax>
TIDE_DEV void divideBody(void* dst, const void* src, uint64_t n, uint64_t divisor) {
  T* d = static_cast<T*>(dst);
  const T* s = static_cast<const T*>(src);
  const uint64_t tid = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  const bool isSigned = kMin != 0;
  for (uint64_t i = tid; i < n; i += stride) {
    const T v = s[i];
    T r;
    if (divisor == 0) {
      r = v;
    } else if (divisor > static_cast<uint64_t>(kMax)) {
      r = (isSigned && divisor == static_cast<uint64_t>(kMax) + 1 && v == kMin) ? T(-1) : T(0);
    } else {
      r = static_cast<T>(v / static_cast<T>(divisor));
    }
    d[i] = r;
  }
}

}  // namespace

#define TIDE_REDUCE_KERNEL(T, O, CODEC, OP)                                                \
  extern "C" __global__ void __launch_bounds__(512)                                        \
      tide_reduce_##T##_##O(void* d, const void* a, const void* b, unsigned long long n) { \
    reduceBody<CODEC, OP>(d, a, b, n);                                                     \
  }
#define TIDE_REDUCE_OPS(T, CODEC)         \
  TIDE_REDUCE_KERNEL(T, 0, CODEC, OpSum)  \
  TIDE_REDUCE_KERNEL(T, 1, CODEC, OpProd) \
  TIDE_REDUCE_KERNEL(T, 2, CODEC, OpMax)  \
  TIDE_REDUCE_KERNEL(T, 3, CODEC, OpMin)

// dtype numbers are tideDataType_t's (= ncclDataType_t's).
TIDE_REDUCE_OPS(0, Plain<int8_t>)
TIDE_REDUCE_OPS(1, Plain<uint8_t>)
TIDE_REDUCE_OPS(2, Plain<int32_t>)
TIDE_REDUCE_OPS(3, Plain<uint32_t>)
TIDE_REDUCE_OPS(4, Plain<int64_t>)
TIDE_REDUCE_OPS(5, Plain<uint64_t>)
TIDE_REDUCE_OPS(6, Half)
TIDE_REDUCE_OPS(7, Plain<float>)
TIDE_REDUCE_OPS(8, Plain<double>)
TIDE_REDUCE_OPS(9, Bf16)
TIDE_REDUCE_OPS(10, E4m3)
TIDE_REDUCE_OPS(11, E5m2)

#define TIDE_SCALE_KERNEL(T, CODEC)                                                 \
  extern "C" __global__ void __launch_bounds__(512)                                 \
      tide_scale_##T(void* d, const void* s, unsigned long long n, double scalar) { \
    scaleBody<CODEC>(d, s, n, scalar);                                              \
  }
TIDE_SCALE_KERNEL(6, Half)
TIDE_SCALE_KERNEL(7, Plain<float>)
TIDE_SCALE_KERNEL(8, Plain<double>)
TIDE_SCALE_KERNEL(9, Bf16)
TIDE_SCALE_KERNEL(10, E4m3)
TIDE_SCALE_KERNEL(11, E5m2)

#define TIDE_DIVIDE_KERNEL(T, TYPE, MIN, MAX)                                                     \
  extern "C" __global__ void __launch_bounds__(512)                                               \
      tide_divide_##T(void* d, const void* s, unsigned long long n, unsigned long long divisor) { \
    divideBody<TYPE, MIN, MAX>(d, s, n, divisor);                                                 \
  }
TIDE_DIVIDE_KERNEL(0, int8_t, INT8_MIN, INT8_MAX)
TIDE_DIVIDE_KERNEL(1, uint8_t, 0, UINT8_MAX)
TIDE_DIVIDE_KERNEL(2, int32_t, INT32_MIN, INT32_MAX)
TIDE_DIVIDE_KERNEL(3, uint32_t, 0, UINT32_MAX)
TIDE_DIVIDE_KERNEL(4, int64_t, INT64_MIN, INT64_MAX)
TIDE_DIVIDE_KERNEL(5, uint64_t, 0, UINT64_MAX)
