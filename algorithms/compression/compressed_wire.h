// One compression point of a compressed collective: encodes fp32 values (with
// or without an error-feedback residual) into a wire piece and decodes or
// accumulates pieces, for the casting and quantizing codecs and for raw fp32
// (the dense fallback of top-k). Used by compressed_a2a.cc and
// compressed_topk.cc.
#pragma once

#include <cstring>

#include "algorithms/compression/compressed_common.h"

namespace tide::cmp {

class Wire {
 public:
  // raw: fp32 values as they are (no codec).
  static Wire raw() { return Wire(true, codec::Codec::kInt8, nullptr); }
  static Wire of(int codecId, const CodecParams* p) { return Wire(false, kernelCodec(codecId), p); }

  size_t bytes(size_t n) const {
    return raw_ ? n * sizeof(float) : codec::wireBytes(codec_, n, params_->block);
  }
  // Encodes x[0..n) (plus *residual, updated, when not null). `position` is
  // the stochastic-rounding counter of element 0.
  bool encode(const float* x, float* residual, size_t n, uint64_t seedPos, void* out) const {
    if (raw_) {
      if (n > 0) std::memcpy(out, x, n * sizeof(float));
      return true;
    }
    codec::Rounding r;
    r.stochastic = params_->stochastic;
    r.seed = params_->seed;
    r.counter = seedPos;
    return residual != nullptr
               ? codec::encodeFeedback(codec_, x, residual, n, params_->block, r, out)
               : codec::encode(codec_, x, n, params_->block, r, out);
  }
  bool decode(const void* in, size_t n, float* y) const {
    if (raw_) {
      if (n > 0) std::memcpy(y, in, n * sizeof(float));
      return true;
    }
    return codec::decode(codec_, in, n, params_->block, y);
  }
  bool decodeAcc(const void* in, size_t n, float* acc) const {
    if (raw_) {
      const auto* v = static_cast<const float*>(in);
      for (size_t i = 0; i < n; ++i) acc[i] += v[i];
      return true;
    }
    return codec::decodeAcc(codec_, in, n, params_->block, acc);
  }

 private:
  Wire(bool raw, codec::Codec c, const CodecParams* p) : raw_(raw), codec_(c), params_(p) {}
  bool raw_;
  codec::Codec codec_;
  const CodecParams* params_;
};

// Bytes rounded up to the 64-byte alignment every wire piece starts at (the
// 16-bit codecs need 2-byte alignment; 64 keeps pieces on their own lines).
constexpr size_t alignedBytes(size_t b) { return (b + 63) & ~size_t{63}; }

}  // namespace tide::cmp
