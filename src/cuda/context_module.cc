// Per-context kernel modules: see context_module.h.
#include "cuda/context_module.h"

#include <cstring>

namespace tide::cuda {

std::vector<unsigned long long> alignedImage(const unsigned char* data, size_t bytes) {
  std::vector<unsigned long long> v((bytes + 7) / 8);
  memcpy(v.data(), data, bytes);
  return v;
}

Status loadModule(const std::vector<unsigned long long>& image, const char* what,
                  const std::vector<KernelSlot>& want, CuModule* mod) {
  const DriverApi* api = driver();
  *mod = nullptr;
  int mode = kCaptureModeRelaxed;
  const bool swap = api->cuThreadExchangeStreamCaptureMode != nullptr;
  if (swap) api->cuThreadExchangeStreamCaptureMode(&mode);
  int rc = api->cuModuleLoadData(mod, image.data());
  if (swap) api->cuThreadExchangeStreamCaptureMode(&mode);
  if (rc != kCudaSuccess) {
    *mod = nullptr;
    return systemError("%s: loading its kernels failed: %s", what, driverErrorString(rc).c_str());
  }
  for (const auto& [name, slot] : want) {
    rc = api->cuModuleGetFunction(slot, *mod, name.c_str());
    if (rc != kCudaSuccess) {
      api->cuModuleUnload(*mod);
      *mod = nullptr;
      return systemError("%s: kernel %s missing from its module: %s", what, name.c_str(),
                         driverErrorString(rc).c_str());
    }
  }
  return Status::Ok();
}

namespace {
struct CtxStream {
  CuCtx ctx = nullptr;
  CuStream stream = nullptr;
};
ModulesPerContext<CtxStream> gStreams;
}  // namespace

Status contextStream(CuStream* out) {
  *out = nullptr;
  CtxStream* cs = nullptr;
  TIDE_TRY(gStreams.get(
      [](CtxStream* c) {
        const int rc = driver()->cuStreamCreate(&c->stream, kStreamNonBlocking);
        if (rc == kCudaSuccess) return Status::Ok();
        return systemError("cuStreamCreate (private stream): %s", driverErrorString(rc).c_str());
      },
      &cs));
  *out = cs->stream;
  return Status::Ok();
}

}  // namespace tide::cuda
