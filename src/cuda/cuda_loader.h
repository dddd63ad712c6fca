// Lazy loader for the CUDA driver API (libcuda.so.1).
//
// Nothing here links against CUDA: the driver is opened with dlopen on the
// first call that needs it, so the same binary runs on machines without a
// GPU, without a driver, or with only the toolkit's stub library. "No driver"
// (library missing, or the stub), "insufficient driver" (CUDA error 35) and
// "no device" (error 100, or zero devices) all mean: no GPU. TIDE_CUDA_DISABLE
// forces that answer without touching the driver.
//
// This file depends on nothing but libc and libdl, so that both libtide.so
// and the NCCL shim (shim/) can compile it. Thread-safe; never aborts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tide::cuda {

enum class GpuState {
  kUsable,              // driver loaded, cuInit succeeded, >= 1 device
  kDisabled,            // TIDE_CUDA_DISABLE=1
  kNoDriver,            // no libcuda.so.1, or the toolkit's stub library
  kInsufficientDriver,  // driver older than the runtime/toolkit (error 35)
  kNoDevice,            // driver present, no device visible (error 100)
  kError,               // any other driver failure
};

struct GpuProbe {
  GpuState state = GpuState::kNoDriver;
  int deviceCount = 0;
  int driverVersion = 0;  // cuDriverGetVersion, 0 when unknown
  std::string detail;     // one line: why (not) usable
};

// Probes once (dlopen + cuInit + device count); later calls return the same
// answer. The first call may block for as long as cuInit takes.
const GpuProbe& probeGpu();
inline bool gpuUsable() { return probeGpu().state == GpuState::kUsable; }
const char* gpuStateName(GpuState s);

// Opaque driver handles (CUcontext, CUmodule, CUfunction, CUstream).
using CuCtx = void*;
using CuModule = void*;
using CuFunction = void*;
using CuStream = void*;
using CuEvent = void*;
using CuDevPtr = unsigned long long;
// CUipcMemHandle: 64 opaque bytes, passed by value.
struct CuIpcMemHandle {
  char reserved[64];
};

// The subset of the driver API Tide uses; CUresult is an int (0 = success).
struct DriverApi {
  int (*cuInit)(unsigned int flags);
  int (*cuDriverGetVersion)(int* version);
  int (*cuDeviceGetCount)(int* count);
  int (*cuDeviceGet)(int* device, int ordinal);
  int (*cuDeviceGetAttribute)(int* value, int attrib, int device);
  int (*cuGetErrorString)(int result, const char** str);
  int (*cuDevicePrimaryCtxRetain)(CuCtx* ctx, int device);
  int (*cuCtxGetCurrent)(CuCtx* ctx);
  int (*cuCtxSetCurrent)(CuCtx ctx);
  int (*cuCtxGetDevice)(int* device);
  int (*cuPointerGetAttribute)(void* data, int attribute, CuDevPtr ptr);
  int (*cuMemAlloc)(CuDevPtr* ptr, size_t bytes);  // cuMemAlloc_v2
  int (*cuMemFree)(CuDevPtr ptr);                  // cuMemFree_v2
  int (*cuMemcpyAsync)(CuDevPtr dst, CuDevPtr src, size_t bytes, CuStream stream);
  int (*cuMemsetD8Async)(CuDevPtr dst, unsigned char value, size_t n, CuStream stream);
  int (*cuModuleLoadData)(CuModule* module, const void* image);
  int (*cuModuleGetFunction)(CuFunction* fn, CuModule module, const char* name);
  int (*cuLaunchKernel)(CuFunction fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                        unsigned by, unsigned bz, unsigned sharedBytes, CuStream stream,
                        void** params, void** extra);
  int (*cuStreamQuery)(CuStream stream);
  // Device All-Reduce engine (device_coll.cc) and its GPU tests.
  int (*cuStreamCreate)(CuStream* stream, unsigned int flags);
  int (*cuStreamDestroy)(CuStream stream);  // cuStreamDestroy_v2
  int (*cuCtxSynchronize)();
  int (*cuMemHostAlloc)(void** ptr, size_t bytes, unsigned int flags);
  int (*cuMemHostGetDevicePointer)(CuDevPtr* dptr, void* host, unsigned int flags);  // _v2
  int (*cuMemFreeHost)(void* ptr);
  int (*cuIpcGetMemHandle)(CuIpcMemHandle* handle, CuDevPtr ptr);
  int (*cuIpcOpenMemHandle)(CuDevPtr* ptr, CuIpcMemHandle handle, unsigned int flags);  // _v2
  int (*cuIpcCloseMemHandle)(CuDevPtr ptr);
  int (*cuModuleUnload)(CuModule module);
  // Stream-ordered device path (core/device/device_stream.cc). Optional: a driver
  // without them still probes usable; the path then fails with a clear error.
  int (*cuLaunchHostFunc)(CuStream stream, void (*fn)(void*), void* userData);
  int (*cuStreamWaitValue32)(CuStream stream, CuDevPtr addr, unsigned value,
                             unsigned flags);  // cuStreamWaitValue32_v2
  int (*cuStreamWriteValue32)(CuStream stream, CuDevPtr addr, unsigned value,
                              unsigned flags);               // cuStreamWriteValue32_v2
  int (*cuStreamIsCapturing)(CuStream stream, int* status);  // CUstreamCaptureStatus
  int (*cuThreadExchangeStreamCaptureMode)(int* mode);       // CUstreamCaptureMode
  // Events marking the engine's last launch on each stream (device_coll_launch.cc),
  // so close() never queries a stream the application may have destroyed.
  // Optional: without them close() does not wait for the streams.
  int (*cuEventCreate)(CuEvent* event, unsigned int flags);
  int (*cuEventRecord)(CuEvent event, CuStream stream);
  int (*cuEventQuery)(CuEvent event);
  int (*cuEventDestroy)(CuEvent event);  // cuEventDestroy_v2
  // GPUDirect RDMA through dma-buf (CUDA 11.7+). Optional: null means the
  // driver cannot export device memory as a dma-buf.
  int (*cuMemGetHandleForAddressRange)(void* handle, CuDevPtr ptr, size_t size, int handleType,
                                       unsigned long long flags);
  // Makes a NIC's completed writes into device memory visible to the GPU
  // before a stream reads them (CUDA 11.3+). Optional: without it, receives
  // into device memory are staged (core/device/device_stream_gdr.cc).
  int (*cuFlushGPUDirectRDMAWrites)(int target, int scope);
};

// Null unless probeGpu() says kUsable.
const DriverApi* driver();
// As driver(), but never probes: null until something else did (cheap; for
// checks on hot paths that must not load the driver in host-only programs).
const DriverApi* driverIfProbed();

// "CUDA_ERROR_xxx: text" for a driver result (works without a driver too).
std::string driverErrorString(int result);

// Driver constants used by Tide (values from the CUDA driver API).
inline constexpr int kCudaSuccess = 0;
inline constexpr int kCudaErrorNotReady = 600;
inline constexpr int kPointerAttrMemoryType = 2;  // CU_POINTER_ATTRIBUTE_MEMORY_TYPE
inline constexpr int kMemoryTypeDevice = 2;       // CU_MEMORYTYPE_DEVICE
inline constexpr int kAttrMultiprocessorCount = 16;
inline constexpr unsigned kStreamNonBlocking = 1;        // CU_STREAM_NON_BLOCKING
inline constexpr unsigned kEventDisableTiming = 2;       // CU_EVENT_DISABLE_TIMING
inline constexpr unsigned kMemHostAllocPortable = 1;     // CU_MEMHOSTALLOC_PORTABLE
inline constexpr unsigned kMemHostAllocDeviceMap = 2;    // CU_MEMHOSTALLOC_DEVICEMAP
inline constexpr unsigned kIpcLazyEnablePeerAccess = 1;  // CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS
inline constexpr unsigned kStreamWaitValueEq = 1;        // CU_STREAM_WAIT_VALUE_EQ
inline constexpr int kCaptureStatusNone = 0;             // CU_STREAM_CAPTURE_STATUS_NONE
inline constexpr int kCaptureStatusActive = 1;           // CU_STREAM_CAPTURE_STATUS_ACTIVE
inline constexpr int kCaptureModeRelaxed = 2;            // CU_STREAM_CAPTURE_MODE_RELAXED
inline constexpr int kPointerAttrRangeStart = 11;        // CU_POINTER_ATTRIBUTE_RANGE_START_ADDR
inline constexpr int kPointerAttrRangeSize = 12;         // CU_POINTER_ATTRIBUTE_RANGE_SIZE
inline constexpr int kPointerAttrDeviceOrdinal = 9;      // CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
inline constexpr int kAttrDmaBufSupported = 124;         // CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED
inline constexpr int kMemRangeHandleDmaBufFd = 1;        // CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD
inline constexpr int kPointerAttrContext = 1;            // CU_POINTER_ATTRIBUTE_CONTEXT
inline constexpr int kPointerAttrIsManaged = 8;          // CU_POINTER_ATTRIBUTE_IS_MANAGED
// CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX and _TO_OWNER:
inline constexpr int kFlushTargetCurrentCtx = 0;
inline constexpr int kFlushToOwner = 100;

// True when `ptr` is device memory (cudaMalloc / cuMemAlloc / VMM) of any
// context. False for host memory, unknown pointers and when no GPU is usable.
bool isDevicePointer(const void* ptr);
// True when `ptr` is CUDA managed (unified) memory. Such memory is not
// registered with a NIC (GPUDirect RDMA stages it). False without a GPU.
bool isManagedPointer(const void* ptr);
// True when the driver can flush GPUDirect RDMA writes
// (cuFlushGPUDirectRDMAWrites). Does not probe: false until the driver is loaded.
bool canFlushRdmaWrites();
// Makes the NIC writes that completed into `ptr`'s device memory visible to
// its context (cuFlushGPUDirectRDMAWrites to the owner, with that context made
// current on the calling thread and restored after). Returns the driver's
// result (kCudaSuccess; also for memory that is not device memory).
int flushRdmaWritesTo(const void* ptr);

// dma-buf export of device memory (GPUDirect RDMA, include/tide/net.h's
// tideNetDmaBufFd). kOk: *fd covers the host-page-aligned range around
// [ptr, ptr + size) and *offset = ptr - range start; the caller closes *fd.
enum class DmaBufResult { kOk, kNotDevice, kUnsupported, kFailed };
DmaBufResult exportDmaBuf(const void* ptr, size_t size, int* fd, uint64_t* offset,
                          std::string* why);
// Pure part of exportDmaBuf: the page-aligned range [*start, *start + *len)
// covering [ptr, ptr + size) within the allocation [allocStart, allocStart +
// allocSize) (allocSize 0: unknown, not clamped). False when it does not fit.
bool dmaBufRange(uint64_t ptr, size_t size, uint64_t allocStart, uint64_t allocSize, uint64_t page,
                 uint64_t* start, uint64_t* len);
// True when the driver has the export call and device `ordinal` (-1: any
// visible device) reports dma-buf support. Probes the driver; cached.
bool dmaBufSupported(int ordinal);

// Makes the primary context of the calling thread's current device (device 0
// when the thread has none) current. Returns the device ordinal, or -1 and
// fills *why on failure.
int ensureContext(std::string* why);

// Waits until `stream` has finished its work: spins briefly, yields, then
// sleeps in growing slices up to 1 ms. Returns the driver error, or
// kCudaErrorNotReady when `timeoutSeconds` (> 0) passed first.
int waitStream(CuStream stream, double timeoutSeconds);

}  // namespace tide::cuda
