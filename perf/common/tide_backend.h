// The Tide backend of the perf harness: one communicator from
// tideCommInitFromEnv and, unless -z 1, one host stream that every measured
// call is enqueued on. Header-only; included by harness.cc alone (when it is
// not built with TIDE_PERF_MPI), so the Tide tools link exactly the sources
// they always did. Contracts: see backend.h.
#ifndef TIDE_PERF_COMMON_TIDE_BACKEND_H_
#define TIDE_PERF_COMMON_TIDE_BACKEND_H_

#include <cstdio>
#include <string>
#include <vector>

#include "common/backend.h"
#include "tide/compress.h"
#include "tide/tide.h"

namespace tide_perf {

class TideBackend final : public Backend {
 public:
  const char* Name() const override { return "tide"; }
  std::string Describe() override {
    int version = 0;
    tideGetVersion(&version);
    char buf[64];
    std::snprintf(buf, sizeof(buf), "tide library %d", version);
    return buf;
  }
  const char* Unsupported(const DType&, int) const override { return nullptr; }
  std::vector<std::string> Notes(bool) const override { return {}; }

  tideResult_t Init(bool blocking, int* rank, int* nranks) override {
    tideResult_t res = tideCommInitFromEnv(&comm_);
    if (res == tideSuccess) res = tideCommUserRank(comm_, rank);
    if (res == tideSuccess) res = tideCommCount(comm_, nranks);
    if (res == tideSuccess && !blocking) res = tideStreamCreate(&stream_);
    return res;
  }
  tideResult_t Finalize() override {
    tideResult_t res = tideSuccess;
    if (stream_ != nullptr) res = tideStreamDestroy(stream_);
    stream_ = nullptr;
    if (res != tideSuccess) return res;
    res = tideCommDestroy(comm_);
    comm_ = nullptr;
    return res;
  }
  void Abort() override {
    if (comm_ != nullptr) tideCommAbort(comm_);
  }
  const char* ErrorString(tideResult_t res) override { return tideGetErrorString(res); }
  const char* LastError() override { return tideGetLastError(comm_); }

  tideResult_t Sync() override {
    return stream_ != nullptr ? tideStreamSynchronize(stream_) : tideSuccess;
  }
  // On the NULL stream after the host stream drained, so nothing else is in
  // flight on the communicator.
  tideResult_t HostAllReduce(void* data, size_t count, tideDataType_t type,
                             tideRedOp_t op) override {
    tideResult_t res = Sync();
    if (res != tideSuccess) return res;
    return tideAllReduce(data, data, count, type, op, comm_, nullptr);
  }
  tideResult_t HostAllGather(const void* send, void* recv, size_t bytes) override {
    tideResult_t res = Sync();
    if (res != tideSuccess) return res;
    return tideAllGather(send, recv, bytes, tideUint8, comm_, nullptr);
  }

  bool Traffic(unsigned long long out[4]) override {
    tideTraffic_t t;
    t.size = sizeof(t);
    if (tideCommGetTraffic(comm_, &t) != tideSuccess) return false;
    out[0] = t.intraNodeSent;
    out[1] = t.intraNodeRecv;
    out[2] = t.interNodeSent;
    out[3] = t.interNodeRecv;
    return true;
  }

  bool CanCompress() const override { return true; }
  tideResult_t CompressorCreate(const tideCompressConfig_t& config,
                                tideCompressor_t* compressor) override {
    return tideCompressorCreate(comm_, &config, compressor);
  }
  tideResult_t CompressorDestroy(tideCompressor_t compressor) override {
    return tideCompressorDestroy(compressor);
  }
  tideResult_t CompressorReset(tideCompressor_t compressor) override {
    return tideCompressorReset(compressor);
  }
  tideResult_t AllReduceCompressed(const void* send, void* recv, size_t count, tideDataType_t type,
                                   tideRedOp_t op, tideCompressor_t compressor) override {
    return tideAllReduceCompressed(send, recv, count, type, op, compressor, comm_, stream_);
  }
  tideResult_t ReduceScatterCompressed(const void* send, void* recv, size_t count,
                                       tideDataType_t type, tideRedOp_t op,
                                       tideCompressor_t compressor) override {
    return tideReduceScatterCompressed(send, recv, count, type, op, compressor, comm_, stream_);
  }
  tideResult_t AllGatherCompressed(const void* send, void* recv, size_t count, tideDataType_t type,
                                   tideCompressor_t compressor) override {
    return tideAllGatherCompressed(send, recv, count, type, compressor, comm_, stream_);
  }

  tideResult_t AllReduce(const void* send, void* recv, size_t count, tideDataType_t type,
                         tideRedOp_t op) override {
    return tideAllReduce(send, recv, count, type, op, comm_, stream_);
  }
  tideResult_t AllGather(const void* send, void* recv, size_t count, tideDataType_t type) override {
    return tideAllGather(send, recv, count, type, comm_, stream_);
  }
  tideResult_t ReduceScatter(const void* send, void* recv, size_t count, tideDataType_t type,
                             tideRedOp_t op) override {
    return tideReduceScatter(send, recv, count, type, op, comm_, stream_);
  }
  tideResult_t Broadcast(const void* send, void* recv, size_t count, tideDataType_t type,
                         int root) override {
    return tideBroadcast(send, recv, count, type, root, comm_, stream_);
  }
  tideResult_t Reduce(const void* send, void* recv, size_t count, tideDataType_t type,
                      tideRedOp_t op, int root) override {
    return tideReduce(send, recv, count, type, op, root, comm_, stream_);
  }
  tideResult_t AlltoAll(const void* send, void* recv, size_t count, tideDataType_t type) override {
    return tideAlltoAll(send, recv, count, type, comm_, stream_);
  }
  tideResult_t SendRecv(const void* send, int to, void* recv, int from, size_t count,
                        tideDataType_t type) override {
    tideResult_t res = tideGroupStart();
    if (res != tideSuccess) return res;
    const tideResult_t s = tideSend(send, count, type, to, comm_, stream_);
    const tideResult_t r =
        s == tideSuccess ? tideRecv(recv, count, type, from, comm_, stream_) : tideSuccess;
    res = tideGroupEnd();  // always close the group, even after an argument error
    if (s != tideSuccess) return s;
    return r != tideSuccess ? r : res;
  }

 private:
  tideComm_t comm_ = nullptr;
  tideStream_t stream_ = nullptr;  // nullptr in blocking mode (-z 1)
};

}  // namespace tide_perf

#endif  // TIDE_PERF_COMMON_TIDE_BACKEND_H_
