// Kernel modules per CUDA context. A fat binary is loaded once into each
// context that uses it and kept for the life of the process: contexts outlive
// the engines and kernel calls that use their modules, and unloading a module
// another thread may still launch from is never safe.
//
// Thread-safety: ModulesPerContext is safe to call from any thread; the
// modules it hands out are immutable after loading.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "cuda/cuda_loader.h"
#include "tide/tide.h"

namespace tide::cuda {

// A kernel to resolve by name and the slot that receives it.
using KernelSlot = std::pair<std::string, CuFunction*>;

// Adds "<prefix>_<dtype>_<op>" for every dtype < tideNumTypes and op < kOps
// to `want`, resolved into table[dtype][op].
template <size_t kOps>
void wantPerTypeAndOp(std::vector<KernelSlot>* want, const std::string& prefix,
                      CuFunction (*table)[kOps]) {
  for (int t = 0; t < tideNumTypes; ++t) {
    for (size_t o = 0; o < kOps; ++o) {
      want->emplace_back(prefix + "_" + std::to_string(t) + "_" + std::to_string(o), &table[t][o]);
    }
  }
}

// Copy of a bin2c array with the 8-byte alignment cuModuleLoadData wants
// (bin2c's arrays have none).
std::vector<unsigned long long> alignedImage(const unsigned char* data, size_t bytes);

// Loads `image` into the calling thread's current context and resolves every
// kernel of `want`. The thread's stream-capture mode is relaxed meanwhile, so
// a first use during a CUDA graph capture works. On failure nothing stays
// loaded; the status names `what` and the failing kernel.
Status loadModule(const std::vector<unsigned long long>& image, const char* what,
                  const std::vector<KernelSlot>& want, CuModule* mod);

// The modules of one kind M (a struct with `CuCtx ctx`), one per context.
template <class M>
class ModulesPerContext {
 public:
  // The module of the calling thread's current context: one loaded earlier,
  // or a new one that `load(M*)` fills (its ctx already set) and that is kept
  // when load returns Ok. Serializes loads (held lock while loading).
  template <class Load>
  Status get(Load&& load, M** out) {
    *out = nullptr;
    CuCtx ctx = nullptr;
    driver()->cuCtxGetCurrent(&ctx);
    std::lock_guard<std::mutex> lock(mu_);
    for (M* m : mods_) {
      if (m->ctx == ctx) {
        *out = m;
        return Status::Ok();
      }
    }
    auto m = std::make_unique<M>();
    m->ctx = ctx;
    TIDE_TRY(load(m.get()));
    mods_.push_back(m.get());
    *out = m.release();  // never freed: see the file comment
    return Status::Ok();
  }

 private:
  std::mutex mu_;
  std::vector<M*> mods_;
};

// One private non-blocking stream per context, created on first use and
// kept for the process's life, for the engines' set-up work (clearing
// flags): creating and destroying streams per engine could move a later
// stream of the application onto a hardware queue a spinning kernel already
// occupies. Not the legacy stream, which would join a capture running on the
// caller's stream. Thread-safe; the caller must not destroy the stream.
Status contextStream(CuStream* out);

}  // namespace tide::cuda
