// The core's side of payload codecs (gradient compression, include/tide/compress.h):
// the parameters a compressed call carries, and the provider interface the
// codec implementation registers (algorithms/compression/codec_provider.cc),
// through which the core sizes wire bytes and keeps a compressor's state
// without knowing the codecs. The compressed algorithms are ordinary rows of
// the algorithm table that declare the codecs they serve
// (AlgorithmInfo::codecs); the planner offers a call only to those rows.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tide {

// tideCodec_t values (include/tide/compress.h).
enum CodecId : int {
  kCodecNone = 0,
  kCodecFp16 = 1,
  kCodecBf16 = 2,
  kCodecInt8 = 3,
  kCodecInt4 = 4,
  kCodecTopK = 5,
  kCodecAuto = 6,  // resolved per call before planning: never reaches a row
  kCodecCount = 6,
};
const char* codecName(int id);

// A compressor's validated configuration.
struct CodecParams {
  uint32_t block = 256;     // int8/int4 elements per scale
  double topkRatio = 0.01;  // top-k: fraction of elements kept
  bool errorFeedback = true;
  bool stochastic = false;  // stochastic rounding (int8/int4)
  bool interNodeOnly = false;
  uint64_t seed = 0;
};

// Implemented by the codec library (one per process, registered at load time
// with registerCodecProvider, core/registry.h). All functions are
// thread-safe for distinct states; a state is used by one operation at a time
// (a compressor's calls run in its communicator's issue order).
struct CodecProvider {
  const char* name;
  // Bytes of one encoded piece of n fp32 elements.
  uint64_t (*wireBytes)(int codec, const CodecParams& p, uint64_t n);
  // The state of one logical buffer (error-feedback residuals, generator
  // position); null when out of memory. Residuals are sized by the
  // algorithms at the first call.
  void* (*newState)();
  void (*freeState)(void* state);
  // Serialized size; save writes exactly that many bytes (false: too small).
  size_t (*stateBytes)(const void* state);
  bool (*saveState)(const void* state, void* buf, size_t bytes);
  // False, the state unchanged, for a buffer that is not a saved state.
  bool (*loadState)(void* state, const void* buf, size_t bytes);
  void (*resetState)(void* state);
};

// At most one provider (the last registered wins); null when none is.
void registerCodecProvider(const CodecProvider* provider);
const CodecProvider* codecProvider();

}  // namespace tide
