/*
 * Tide: compressed collectives (gradient compression inside the library).
 *
 * C99 and C++; includes tide/tide.h. Every function returns a tideResult_t
 * and never throws. docs/compression.md gives each codec's error bound, its
 * wire bytes per element and when it pays.
 *
 * A compressor belongs to one communicator and carries the state of one
 * logical buffer (a gradient bucket): the error-feedback residuals and the
 * stochastic-rounding position. Creating and destroying one is local (not
 * collective). Its first successful call fixes the collective and the count;
 * a later call with another count (or another collective) fails with
 * tideInvalidArgument naming both. Its calls run in the communicator's issue
 * order like any other call on it; one compressor must not be used by two
 * threads at once, nor destroyed while a call of it is queued on a stream.
 * Two compressors made with the same config and seed and given the same
 * calls behave identically; GetState/SetState copy everything that makes
 * them so.
 *
 * Codecs: fp16/bf16 (a 16-bit wire type, fp32 accumulation), int8/int4
 * (symmetric block quantization, one fp32 scale per block), top-k (index,
 * value pairs of the largest magnitudes). An explicit codec applies on every
 * route, shared memory included; only tideCodecAuto may choose none (the
 * cost model picks per call, never a lossy codec on a communicator that is
 * all shared memory). tideCodecNone gives exactly the plain collective.
 *
 * Datatypes: tideFloat32, tideBfloat16, tideFloat16 (accumulated in fp32).
 * Ops: tideSum, tideAvg. In-place rules as the plain collectives. Every rank
 * ends with byte-identical results (All-Reduce, AllGather). NaN and Inf in the
 * input give NaN/Inf where an uncompressed sum would (possibly at more
 * elements of the same quantization block), never a crash or a hang. The
 * traffic counters (tideCommGetTraffic) count the bytes actually sent.
 */
#ifndef TIDE_COMPRESS_H_
#define TIDE_COMPRESS_H_

#include "tide/tide.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  tideCodecNone = 0,
  tideCodecFp16 = 1,
  tideCodecBf16 = 2,
  tideCodecInt8 = 3,
  tideCodecInt4 = 4,
  tideCodecTopK = 5,
  tideCodecAuto = 6
} tideCodec_t;

typedef struct {
  size_t size; /* sizeof(tideCompressConfig_t) of the caller's header */
  tideCodec_t codec;
  int blockSize;          /* int8/int4 elements per scale; TIDE_CONFIG_UNDEF_INT: 256 */
  double topkRatio;       /* top-k: fraction of elements kept; <= 0: 0.01 */
  int errorFeedback;      /* TIDE_CONFIG_UNDEF_INT or 1: keep a residual; 0: none */
  int stochasticRounding; /* TIDE_CONFIG_UNDEF_INT or 0: nearest; 1: stochastic */
  int interNodeOnly;      /* TIDE_CONFIG_UNDEF_INT or 0: compress every phase; 1: on several
                             nodes, only the inter-node phase */
  unsigned long long seed;
  int reserved[16];
} tideCompressConfig_t;

#define TIDE_COMPRESS_CONFIG_INITIALIZER                                             \
  {                                                                                  \
    sizeof(tideCompressConfig_t), tideCodecNone, TIDE_CONFIG_UNDEF_INT, 0.0,         \
        TIDE_CONFIG_UNDEF_INT, TIDE_CONFIG_UNDEF_INT, TIDE_CONFIG_UNDEF_INT, 0ull, { \
      0                                                                              \
    }                                                                                \
  }

typedef struct tideCompressor* tideCompressor_t;

/* Makes a compressor for `comm` from `config` (copied). Local, not collective.
 * tideInvalidArgument for a NULL pointer, an unknown codec, blockSize <= 0 or
 * > 2^20, topkRatio > 1, or a config of a newer, larger header. */
tideResult_t tideCompressorCreate(tideComm_t comm, const tideCompressConfig_t* config,
                                  tideCompressor_t* compressor);
/* Frees it. Its calls must be complete (synchronize their streams first). */
tideResult_t tideCompressorDestroy(tideCompressor_t compressor);

/* The compressed collectives: the plain ones' arguments (tide.h), plus the
 * compressor, which must belong to `comm`. */
tideResult_t tideAllReduceCompressed(const void* sendbuff, void* recvbuff, size_t count,
                                     tideDataType_t datatype, tideRedOp_t op,
                                     tideCompressor_t compressor, tideComm_t comm,
                                     tideStream_t stream);
tideResult_t tideReduceScatterCompressed(const void* sendbuff, void* recvbuff, size_t recvcount,
                                         tideDataType_t datatype, tideRedOp_t op,
                                         tideCompressor_t compressor, tideComm_t comm,
                                         tideStream_t stream);
tideResult_t tideAllGatherCompressed(const void* sendbuff, void* recvbuff, size_t sendcount,
                                     tideDataType_t datatype, tideCompressor_t compressor,
                                     tideComm_t comm, tideStream_t stream);

/* The error-feedback residual, for checkpoints: GetState with buf NULL writes
 * the size needed to *bytes; with a buffer of *bytes bytes it copies the
 * state (every residual, the fixed count, the generator position). SetState
 * loads such a copy into a compressor of the same config (a corrupt or
 * foreign copy: tideInvalidArgument, the compressor unchanged). Reset clears
 * the residuals and the position and unfixes the count. Local calls; the
 * compressor's queued calls must be complete. */
tideResult_t tideCompressorGetState(tideCompressor_t compressor, void* buf, size_t* bytes);
tideResult_t tideCompressorSetState(tideCompressor_t compressor, const void* buf, size_t bytes);
tideResult_t tideCompressorReset(tideCompressor_t compressor);

#ifdef __cplusplus
}
#endif

#endif /* TIDE_COMPRESS_H_ */
