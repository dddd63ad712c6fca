// libnccl.so.2 (see nccl_api.cc): buffer registration, symmetric memory
// windows (not supported) and ncclMemAlloc / ncclMemFree.
#include <stdlib.h>

#include <cstddef>
#include <string>

#include "cuda/cuda_loader.h"
#include "shim/shim_internal.h"

using tide::shim::fail;
namespace shim = tide::shim;

// ---- Buffer registration and memory ---------------------------------------------
// Tide needs no registration: handles only remember the range.

namespace {
struct Registration {
  void* buff;
  size_t size;
};
}  // namespace

SHIM_API ncclResult_t pncclCommRegister(const ncclComm_t comm, void* buff, size_t size,
                                        void** handle) {
  return shim::guarded(comm, "ncclCommRegister", [&]() -> ncclResult_t {
    if (comm == nullptr || handle == nullptr) {
      return fail(comm, ncclInvalidArgument, "ncclCommRegister: comm or handle is NULL");
    }
    *handle = new Registration{buff, size};
    return ncclSuccess;
  });
}
SHIM_ALIAS(ncclCommRegister)

SHIM_API ncclResult_t pncclCommDeregister(const ncclComm_t comm, void* handle) {
  if (comm == nullptr || handle == nullptr) {
    return fail(comm, ncclInvalidArgument, "ncclCommDeregister: comm or handle is NULL");
  }
  delete static_cast<Registration*>(handle);
  return ncclSuccess;
}
SHIM_ALIAS(ncclCommDeregister)

SHIM_API ncclResult_t pncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size,
                                              ncclWindow_t* win, int winFlags) {
  (void)buff;
  (void)size;
  (void)winFlags;
  if (win != nullptr) *win = nullptr;
  return fail(comm, ncclInvalidUsage,
              "ncclCommWindowRegister: symmetric memory windows are not supported by Tide");
}
SHIM_ALIAS(ncclCommWindowRegister)

SHIM_API ncclResult_t pncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  (void)win;
  return fail(comm, ncclInvalidUsage,
              "ncclCommWindowDeregister: symmetric memory windows are not supported by Tide");
}
SHIM_ALIAS(ncclCommWindowDeregister)

SHIM_API ncclResult_t pncclMemAlloc(void** ptr, size_t size) {
  if (ptr == nullptr) return fail(nullptr, ncclInvalidArgument, "ncclMemAlloc: ptr is NULL");
  *ptr = nullptr;
  if (size == 0) return ncclSuccess;
  std::string why;
  const shim::Mode mode = shim::runMode(&why);
  if (mode == shim::Mode::kNone)
    return fail(nullptr, ncclUnhandledCudaError, "ncclMemAlloc: %s", why.c_str());
  if (mode == shim::Mode::kHost) {
    if (posix_memalign(ptr, 4096, size) != 0) {
      *ptr = nullptr;
      return fail(nullptr, ncclSystemError, "ncclMemAlloc: %zu bytes: out of host memory", size);
    }
    return ncclSuccess;
  }
  if (tide::cuda::ensureContext(&why) < 0)
    return fail(nullptr, ncclUnhandledCudaError, "ncclMemAlloc: %s", why.c_str());
  tide::cuda::CuDevPtr p = 0;
  const int rc = tide::cuda::driver()->cuMemAlloc(&p, size);
  if (rc != 0) {
    return fail(nullptr, ncclUnhandledCudaError, "ncclMemAlloc: %zu bytes: %s", size,
                tide::cuda::driverErrorString(rc).c_str());
  }
  *ptr = reinterpret_cast<void*>(p);
  return ncclSuccess;
}
SHIM_ALIAS(ncclMemAlloc)

SHIM_API ncclResult_t pncclMemFree(void* ptr) {
  if (ptr == nullptr) return ncclSuccess;
  if (tide::cuda::isDevicePointer(ptr)) {
    const int rc = tide::cuda::driver()->cuMemFree(reinterpret_cast<tide::cuda::CuDevPtr>(ptr));
    if (rc != 0) {
      return fail(nullptr, ncclUnhandledCudaError, "ncclMemFree: %s",
                  tide::cuda::driverErrorString(rc).c_str());
    }
    return ncclSuccess;
  }
  if (shim::runMode(nullptr) == shim::Mode::kHost) {
    free(ptr);
    return ncclSuccess;
  }
  return fail(nullptr, ncclInvalidArgument, "ncclMemFree: %p was not allocated by ncclMemAlloc",
              ptr);
}
SHIM_ALIAS(ncclMemFree)
