// Lazy CUDA driver loader: see cuda_loader.h for the contract.
#include "cuda/cuda_loader.h"

#include <dlfcn.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace tide::cuda {
namespace {

constexpr int kErrorInsufficientDriver = 35;  // CUDA_ERROR_INSUFFICIENT_DRIVER
constexpr int kErrorStubLibrary = 34;         // CUDA_ERROR_STUB_LIBRARY
constexpr int kErrorNotSupported = 801;       // CUDA_ERROR_NOT_SUPPORTED
constexpr int kErrorNoDevice = 100;           // CUDA_ERROR_NO_DEVICE

struct Loaded {
  GpuProbe probe;
  DriverApi api{};
  bool apiOk = false;
};

bool envTrue(const char* name) {
  const char* v = getenv(name);
  if (v == nullptr || *v == '\0') return false;
  return strcmp(v, "0") != 0 && strcasecmp(v, "false") != 0 && strcasecmp(v, "no") != 0 &&
         strcasecmp(v, "off") != 0;
}

// Resolves one symbol; the versioned name first (e.g. cuMemAlloc_v2).
template <class Fn>
bool resolve(void* lib, Fn* out, const char* name, const char* v2 = nullptr) {
  void* sym = v2 != nullptr ? dlsym(lib, v2) : nullptr;
  if (sym == nullptr) sym = dlsym(lib, name);
  *out = reinterpret_cast<Fn>(sym);
  return sym != nullptr;
}

bool resolveAll(void* lib, DriverApi* a, std::string* missing) {
  bool ok = true;
  auto need = [&](bool found, const char* name) {
    if (!found) {
      ok = false;
      if (!missing->empty()) *missing += ", ";
      *missing += name;
    }
  };
  need(resolve(lib, &a->cuInit, "cuInit"), "cuInit");
  need(resolve(lib, &a->cuDriverGetVersion, "cuDriverGetVersion"), "cuDriverGetVersion");
  need(resolve(lib, &a->cuDeviceGetCount, "cuDeviceGetCount"), "cuDeviceGetCount");
  need(resolve(lib, &a->cuDeviceGet, "cuDeviceGet"), "cuDeviceGet");
  need(resolve(lib, &a->cuDeviceGetAttribute, "cuDeviceGetAttribute"), "cuDeviceGetAttribute");
  need(resolve(lib, &a->cuGetErrorString, "cuGetErrorString"), "cuGetErrorString");
  need(resolve(lib, &a->cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"),
       "cuDevicePrimaryCtxRetain");
  need(resolve(lib, &a->cuCtxGetCurrent, "cuCtxGetCurrent"), "cuCtxGetCurrent");
  need(resolve(lib, &a->cuCtxSetCurrent, "cuCtxSetCurrent"), "cuCtxSetCurrent");
  need(resolve(lib, &a->cuCtxGetDevice, "cuCtxGetDevice"), "cuCtxGetDevice");
  need(resolve(lib, &a->cuPointerGetAttribute, "cuPointerGetAttribute"), "cuPointerGetAttribute");
  need(resolve(lib, &a->cuMemAlloc, "cuMemAlloc", "cuMemAlloc_v2"), "cuMemAlloc");
  need(resolve(lib, &a->cuMemFree, "cuMemFree", "cuMemFree_v2"), "cuMemFree");
  need(resolve(lib, &a->cuMemcpyAsync, "cuMemcpyAsync"), "cuMemcpyAsync");
  need(resolve(lib, &a->cuMemsetD8Async, "cuMemsetD8Async"), "cuMemsetD8Async");
  need(resolve(lib, &a->cuModuleLoadData, "cuModuleLoadData"), "cuModuleLoadData");
  need(resolve(lib, &a->cuModuleGetFunction, "cuModuleGetFunction"), "cuModuleGetFunction");
  need(resolve(lib, &a->cuLaunchKernel, "cuLaunchKernel"), "cuLaunchKernel");
  need(resolve(lib, &a->cuStreamQuery, "cuStreamQuery"), "cuStreamQuery");
  need(resolve(lib, &a->cuStreamCreate, "cuStreamCreate"), "cuStreamCreate");
  need(resolve(lib, &a->cuStreamDestroy, "cuStreamDestroy", "cuStreamDestroy_v2"),
       "cuStreamDestroy");
  need(resolve(lib, &a->cuCtxSynchronize, "cuCtxSynchronize"), "cuCtxSynchronize");
  need(resolve(lib, &a->cuMemHostAlloc, "cuMemHostAlloc"), "cuMemHostAlloc");
  need(resolve(lib, &a->cuMemHostGetDevicePointer, "cuMemHostGetDevicePointer",
               "cuMemHostGetDevicePointer_v2"),
       "cuMemHostGetDevicePointer");
  need(resolve(lib, &a->cuMemFreeHost, "cuMemFreeHost"), "cuMemFreeHost");
  need(resolve(lib, &a->cuIpcGetMemHandle, "cuIpcGetMemHandle"), "cuIpcGetMemHandle");
  need(resolve(lib, &a->cuIpcOpenMemHandle, "cuIpcOpenMemHandle", "cuIpcOpenMemHandle_v2"),
       "cuIpcOpenMemHandle");
  need(resolve(lib, &a->cuIpcCloseMemHandle, "cuIpcCloseMemHandle"), "cuIpcCloseMemHandle");
  need(resolve(lib, &a->cuModuleUnload, "cuModuleUnload"), "cuModuleUnload");
  // Optional (checked where used: core/device/device_stream.cc).
  resolve(lib, &a->cuLaunchHostFunc, "cuLaunchHostFunc");
  resolve(lib, &a->cuStreamWaitValue32, "cuStreamWaitValue32", "cuStreamWaitValue32_v2");
  resolve(lib, &a->cuStreamWriteValue32, "cuStreamWriteValue32", "cuStreamWriteValue32_v2");
  resolve(lib, &a->cuStreamIsCapturing, "cuStreamIsCapturing");
  resolve(lib, &a->cuThreadExchangeStreamCaptureMode, "cuThreadExchangeStreamCaptureMode");
  resolve(lib, &a->cuMemGetHandleForAddressRange, "cuMemGetHandleForAddressRange");
  resolve(lib, &a->cuFlushGPUDirectRDMAWrites, "cuFlushGPUDirectRDMAWrites");
  resolve(lib, &a->cuEventCreate, "cuEventCreate");
  resolve(lib, &a->cuEventRecord, "cuEventRecord");
  resolve(lib, &a->cuEventQuery, "cuEventQuery");
  resolve(lib, &a->cuEventDestroy, "cuEventDestroy", "cuEventDestroy_v2");
  return ok;
}

void doProbe(Loaded* l) {
  GpuProbe& p = l->probe;
  if (envTrue("TIDE_CUDA_DISABLE")) {
    p.state = GpuState::kDisabled;
    p.detail = "CUDA disabled by TIDE_CUDA_DISABLE";
    return;
  }
  // Never the unversioned libcuda.so: on machines without a driver that name
  // usually is the toolkit's stub.
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    p.state = GpuState::kNoDriver;
    const char* err = dlerror();
    p.detail = err != nullptr ? err : "libcuda.so.1 not found";
    return;
  }
  std::string missing;
  if (!resolveAll(lib, &l->api, &missing)) {
    p.state = GpuState::kError;
    p.detail = "CUDA driver lacks " + missing;
    return;
  }
  int rc = l->api.cuInit(0);
  l->api.cuDriverGetVersion(&p.driverVersion);
  if (rc == kErrorStubLibrary) {
    p.state = GpuState::kNoDriver;
    p.detail = "libcuda.so.1 is the toolkit's stub library, not a driver";
    return;
  }
  if (rc == kErrorInsufficientDriver) {
    p.state = GpuState::kInsufficientDriver;
    p.detail = "CUDA driver too old (" + driverErrorString(rc) + ")";
    return;
  }
  if (rc == kErrorNoDevice) {
    p.state = GpuState::kNoDevice;
    p.detail = "no CUDA device (" + driverErrorString(rc) + ")";
    return;
  }
  if (rc != kCudaSuccess) {
    p.state = GpuState::kError;
    p.detail = "cuInit failed: " + driverErrorString(rc);
    return;
  }
  rc = l->api.cuDeviceGetCount(&p.deviceCount);
  if (rc != kCudaSuccess || p.deviceCount <= 0) {
    p.state = GpuState::kNoDevice;
    p.deviceCount = 0;
    p.detail = "no CUDA device visible";
    return;
  }
  p.state = GpuState::kUsable;
  l->apiOk = true;
  char buf[96];
  snprintf(buf, sizeof(buf), "%d CUDA device(s), driver %d.%d", p.deviceCount,
           p.driverVersion / 1000, (p.driverVersion % 1000) / 10);
  p.detail = buf;
}

std::atomic<const DriverApi*> gProbedApi{nullptr};

Loaded& loaded() {
  static Loaded l;
  static std::once_flag once;
  std::call_once(once, [] {
    doProbe(&l);
    if (l.apiOk) gProbedApi.store(&l.api, std::memory_order_release);
  });
  return l;
}

}  // namespace

const GpuProbe& probeGpu() { return loaded().probe; }

const char* gpuStateName(GpuState s) {
  switch (s) {
    case GpuState::kUsable:
      return "usable";
    case GpuState::kDisabled:
      return "disabled";
    case GpuState::kNoDriver:
      return "no driver";
    case GpuState::kInsufficientDriver:
      return "insufficient driver";
    case GpuState::kNoDevice:
      return "no device";
    case GpuState::kError:
      return "error";
  }
  return "?";
}

const DriverApi* driver() {
  Loaded& l = loaded();
  return l.apiOk ? &l.api : nullptr;
}

const DriverApi* driverIfProbed() { return gProbedApi.load(std::memory_order_acquire); }

std::string driverErrorString(int result) {
  const DriverApi* api = driver();
  const char* text = nullptr;
  if (api != nullptr && api->cuGetErrorString(result, &text) != kCudaSuccess) text = nullptr;
  char buf[160];
  snprintf(buf, sizeof(buf), "CUDA error %d%s%s", result, text != nullptr ? ": " : "",
           text != nullptr ? text : "");
  return buf;
}

namespace {
// An unsigned pointer attribute of `ptr`; 0 when it has none or no GPU is usable.
unsigned pointerAttribute(const void* ptr, int attribute) {
  const DriverApi* api = driver();
  if (api == nullptr || ptr == nullptr) return 0;
  unsigned int value = 0;
  const int rc = api->cuPointerGetAttribute(&value, attribute, reinterpret_cast<CuDevPtr>(ptr));
  return rc == kCudaSuccess ? value : 0;
}
}  // namespace

bool isDevicePointer(const void* ptr) {
  return static_cast<int>(pointerAttribute(ptr, kPointerAttrMemoryType)) == kMemoryTypeDevice;
}

bool isManagedPointer(const void* ptr) { return pointerAttribute(ptr, kPointerAttrIsManaged) != 0; }

bool canFlushRdmaWrites() {
  const DriverApi* api = driverIfProbed();
  return api != nullptr && api->cuFlushGPUDirectRDMAWrites != nullptr;
}

int flushRdmaWritesTo(const void* ptr) {
  const DriverApi* api = driverIfProbed();
  if (api == nullptr || ptr == nullptr) return kCudaSuccess;
  if (api->cuFlushGPUDirectRDMAWrites == nullptr) return kErrorNotSupported;
  CuCtx owner = nullptr;
  int rc = api->cuPointerGetAttribute(&owner, kPointerAttrContext, reinterpret_cast<CuDevPtr>(ptr));
  if (rc != kCudaSuccess || owner == nullptr) return kCudaSuccess;  // not device memory
  CuCtx previous = nullptr;
  (void)api->cuCtxGetCurrent(&previous);
  if (previous != owner) {
    rc = api->cuCtxSetCurrent(owner);
    if (rc != kCudaSuccess) return rc;
  }
  rc = api->cuFlushGPUDirectRDMAWrites(kFlushTargetCurrentCtx, kFlushToOwner);
  if (previous != owner) (void)api->cuCtxSetCurrent(previous);
  return rc;
}

bool dmaBufRange(uint64_t ptr, size_t size, uint64_t allocStart, uint64_t allocSize, uint64_t page,
                 uint64_t* start, uint64_t* len) {
  if (size == 0 || page == 0 || (page & (page - 1)) != 0) return false;
  if (ptr + size < ptr) return false;
  const uint64_t lo = ptr & ~(page - 1);
  const uint64_t end = ptr + size;
  const uint64_t hi = (end + page - 1) & ~(page - 1);
  if (hi < end) return false;  // wrapped
  if (allocSize != 0 && (ptr < allocStart || end > allocStart + allocSize)) return false;
  *start = lo;
  *len = hi - lo;
  return true;
}

bool dmaBufSupported(int ordinal) {
  const DriverApi* api = driver();
  if (api == nullptr || api->cuMemGetHandleForAddressRange == nullptr) return false;
  static std::atomic<int> cache[17];  // 0 unknown, 1 yes, 2 no; [16]: any device
  const int slot = ordinal < 0 || ordinal >= 16 ? 16 : ordinal;
  int c = cache[slot].load(std::memory_order_acquire);
  if (c != 0) return c == 1;
  bool yes = false;
  const int first = ordinal < 0 ? 0 : ordinal;
  const int last = ordinal < 0 ? probeGpu().deviceCount - 1 : ordinal;
  for (int d = first; d <= last && !yes; ++d) {
    int dev = 0, v = 0;
    yes = api->cuDeviceGet(&dev, d) == kCudaSuccess &&
          api->cuDeviceGetAttribute(&v, kAttrDmaBufSupported, dev) == kCudaSuccess && v != 0;
  }
  cache[slot].store(yes ? 1 : 2, std::memory_order_release);
  return yes;
}

DmaBufResult exportDmaBuf(const void* ptr, size_t size, int* fd, uint64_t* offset,
                          std::string* why) {
  const DriverApi* api = driver();
  if (api == nullptr) {
    *why = probeGpu().detail;
    return DmaBufResult::kUnsupported;
  }
  if (api->cuMemGetHandleForAddressRange == nullptr) {
    *why = "the CUDA driver lacks cuMemGetHandleForAddressRange";
    return DmaBufResult::kUnsupported;
  }
  if (!isDevicePointer(ptr)) {
    *why = "not CUDA device memory";
    return DmaBufResult::kNotDevice;
  }
  std::string ctxWhy;
  if (ensureContext(&ctxWhy) < 0) {
    *why = ctxWhy;
    return DmaBufResult::kFailed;
  }
  const auto p = reinterpret_cast<CuDevPtr>(ptr);
  CuDevPtr allocStart = 0;
  size_t allocSize = 0;
  if (api->cuPointerGetAttribute(&allocStart, kPointerAttrRangeStart, p) != kCudaSuccess ||
      api->cuPointerGetAttribute(&allocSize, kPointerAttrRangeSize, p) != kCudaSuccess) {
    allocStart = 0;
    allocSize = 0;
  }
  int ordinal = -1;
  if (api->cuPointerGetAttribute(&ordinal, kPointerAttrDeviceOrdinal, p) != kCudaSuccess) {
    ordinal = -1;
  }
  if (!dmaBufSupported(ordinal)) {
    *why = "the GPU does not support dma-buf export (CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED)";
    return DmaBufResult::kUnsupported;
  }
  const long pg = sysconf(_SC_PAGESIZE);
  uint64_t start = 0, len = 0;
  if (!dmaBufRange(p, size, allocStart, allocSize, pg > 0 ? static_cast<uint64_t>(pg) : 4096,
                   &start, &len)) {
    *why = "range is empty or outside its allocation";
    return DmaBufResult::kNotDevice;
  }
  int out = -1;
  const int rc = api->cuMemGetHandleForAddressRange(&out, start, len, kMemRangeHandleDmaBufFd, 0);
  if (rc != kCudaSuccess || out < 0) {
    *why = "cuMemGetHandleForAddressRange: " + driverErrorString(rc);
    return DmaBufResult::kFailed;
  }
  *fd = out;
  *offset = p - start;
  return DmaBufResult::kOk;
}

int ensureContext(std::string* why) {
  const DriverApi* api = driver();
  if (api == nullptr) {
    if (why != nullptr) *why = probeGpu().detail;
    return -1;
  }
  CuCtx ctx = nullptr;
  int dev = 0;
  if (api->cuCtxGetCurrent(&ctx) == kCudaSuccess && ctx != nullptr &&
      api->cuCtxGetDevice(&dev) == kCudaSuccess) {
    return dev;
  }
  int handle = 0;
  int rc = api->cuDeviceGet(&handle, 0);
  if (rc == kCudaSuccess) rc = api->cuDevicePrimaryCtxRetain(&ctx, handle);
  if (rc == kCudaSuccess) rc = api->cuCtxSetCurrent(ctx);
  if (rc != kCudaSuccess) {
    if (why != nullptr) *why = "cannot make a CUDA context current: " + driverErrorString(rc);
    return -1;
  }
  return 0;
}

int waitStream(CuStream stream, double timeoutSeconds) {
  const DriverApi* api = driver();
  if (api == nullptr) return kErrorNoDevice;
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  long sleepNs = 1000;
  for (int iter = 0;; ++iter) {
    const int rc = api->cuStreamQuery(stream);
    if (rc != kCudaErrorNotReady) return rc;
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    if (timeoutSeconds > 0 && waited > timeoutSeconds) return kCudaErrorNotReady;
    if (iter < 64) continue;  // short kernels: spin
    if (waited < 1e-3) {
      sched_yield();
      continue;
    }
    timespec ts{0, sleepNs};
    nanosleep(&ts, nullptr);
    if (sleepNs < 1000000) sleepNs *= 2;
  }
}

}  // namespace tide::cuda
