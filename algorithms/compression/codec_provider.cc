// The codec library's side of the core's CodecProvider (core/codec.h): wire
// sizes of encoded pieces and the per-compressor state (codec::FeedbackState:
// the sender's and the shard owner's residuals and the stochastic-rounding
// position), registered when the library loads.
#include <new>

#include "algorithms/compression/compressed_common.h"
#include "core/registry.h"

namespace tide {

namespace {

uint64_t wireBytesOf(int codecId, const CodecParams& p, uint64_t n) {
  return cmp::pieceBytes(codecId, p, n);
}

void* newState() { return new (std::nothrow) codec::FeedbackState(); }

void freeState(void* st) { delete static_cast<codec::FeedbackState*>(st); }

size_t stateBytes(const void* st) {
  return static_cast<const codec::FeedbackState*>(st)->stateBytes();
}

bool saveState(const void* st, void* buf, size_t bytes) {
  return static_cast<const codec::FeedbackState*>(st)->save(buf, bytes);
}

bool loadState(void* st, const void* buf, size_t bytes) {
  return static_cast<codec::FeedbackState*>(st)->load(buf, bytes);
}

void resetState(void* st) {
  auto* s = static_cast<codec::FeedbackState*>(st);
  s->sender.resize(0);
  s->owner.resize(0);
  s->reset();
}

const CodecProvider kProvider = {
    "host-codecs", &wireBytesOf, &newState,  &freeState,
    &stateBytes,   &saveState,   &loadState, &resetState,
};

}  // namespace

TIDE_ON_LOAD(registerCodecProvider(&kProvider));

}  // namespace tide
