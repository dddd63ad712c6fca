// ProcessGroupTide: torch.distributed's ProcessGroup over one Tide
// communicator. Every operation is queued on the group's Tide host stream and
// returns at once with a WorkTide (work.h); the stream runs them in the order
// they were issued, which is the order torch.distributed's contract already
// asks every rank to issue them in.
//
// Rendezvous: rank 0 makes a Tide unique id and puts it into the c10d store
// the group was given (a PrefixStore per group); the others read it there.
// Threads: operations may be issued from any thread (DDP's autograd threads
// and the main thread); a mutex keeps one operation's calls together.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "tide/compress.h"
#include "tide/tide.h"
#include "work.h"

namespace tide_torch {

class ProcessGroupTide : public c10d::ProcessGroup {
 public:
  // Collective over the `size` ranks of the group; blocks until all have
  // joined (or `timeout` passes: then throws). `timeout` is also Tide's
  // no-progress timeout of every operation.
  ProcessGroupTide(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                   std::chrono::milliseconds timeout);
  ~ProcessGroupTide() override;

  const std::string getBackendName() const override { return "tide"; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst_rank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src_rank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  // A compressed All-Reduce of a float32/bf16/fp16 tensor in place with
  // `compressor` (made for this group's communicator; compress.h), SUM or
  // AVG: what tide_torch.compression_hook runs per DDP bucket.
  c10::intrusive_ptr<c10d::Work> AllreduceCompressed(at::Tensor& tensor,
                                                     tideCompressor_t compressor, bool average);
  tideComm_t comm() const { return comm_; }
  // Waits for every queued operation (the Python binding releases the GIL).
  void Synchronize();

 private:
  // A dense contiguous buffer standing for `t`: `t` itself when contiguous,
  // otherwise a staging tensor, filled from `t` on the stream when `in` and
  // copied back into `t` after success when `out`.
  at::Tensor Stage(WorkTide& work, const at::Tensor& t, bool in, bool out);
  // Issues `calls` (inside one Tide group) and queues the work's callbacks
  // behind them. Throws, with Tide's message, when a call is refused.
  c10::intrusive_ptr<c10d::Work> Launch(const c10::intrusive_ptr<WorkTide>& work, const char* what,
                                        const std::function<tideResult_t()>& calls);
  void CheckRoot(int64_t root, const char* what) const;

  tideComm_t comm_ = nullptr;
  tideStream_t stream_ = nullptr;
  std::mutex issue_mu_;
  std::shared_ptr<Graveyard> graveyard_ = std::make_shared<Graveyard>();
};

}  // namespace tide_torch
