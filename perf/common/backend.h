// Communication backend of the perf harness.
//
// The harness (harness.cc) and the per-collective tool files are written
// against this interface only, so the same tools are built twice: over Tide
// (tide_backend.h, the default) and over MPI (perf/mpi/mpi_backend.cc, when
// harness.cc is compiled with TIDE_PERF_MPI). Both speak Tide's enums
// (tideDataType_t, tideRedOp_t, tideResult_t), which come from the header only:
// the MPI build does not link libtide.
//
// One Backend serves one process (one rank). Not thread-safe: every method is
// called from the harness's single thread. Collective methods take the
// argument contracts of the matching tide.h call; in-place forms are the ones
// tide.h defines (send == recv, or send/recv at this rank's block of the other
// buffer), and a backend maps them to its own in-place form.
#ifndef TIDE_PERF_COMMON_BACKEND_H_
#define TIDE_PERF_COMMON_BACKEND_H_

#include <cstddef>
#include <string>
#include <vector>

#include "common/data.h"
#include "tide/compress.h"
#include "tide/tide.h"

namespace tide_perf {

class Backend {
 public:
  virtual ~Backend() = default;

  // "tide" or "MPI", for messages.
  virtual const char* Name() const = 0;
  // What the header names after the collective, e.g. "tide library 100".
  virtual std::string Describe() = 0;
  // nullptr when the backend can run `dt` (and `op`, a tideRedOp_t, or kOpNone);
  // else a static sentence saying why not. Callable before Init.
  virtual const char* Unsupported(const DType& dt, int op) const = 0;
  // Notes printed in the header ("# Note: ..."); may depend on `blocking`.
  virtual std::vector<std::string> Notes(bool blocking) const = 0;

  // Joins the job from the launcher's environment. `blocking` is -z: when
  // false, collectives may be asynchronous until Sync. Called once.
  virtual tideResult_t Init(bool blocking, int* rank, int* nranks) = 0;
  // Releases everything; after it only Abort-free exit remains. Blocking.
  virtual tideResult_t Finalize() = 0;
  // Best effort after a failure: makes the peers fail instead of hang.
  virtual void Abort() = 0;
  // Static description of `res`, and the detail of the last failure (never null).
  virtual const char* ErrorString(tideResult_t res) = 0;
  virtual const char* LastError() = 0;

  // Blocks until every operation issued so far completed.
  virtual tideResult_t Sync() = 0;
  // Blocking in-place all-reduce of host values, for the harness's own
  // bookkeeping (barrier, time and error aggregation); nothing else in flight.
  virtual tideResult_t HostAllReduce(void* data, size_t count, tideDataType_t type,
                                     tideRedOp_t op) = 0;
  // Blocking gather of `bytes` bytes from every rank into recv (rank order).
  virtual tideResult_t HostAllGather(const void* send, void* recv, size_t bytes) = 0;

  // The measured operations (asynchronous until Sync when not blocking).
  virtual tideResult_t AllReduce(const void* send, void* recv, size_t count, tideDataType_t type,
                                 tideRedOp_t op) = 0;
  // `count`: elements each rank sends.
  virtual tideResult_t AllGather(const void* send, void* recv, size_t count,
                                 tideDataType_t type) = 0;
  // `count`: elements each rank receives.
  virtual tideResult_t ReduceScatter(const void* send, void* recv, size_t count,
                                     tideDataType_t type, tideRedOp_t op) = 0;
  virtual tideResult_t Broadcast(const void* send, void* recv, size_t count, tideDataType_t type,
                                 int root) = 0;
  virtual tideResult_t Reduce(const void* send, void* recv, size_t count, tideDataType_t type,
                              tideRedOp_t op, int root) = 0;
  // `count`: elements sent to (and received from) each peer.
  virtual tideResult_t AlltoAll(const void* send, void* recv, size_t count,
                                tideDataType_t type) = 0;
  // Sends `count` elements to `to` and receives as many from `from`, as one
  // operation (no ordering deadlock). send == recv: the send reads the
  // original data.
  virtual tideResult_t SendRecv(const void* send, int to, void* recv, int from, size_t count,
                                tideDataType_t type) = 0;

  // Compressed collectives (tide/compress.h; perf/common/compress.h). A
  // backend without them keeps these defaults: CanCompress false, every call
  // tideInvalidUsage. Compressors are local objects of this rank; the
  // collectives take the plain ones' contracts plus the compressor.
  virtual bool CanCompress() const { return false; }
  virtual tideResult_t CompressorCreate(const tideCompressConfig_t& config,
                                        tideCompressor_t* compressor) {
    (void)config;
    (void)compressor;
    return tideInvalidUsage;
  }
  virtual tideResult_t CompressorDestroy(tideCompressor_t compressor) {
    (void)compressor;
    return tideInvalidUsage;
  }
  // Clears the residuals and the rounding position (the next call is a first call).
  virtual tideResult_t CompressorReset(tideCompressor_t compressor) {
    (void)compressor;
    return tideInvalidUsage;
  }
  virtual tideResult_t AllReduceCompressed(const void* send, void* recv, size_t count,
                                           tideDataType_t type, tideRedOp_t op,
                                           tideCompressor_t compressor) {
    (void)send, (void)recv, (void)count, (void)type, (void)op, (void)compressor;
    return tideInvalidUsage;
  }
  virtual tideResult_t ReduceScatterCompressed(const void* send, void* recv, size_t count,
                                               tideDataType_t type, tideRedOp_t op,
                                               tideCompressor_t compressor) {
    (void)send, (void)recv, (void)count, (void)type, (void)op, (void)compressor;
    return tideInvalidUsage;
  }
  virtual tideResult_t AllGatherCompressed(const void* send, void* recv, size_t count,
                                           tideDataType_t type, tideCompressor_t compressor) {
    (void)send, (void)recv, (void)count, (void)type, (void)compressor;
    return tideInvalidUsage;
  }

  // Payload bytes this rank has sent/received since init: {intra-node sent,
  // intra-node received, inter-node sent, inter-node received}. False when the
  // backend cannot tell (then --traffic prints nothing).
  virtual bool Traffic(unsigned long long out[4]) {
    (void)out;
    return false;
  }
};

}  // namespace tide_perf

#endif  // TIDE_PERF_COMMON_BACKEND_H_
