// The buffers of one NCCL call as Tide sees them (part of the NCCL shim; not
// installed).
//
// Normally nothing is staged here: the caller's buffers (device or host) and
// its cudaStream_t go straight to Tide, whose core orders the operation on
// the stream (asynchronous, capturable in CUDA graphs; core/device/device_stream.h).
// Only a PreMulSum, which the shim scales on the host, and calls on the NULL
// (legacy default) stream, which ranks as threads share, still stage
// synchronously: a device input is copied to host memory on the caller's
// stream and waited for, the Tide collective runs blocking, and the result
// is copied back and waited for (not capturable).
#pragma once

#include <nccl.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "tide/tide.h"

namespace tide::shim {

class Staging {
 public:
  // Declares the buffers once the communicator's rank and size are known:
  // calls input()/output() for the buffers this rank reads/writes.
  using Plan = std::function<void(Staging& st, int rank, int nranks)>;

  // `stage`: whether device pointers are to be staged (false: pass-through).
  Staging(ncclComm_t comm, const char* what, cudaStream_t stream, bool stage, Plan plan);

  // Declares the `bytes` this rank reads from `buf` / writes to `buf`
  // (either may be a device or a host pointer). At most one of each.
  // `copyBack` false: a scratch-only output (a non-root's receive buffer
  // that NCCL leaves untouched) gets host space but is never copied back.
  void input(const void* buf, size_t bytes);
  void output(void* buf, size_t bytes, bool copyBack = true);

  // Runs the plan and copies device inputs to host memory, waiting for the
  // caller's stream. Records the error (fail()) and returns it on failure.
  ncclResult_t pull();
  // Copies host results to the device outputs and waits for the stream.
  ncclResult_t push();

  // What to hand to Tide: the host copy of a staged buffer, else the
  // caller's pointer. Valid after pull().
  const void* in() const { return inHost_ != nullptr ? inHost_ : in_; }
  void* out() const { return outHost_ != nullptr ? outHost_ : out_; }
  // The stream to hand Tide: the caller's CUDA stream (the legacy default
  // stream for NULL), or NULL (blocking) in host-buffer mode and when staging.
  tideStream_t tideStream() const;

 private:
  ncclComm_t comm_;
  const char* what_;
  cudaStream_t stream_;
  bool stage_;
  Plan plan_;
  const void* in_ = nullptr;
  size_t inBytes_ = 0;
  void* out_ = nullptr;
  size_t outBytes_ = 0;
  bool copyBack_ = true;
  void* inHost_ = nullptr;
  void* outHost_ = nullptr;
  std::vector<char> inStore_, outStore_;
};

}  // namespace tide::shim
