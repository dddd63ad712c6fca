// The CUDA driver entry points the gpu-suite tests of the public API use,
// opened with dlopen (the tests build without CUDA), and a bounded stream
// wait. Header-only; one table per test program.
#pragma once

#include <dlfcn.h>

#include <chrono>
#include <string>
#include <thread>

namespace gpu_test {

using CuDevPtr = unsigned long long;
struct Cuda {
  int (*init)(unsigned);
  int (*deviceGet)(int*, int);
  int (*primaryCtxRetain)(void**, int);
  int (*ctxSetCurrent)(void*);
  int (*memAlloc)(CuDevPtr*, size_t);
  int (*memFree)(CuDevPtr);
  int (*htod)(CuDevPtr, const void*, size_t);
  int (*htodAsync)(CuDevPtr, const void*, size_t, void*);
  int (*dtoh)(void*, CuDevPtr, size_t);
  int (*streamCreate)(void**, unsigned);
  int (*streamDestroy)(void*);
  int (*streamQuery)(void*);
  int (*beginCapture)(void*, int);
  int (*endCapture)(void*, void**);
  int (*instantiate)(void**, void*, unsigned long long);
  int (*graphLaunch)(void*, void*);
  int (*graphExecDestroy)(void*);
  int (*graphDestroy)(void*);
  void* ctx = nullptr;
};
inline Cuda cu;

template <class F>
bool sym(void* h, F* out, const char* name) {
  *out = reinterpret_cast<F>(dlsym(h, name));
  return *out != nullptr;
}

inline bool loadCuda(std::string* why) {
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    *why = "no libcuda.so.1";
    return false;
  }
  bool ok = sym(h, &cu.init, "cuInit") && sym(h, &cu.deviceGet, "cuDeviceGet") &&
            sym(h, &cu.primaryCtxRetain, "cuDevicePrimaryCtxRetain") &&
            sym(h, &cu.ctxSetCurrent, "cuCtxSetCurrent") && sym(h, &cu.memAlloc, "cuMemAlloc_v2") &&
            sym(h, &cu.memFree, "cuMemFree_v2") && sym(h, &cu.htod, "cuMemcpyHtoD_v2") &&
            sym(h, &cu.htodAsync, "cuMemcpyHtoDAsync_v2") && sym(h, &cu.dtoh, "cuMemcpyDtoH_v2") &&
            sym(h, &cu.streamCreate, "cuStreamCreate") &&
            sym(h, &cu.streamDestroy, "cuStreamDestroy_v2") &&
            sym(h, &cu.streamQuery, "cuStreamQuery") &&
            sym(h, &cu.beginCapture, "cuStreamBeginCapture_v2") &&
            sym(h, &cu.endCapture, "cuStreamEndCapture") &&
            sym(h, &cu.instantiate, "cuGraphInstantiateWithFlags") &&
            sym(h, &cu.graphLaunch, "cuGraphLaunch") &&
            sym(h, &cu.graphExecDestroy, "cuGraphExecDestroy") &&
            sym(h, &cu.graphDestroy, "cuGraphDestroy");
  if (!ok) {
    *why = "libcuda.so.1 lacks a needed symbol (stub library or old driver)";
    return false;
  }
  int rc = cu.init(0);
  if (rc != 0) {
    *why = "cuInit failed with " + std::to_string(rc);
    return false;
  }
  int dev = 0;
  if (cu.deviceGet(&dev, 0) != 0 || cu.primaryCtxRetain(&cu.ctx, dev) != 0) {
    *why = "no CUDA device";
    return false;
  }
  return true;
}

// Waits for stream `s` for at most `seconds`: a hang becomes a failure.
inline bool syncStream(void* s, double seconds = 120) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (int i = 0; std::chrono::steady_clock::now() < end; ++i) {
    int rc = cu.streamQuery(s);
    if (rc == 0) return true;
    if (rc != 600) return false;  // CUDA_ERROR_NOT_READY
    if (i > 100) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return false;
}

// Copies `bytes` from host memory to `dst` in order on stream `s` and waits
// for it: a plain cuMemcpyHtoD from pageable memory may return before the data
// reaches the GPU, and a non-blocking stream is not ordered after it.
inline bool htodOn(void* s, CuDevPtr dst, const void* src, size_t bytes) {
  return cu.htodAsync(dst, src, bytes, s) == 0 && syncStream(s);
}

}  // namespace gpu_test
