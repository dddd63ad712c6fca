// Staging of device buffers through host memory (see staging.h).
#include "shim/staging.h"

#include <string>

#include "cuda/cuda_loader.h"
#include "shim/shim_internal.h"
#include "tide/tide.h"

namespace tide::shim {

namespace {

constexpr double kStreamWaitSeconds = 600.0;

ncclResult_t copyOnStream(ncclComm_t comm, const char* what, void* dst, const void* src,
                          size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return ncclSuccess;
  const cuda::DriverApi* api = cuda::driver();
  if (api == nullptr) return fail(comm, ncclUnhandledCudaError, "%s: no CUDA driver", what);
  auto s = reinterpret_cast<cuda::CuStream>(stream);
  int rc = api->cuMemcpyAsync(reinterpret_cast<cuda::CuDevPtr>(dst),
                              reinterpret_cast<cuda::CuDevPtr>(src), bytes, s);
  if (rc == 0) rc = cuda::waitStream(s, kStreamWaitSeconds);
  if (rc != 0) {
    return fail(comm, ncclUnhandledCudaError, "%s: staging %zu bytes: %s", what, bytes,
                cuda::driverErrorString(rc).c_str());
  }
  return ncclSuccess;
}

}  // namespace

Staging::Staging(ncclComm_t comm, const char* what, cudaStream_t stream, bool stage, Plan plan)
    : comm_(comm), what_(what), stream_(stream), stage_(stage), plan_(std::move(plan)) {}

void Staging::input(const void* buf, size_t bytes) {
  in_ = buf;
  inBytes_ = bytes;
}

void Staging::output(void* buf, size_t bytes, bool copyBack) {
  out_ = buf;
  outBytes_ = bytes;
  copyBack_ = copyBack;
}

ncclResult_t Staging::pull() {
  int rank = 0;
  int nranks = 1;
  if (comm_->tide != nullptr) {
    tideCommUserRank(comm_->tide, &rank);
    tideCommCount(comm_->tide, &nranks);
  }
  if (plan_) plan_(*this, rank, nranks);
  if (!stage_) return ncclSuccess;
  std::string why;
  if ((in_ != nullptr && cuda::isDevicePointer(in_)) ||
      (out_ != nullptr && cuda::isDevicePointer(out_))) {
    if (cuda::ensureContext(&why) < 0) {
      return fail(comm_, ncclUnhandledCudaError, "%s: %s", what_, why.c_str());
    }
  }
  if (out_ != nullptr && outBytes_ > 0 && cuda::isDevicePointer(out_)) {
    outStore_.resize(outBytes_);
    outHost_ = outStore_.data();
  }
  if (in_ != nullptr && inBytes_ > 0 && cuda::isDevicePointer(in_)) {
    inStore_.resize(inBytes_);
    inHost_ = inStore_.data();
    return copyOnStream(comm_, what_, inHost_, in_, inBytes_, stream_);
  }
  // Host inputs (or none): the caller's stream must still have drained.
  const int rc = cuda::waitStream(reinterpret_cast<cuda::CuStream>(stream_), kStreamWaitSeconds);
  if (rc != 0) {
    return fail(comm_, ncclUnhandledCudaError, "%s: waiting for the stream: %s", what_,
                cuda::driverErrorString(rc).c_str());
  }
  return ncclSuccess;
}

tideStream_t Staging::tideStream() const {
  if (comm_->hostMode || stage_) return nullptr;
  return reinterpret_cast<tideStream_t>(stream_ != nullptr ? stream_ : cudaStreamLegacy);
}

ncclResult_t Staging::push() {
  if (outHost_ == nullptr || !copyBack_) return ncclSuccess;
  return copyOnStream(comm_, what_, out_, outHost_, outBytes_, stream_);
}

}  // namespace tide::shim
