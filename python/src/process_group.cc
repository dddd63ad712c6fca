// Python.h first, as Python asks.
#include "process_group.h"

#include <Python.h>
#include <c10/util/Exception.h>

#include <cstring>
#include <string>

namespace tide_torch {
namespace {

constexpr const char* kUniqueIdKey = "tide_unique_id";

// Raises Tide's error for `rc` of `what` on `comm` as a Python RuntimeError.
[[noreturn]] void ThrowTide(tideResult_t rc, const char* what, tideComm_t comm) {
  const char* detail = tideGetLastError(comm);
  TORCH_CHECK(false, "tide ", what, ": ", tideGetErrorString(rc),
              detail != nullptr && *detail != '\0' ? ": " : "", detail != nullptr ? detail : "");
  __builtin_unreachable();
}

void* Data(const at::Tensor& t) { return t.data_ptr(); }
size_t Count(const at::Tensor& t) { return static_cast<size_t>(t.numel()); }

// RAII: the calls between construction and End() form one Tide group.
class Group {
 public:
  Group() { ok_ = tideGroupStart() == tideSuccess; }
  tideResult_t End() {
    if (!ok_) return tideInternalError;
    ok_ = false;
    return tideGroupEnd();
  }
  ~Group() {
    if (ok_) (void)tideGroupEnd();
  }
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

 private:
  bool ok_;
};

// First error of a sequence of calls (each is made, as a group needs).
struct FirstError {
  tideResult_t rc = tideSuccess;
  void operator()(tideResult_t r) {
    if (rc == tideSuccess) rc = r;
  }
};

void CheckSameKind(const at::Tensor& a, const at::Tensor& b, const char* what) {
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "tide ", what, ": dtypes differ (",
              a.scalar_type(), " and ", b.scalar_type(), ")");
  TORCH_CHECK(a.numel() == b.numel(), "tide ", what, ": sizes differ (", a.numel(), " and ",
              b.numel(), " elements)");
}

// True when `ts` are contiguous and lie back to back in memory in list order
// (the chunks of one flat buffer, as ZeRO- and FSDP-style code passes them):
// the collective then reads or writes them in place, with no staging copy.
bool BackToBack(const std::vector<at::Tensor>& ts) {
  if (ts.empty()) return false;
  const char* next = static_cast<const char*>(ts[0].data_ptr());
  for (const at::Tensor& t : ts) {
    if (!t.is_contiguous() || static_cast<const char*>(t.data_ptr()) != next) return false;
    next += t.numel() * t.element_size();
  }
  return true;
}

void CheckOne(const std::vector<at::Tensor>& tensors, const char* what) {
  TORCH_CHECK(tensors.size() == 1, "tide ", what, ": expects one tensor per call, got ",
              tensors.size());
  CheckCpuDense(tensors[0], what);
}

}  // namespace

ProcessGroupTide::ProcessGroupTide(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                   std::chrono::milliseconds timeout)
    : c10d::ProcessGroup(rank, size) {
  tideUniqueId id;
  if (rank == 0) {
    tideResult_t rc = tideGetUniqueId(&id);
    if (rc != tideSuccess) ThrowTide(rc, "tideGetUniqueId", nullptr);
    store->set(kUniqueIdKey,
               std::vector<uint8_t>(reinterpret_cast<uint8_t*>(id.internal),
                                    reinterpret_cast<uint8_t*>(id.internal) + sizeof(id.internal)));
  } else {
    store->wait({kUniqueIdKey}, timeout);
    std::vector<uint8_t> got = store->get(kUniqueIdKey);
    TORCH_CHECK(got.size() == sizeof(id.internal), "tide: the store's unique id has ", got.size(),
                " bytes, not ", sizeof(id.internal));
    std::memcpy(id.internal, got.data(), sizeof(id.internal));
  }
  tideConfig_t config = TIDE_CONFIG_INITIALIZER;
  const auto seconds = (timeout.count() + 999) / 1000;
  config.timeoutSeconds = seconds > 0 && seconds < INT32_MAX ? static_cast<int>(seconds) : 0;
  config.commName = "torch";
  tideResult_t rc = tideCommInitRankConfig(&comm_, size, id, rank, &config);
  if (rc != tideSuccess) ThrowTide(rc, "tideCommInitRank", nullptr);
  rc = tideStreamCreate(&stream_);
  if (rc != tideSuccess) {
    (void)tideCommDestroy(comm_);
    ThrowTide(rc, "tideStreamCreate", nullptr);
  }
}

ProcessGroupTide::~ProcessGroupTide() {
  // Waiting for the queued work must not hold the GIL: the stream's thread
  // may need it (a future's Python callback).
  PyThreadState* saved =
      Py_IsInitialized() != 0 && PyGILState_Check() != 0 ? PyEval_SaveThread() : nullptr;
  if (stream_ != nullptr) (void)tideStreamDestroy(stream_);  // waits for queued work
  if (comm_ != nullptr) (void)tideCommDestroy(comm_);
  if (saved != nullptr) PyEval_RestoreThread(saved);
  graveyard_->Clear();
}

void ProcessGroupTide::Synchronize() {
  tideResult_t rc = tideStreamSynchronize(stream_);
  if (rc != tideSuccess) ThrowTide(rc, "synchronize", comm_);
}

void ProcessGroupTide::CheckRoot(int64_t root, const char* what) const {
  TORCH_CHECK(root >= 0 && root < getSize(), "tide ", what, ": root ", root,
              " is not a rank of this group of ", getSize());
}

at::Tensor ProcessGroupTide::Stage(WorkTide& work, const at::Tensor& t, bool in, bool out) {
  work.Keep(t);
  if (t.is_contiguous()) return t;
  at::Tensor staged = at::empty(t.sizes(), t.options().memory_format(at::MemoryFormat::Contiguous));
  work.Keep(staged);
  if (in) work.CopyIn(t, staged);
  if (out) work.CopyBack(staged, t);
  return staged;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTide::Launch(
    const c10::intrusive_ptr<WorkTide>& work, const char* what,
    const std::function<tideResult_t()>& calls) {
  graveyard_->Clear();  // earlier fire-and-forget works, freed here
  work->SetWhat(std::string("tide ") + what);
  work->SetGraveyard(graveyard_);
  std::lock_guard<std::mutex> lock(issue_mu_);
  tideResult_t rc = tideSuccess;
  if (work->HasCopyIn()) rc = tideStreamAddCallback(stream_, StreamCopyIn, work.get());
  if (rc != tideSuccess) ThrowTide(rc, what, comm_);
  tideResult_t call_rc = calls();
  // Queued even when a call was refused: what was queued may read the kept
  // tensors until it is done.
  WorkTide* ref = c10::intrusive_ptr<WorkTide>(work).release();
  rc = tideStreamAddCallback(stream_, StreamAfterCalls, ref);
  if (rc != tideSuccess) {
    c10::intrusive_ptr<WorkTide>::reclaim(ref);
    ThrowTide(rc, what, comm_);
  }
  if (call_rc != tideSuccess) ThrowTide(call_rc, what, comm_);
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTide::broadcast(std::vector<at::Tensor>& tensors,
                                                           const c10d::BroadcastOptions& opts) {
  CheckOne(tensors, "broadcast");
  CheckRoot(opts.rootRank, "broadcast");
  auto work = c10::make_intrusive<WorkTide>(getRank(), c10d::OpType::BROADCAST, tensors);
  const bool root = opts.rootRank == getRank();
  at::Tensor buf = Stage(*work, tensors[0], root, !root);
  const tideDataType_t type = TideType(buf);
  const int r = static_cast<int>(opts.rootRank);
  return Launch(work, "broadcast", [&] {
    return tideBroadcast(Data(buf), Data(buf), Count(buf), type, r, comm_, stream_);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTide::allreduce(std::vector<at::Tensor>& tensors,
                                                           const c10d::AllreduceOptions& opts) {
  TORCH_CHECK(!tensors.empty(), "tide allreduce: no tensors");
  auto work = c10::make_intrusive<WorkTide>(getRank(), c10d::OpType::ALLREDUCE, tensors);
  std::vector<at::Tensor> bufs;
  std::vector<tideRedOp_t> ops;
  for (const at::Tensor& t : tensors) {
    CheckCpuDense(t, "allreduce");
    ops.push_back(TideOp(opts.reduceOp, t.scalar_type()));
    bufs.push_back(Stage(*work, t, true, true));
  }
  return Launch(work, "allreduce", [&] {
    Group group;
    FirstError first;
    for (size_t i = 0; i < bufs.size(); ++i) {
      first(tideAllReduce(Data(bufs[i]), Data(bufs[i]), Count(bufs[i]), TideType(bufs[i]), ops[i],
                          comm_, stream_));
    }
    first(group.End());
    return first.rc;
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTide::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  // One group of All-Reduces: launched together, one Work.
  return allreduce(tensors, opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTide::reduce(std::vector<at::Tensor>& tensors,
                                                        const c10d::ReduceOptions& opts) {
  CheckOne(tensors, "reduce");
  CheckRoot(opts.rootRank, "reduce");
  const tideRedOp_t op = TideOp(opts.reduceOp, tensors[0].scalar_type());
  auto work = c10::make_intrusive<WorkTide>(getRank(), c10d::OpType::REDUCE, tensors);
  const bool root = opts.rootRank == getRank();
  at::Tensor buf = Stage(*work, tensors[0], true, root);
  const tideDataType_t type = TideType(buf);
  const int r = static_cast<int>(opts.rootRank);
  return Launch(work, "reduce", [&] {
    return tideReduce(Data(buf), Data(buf), Count(buf), type, op, r, comm_, stream_);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTide::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions&) {
  CheckOne(inputs, "allgather");
  TORCH_CHECK(outputs.size() == 1 && outputs[0].size() == static_cast<size_t>(getSize()),
              "tide allgather: expects one list of ", getSize(), " output tensors");
  const at::Tensor& in = inputs[0];
  for (const at::Tensor& o : outputs[0]) {
    CheckCpuDense(o, "allgather");
    CheckSameKind(o, in, "allgather (output and input)");
  }
  auto work = c10::make_intrusive<WorkTide>(getRank(), c10d::OpType::ALLGATHER, outputs[0]);
  at::Tensor src = Stage(*work, in, true, false);
  void* dst = nullptr;
  if (BackToBack(outputs[0]) && in.numel() > 0) {
    for (const at::Tensor& o : outputs[0]) work->Keep(o);
    dst = outputs[0][0].data_ptr();
  } else {
    at::Tensor flat = at::empty({getSize(), in.numel()}, in.options());
    work->Keep(flat);
    for (int p = 0; p < getSize(); ++p) {
      work->CopyBack(flat[p].view(outputs[0][p].sizes()), outputs[0][p]);
    }
    dst = flat.data_ptr();
  }
  const tideDataType_t type = TideType(src);
  return Launch(work, "allgather",
                [&] { return tideAllGather(Data(src), dst, Count(src), type, comm_, stream_); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTide::_allgather_base(at::Tensor& output,
                                                                 at::Tensor& input,
                                                                 const c10d::AllgatherOptions&) {
  CheckCpuDense(output, "_allgather_base");
  CheckCpuDense(input, "_allgather_base");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "tide _allgather_base: dtypes differ");
  TORCH_CHECK(output.numel() == input.numel() * getSize(), "tide _allgather_base: the output has ",
              output.numel(), " elements, not ", getSize(), " x ", input.numel());
  auto work = c10::make_intrusive<WorkTide>(getRank(), c10d::OpType::_ALLGATHER_BASE,
                                            std::vector<at::Tensor>{output});
  at::Tensor src = Stage(*work, input, true, false);
  at::Tensor dst = Stage(*work, output, false, true);
  const tideDataType_t type = TideType(src);
  return Launch(work, "_allgather_base", [&] {
    return tideAllGather(Data(src), Data(dst), Count(src), type, comm_, stream_);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTide::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::GatherOptions& opts) {
  CheckOne(inputs, "gather");
  CheckRoot(opts.rootRank, "gather");
  const int root = static_cast<int>(opts.rootRank);
  const bool is_root = root == getRank();
  if (is_root) {
    TORCH_CHECK(outputs.size() == 1 && outputs[0].size() == static_cast<size_t>(getSize()),
                "tide gather: the root expects one list of ", getSize(), " output tensors");
    for (const at::Tensor& o : outputs[0]) {
      CheckCpuDense(o, "gather");
      CheckSameKind(o, inputs[0], "gather (output and input)");
    }
  } else {
    TORCH_CHECK(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()),
                "tide gather: only the root takes output tensors");
  }
  auto work = c10::make_intrusive<WorkTide>(getRank(), c10d::OpType::GATHER,
                                            is_root ? outputs[0] : std::vector<at::Tensor>{});
  at::Tensor src = Stage(*work, inputs[0], true, false);
  std::vector<at::Tensor> dst;
  if (is_root) {
    for (int p = 0; p < getSize(); ++p) {
      if (p == root) {
        work->Keep(outputs[0][p]);
        work->CopyBack(src, outputs[0][p]);
        dst.push_back(src);
      } else {
        dst.push_back(Stage(*work, outputs[0][p], false, true));
      }
    }
  }
  const tideDataType_t type = TideType(src);
  return Launch(work, "gather", [&] {
    Group group;
    FirstError first;
    if (is_root) {
      for (int p = 0; p < getSize(); ++p) {
        if (p != root) first(tideRecv(Data(dst[p]), Count(dst[p]), type, p, comm_, stream_));
      }
    } else {
      first(tideSend(Data(src), Count(src), type, root, comm_, stream_));
    }
    first(group.End());
    return first.rc;
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTide::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  CheckOne(outputs, "scatter");
  CheckRoot(opts.rootRank, "scatter");
  const int root = static_cast<int>(opts.rootRank);
  const bool is_root = root == getRank();
  if (is_root) {
    TORCH_CHECK(inputs.size() == 1 && inputs[0].size() == static_cast<size_t>(getSize()),
                "tide scatter: the root expects one list of ", getSize(), " input tensors");
    for (const at::Tensor& i : inputs[0]) {
      CheckCpuDense(i, "scatter");
      CheckSameKind(i, outputs[0], "scatter (input and output)");
    }
  } else {
    TORCH_CHECK(inputs.empty() || (inputs.size() == 1 && inputs[0].empty()),
                "tide scatter: only the root takes input tensors");
  }
  auto work = c10::make_intrusive<WorkTide>(getRank(), c10d::OpType::SCATTER, outputs);
  at::Tensor dst = Stage(*work, outputs[0], false, true);
  std::vector<at::Tensor> src;
  if (is_root) {
    for (int p = 0; p < getSize(); ++p) src.push_back(Stage(*work, inputs[0][p], true, false));
    work->CopyBack(src[root], dst);
  }
  const tideDataType_t type = TideType(dst);
  return Launch(work, "scatter", [&] {
    Group group;
    FirstError first;
    if (is_root) {
      for (int p = 0; p < getSize(); ++p) {
        if (p != root) first(tideSend(Data(src[p]), Count(src[p]), type, p, comm_, stream_));
      }
    } else {
      first(tideRecv(Data(dst), Count(dst), type, root, comm_, stream_));
    }
    first(group.End());
    return first.rc;
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTide::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  CheckOne(outputs, "reduce_scatter");
  TORCH_CHECK(inputs.size() == 1 && inputs[0].size() == static_cast<size_t>(getSize()),
              "tide reduce_scatter: expects one list of ", getSize(), " input tensors");
  const at::Tensor& out = outputs[0];
  for (const at::Tensor& i : inputs[0]) {
    CheckCpuDense(i, "reduce_scatter");
    CheckSameKind(i, out, "reduce_scatter (input and output)");
  }
  const tideRedOp_t op = TideOp(opts.reduceOp, out.scalar_type());
  auto work = c10::make_intrusive<WorkTide>(getRank(), c10d::OpType::REDUCE_SCATTER, outputs);
  const void* src = nullptr;
  for (const at::Tensor& i : inputs[0]) work->Keep(i);
  if (BackToBack(inputs[0]) && out.numel() > 0) {
    src = inputs[0][0].data_ptr();
  } else {
    at::Tensor flat = at::empty({getSize(), out.numel()}, out.options());
    work->Keep(flat);
    for (int p = 0; p < getSize(); ++p) {
      work->CopyIn(inputs[0][p], flat[p].view(inputs[0][p].sizes()));
    }
    src = flat.data_ptr();
  }
  at::Tensor dst = Stage(*work, out, false, true);
  const tideDataType_t type = TideType(dst);
  return Launch(work, "reduce_scatter", [&] {
    return tideReduceScatter(src, Data(dst), Count(dst), type, op, comm_, stream_);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTide::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  CheckCpuDense(output, "_reduce_scatter_base");
  CheckCpuDense(input, "_reduce_scatter_base");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(),
              "tide _reduce_scatter_base: dtypes differ");
  TORCH_CHECK(input.numel() == output.numel() * getSize(),
              "tide _reduce_scatter_base: the input has ", input.numel(), " elements, not ",
              getSize(), " x ", output.numel());
  const tideRedOp_t op = TideOp(opts.reduceOp, output.scalar_type());
  auto work = c10::make_intrusive<WorkTide>(getRank(), c10d::OpType::_REDUCE_SCATTER_BASE,
                                            std::vector<at::Tensor>{output});
  at::Tensor src = Stage(*work, input, true, false);
  at::Tensor dst = Stage(*work, output, false, true);
  const tideDataType_t type = TideType(dst);
  return Launch(work, "_reduce_scatter_base", [&] {
    return tideReduceScatter(Data(src), Data(dst), Count(dst), type, op, comm_, stream_);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTide::AllreduceCompressed(at::Tensor& tensor,
                                                                     tideCompressor_t compressor,
                                                                     bool average) {
  CheckCpuDense(tensor, "compressed allreduce");
  auto work = c10::make_intrusive<WorkTide>(getRank(), c10d::OpType::ALLREDUCE,
                                            std::vector<at::Tensor>{tensor});
  at::Tensor buf = Stage(*work, tensor, true, true);
  const tideDataType_t type = TideType(buf);
  return Launch(work, "compressed allreduce", [&] {
    return tideAllReduceCompressed(Data(buf), Data(buf), Count(buf), type,
                                   average ? tideAvg : tideSum, compressor, comm_, stream_);
  });
}

}  // namespace tide_torch
