// Gradient-compression codecs on device buffers (issue 17): the fp16/bf16
// casts and the int8/int4 block quantization of
// algorithms/compression/codec_kernels.h, run by the kernels of
// codec_device.cu. Same contracts, same wire layouts and the same bits as
// the host's scalar reference (every fp32 operation rounded once, no fused
// multiply-add, denormals kept), except which NaN payload results where a
// NaN enters an fp32 addition (decodeAcc, the error feedback's x + residual).
//
// Every call launches on `stream` (a CUstream of the calling thread's
// current context, which becomes the primary context of device 0 when the
// thread has none; null: the legacy default stream) and returns without
// waiting; the caller synchronizes the stream before it reads the outputs.
// The Status reports bad arguments (tideInvalidArgument, nothing launched),
// a build without the kernels or no usable GPU (tideInvalidUsage) and launch
// failures (tideSystemError); faults inside a kernel show up on the stream.
// The fat binary is loaded once per context, on first use. Thread-safe.
//
// Buffers are device memory (or memory the device can address). float
// buffers need 4-byte alignment, a 16-bit codec's wire 2-byte alignment; an
// int codec's wire may have any alignment. Inputs and outputs must not
// overlap, except that decodeAcc's acc is read and written in place.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/status.h"
#include "cuda/cuda_loader.h"

namespace tide::cuda {

// Codec numbers: those of tide::codec::Codec.
inline constexpr int kDeviceFp16 = 0;
inline constexpr int kDeviceBf16 = 1;
inline constexpr int kDeviceInt8 = 2;
inline constexpr int kDeviceInt4 = 3;
// int8/int4 block sizes: 1 ..  kDeviceMaxBlock (tide::codec::kMaxBlock).
inline constexpr size_t kDeviceMaxBlock = size_t{1} << 20;

// Whether this build has the codec kernels (nvcc and bin2c were found).
bool deviceCodecKernelsBuilt();

// wire = encode(x[0..n)), the layout of tide::codec::wireBytes(codec, n,
// block) bytes. fp16/bf16 ignore block and the rounding arguments (always
// nearest). int8/int4: stochastic rounding draws element i's uniform from
// drawBits(seed, counter + i), as the host does.
// With a non-null residual (n floats, read and written): the fused error
// feedback of tide::codec::encodeFeedback: v = x + residual, wire =
// encode(v), residual = v - decode(wire) (0 for non-finite v, or every
// element of a non-finite int block).
// n == 0 launches nothing and succeeds. Invalid: another codec, an int
// codec's block outside 1..kDeviceMaxBlock, a null x or wire with n > 0.
Status deviceEncode(int codec, const float* x, float* residual, size_t n, size_t block,
                    bool stochastic, uint64_t seed, uint64_t counter, void* wire, CuStream stream);

// y[i] = decode(i) of a wire of n elements (any wire contents: int4 nibble
// 0x8 decodes as -8, as on the host).
Status deviceDecode(int codec, const void* wire, size_t n, size_t block, float* y, CuStream stream);

// acc[i] += decode(i): one fp32 product (int codecs) and one fp32 addition.
Status deviceDecodeAcc(int codec, const void* wire, size_t n, size_t block, float* acc,
                       CuStream stream);

// out[i] = tide::codec::drawBits(seed, counter + i) for i < n (the
// generator behind stochastic rounding; for tests).
Status deviceDrawBits(uint64_t seed, uint64_t counter, uint32_t* out, size_t n, CuStream stream);

}  // namespace tide::cuda
