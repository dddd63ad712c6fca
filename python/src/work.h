// One asynchronous operation of a ProcessGroupTide: the c10d::Work that
// torch.distributed hands back (wait(), is_completed(), get_future()). It is
// completed on the process group's Tide host stream by a stream callback
// (tideStreamAddCallback), queued right behind the operation's calls, so it
// completes when they have, with their first error.
//
// Threads: built and launched on the issuing thread; staged inputs are copied
// in and staged outputs copied back on the stream's thread, in stream order
// (so an earlier queued operation's result is what gets sent); then waiters
// are woken and the future's callbacks run, on that thread.
#pragma once

#include <ATen/ATen.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <utility>
#include <vector>

#include "tide/tide.h"

namespace tide_torch {

// Works whose last reference the stream's thread would drop: destroyed on the
// issuing side instead (the next launch, or the group's end), because
// freeing a tensor that has a Python object takes the GIL, which the stream's
// thread must never wait for. Thread-safe.
class Graveyard {
 public:
  void Bury(c10::intrusive_ptr<c10d::Work> work) {
    std::lock_guard<std::mutex> lock(mu_);
    dead_.push_back(std::move(work));
  }
  // Destroys the buried works on the calling thread.
  void Clear() {
    std::vector<c10::intrusive_ptr<c10d::Work>> dead;
    {
      std::lock_guard<std::mutex> lock(mu_);
      dead.swap(dead_);
    }
  }

 private:
  std::mutex mu_;
  std::vector<c10::intrusive_ptr<c10d::Work>> dead_;
};

class WorkTide : public c10d::Work {
 public:
  // `outputs`: what result() and the future's value are (torch's convention:
  // the tensors the operation wrote; for DDP's buckets, the bucket).
  WorkTide(int rank, c10d::OpType type, std::vector<at::Tensor> outputs, int source_rank = -1);
  void SetGraveyard(std::shared_ptr<Graveyard> g) { graveyard_ = std::move(g); }
  const std::shared_ptr<Graveyard>& graveyard() const { return graveyard_; }

  // Keeps `t` alive until the operation completes (inputs, staging buffers).
  void Keep(at::Tensor t) { keep_.push_back(std::move(t)); }
  // Copies `from` into `to` on the stream before the operation's calls run.
  void CopyIn(at::Tensor from, at::Tensor to) {
    copy_in_.emplace_back(std::move(from), std::move(to));
  }
  // Copies `from` into `to` on the stream once the calls have succeeded.
  void CopyBack(at::Tensor from, at::Tensor to) {
    copy_back_.emplace_back(std::move(from), std::move(to));
  }
  bool HasCopyIn() const { return !copy_in_.empty(); }

  // Stream callbacks (never throw).
  void RunCopyIn() noexcept;
  void Complete(tideResult_t status, const char* message) noexcept;
  // What the exception says, e.g. "tide allreduce: remote error: rank 1 ...".
  void SetWhat(std::string what) { what_ = std::move(what); }

  bool wait(std::chrono::milliseconds timeout) override;
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  int sourceRank() const override;

 private:
  std::vector<at::Tensor> outputs_;
  std::vector<at::Tensor> keep_;
  std::vector<std::pair<at::Tensor, at::Tensor>> copy_in_, copy_back_;
  std::string copy_error_;  // a failed staging copy (reported at completion)
  std::string what_;
  int source_rank_;
  std::atomic<bool> done_{false};
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::shared_ptr<Graveyard> graveyard_;
};

// The stream callbacks' trampolines: `data` is a WorkTide*. AfterCalls owns
// one reference (taken by the launcher with intrusive_ptr::release()).
void StreamCopyIn(tideStream_t stream, tideResult_t status, const char* message, void* data);
void StreamAfterCalls(tideStream_t stream, tideResult_t status, const char* message, void* data);

// Tide's datatype for a tensor's dtype (bool travels as uint8). Throws
// (c10::Error, a Python RuntimeError) for what Tide has no type for.
tideDataType_t TideType(const at::Tensor& t);
// Tide's op for torch's reduce op on `dtype` (bool: SUM/BOR as MAX,
// PRODUCT/BAND as MIN). Throws for what Tide has no op for.
tideRedOp_t TideOp(const c10d::ReduceOp& op, at::ScalarType dtype);
// Throws unless `t` is a dense CPU tensor.
void CheckCpuDense(const at::Tensor& t, const char* what);

}  // namespace tide_torch
