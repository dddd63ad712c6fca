// ProcessGroupTide's point-to-point side: send, recv, the all-to-alls (a Tide
// group of sends and receives, or tideAlltoAll for equal splits) and barrier.
#include <c10/util/Exception.h>

#include <numeric>

#include "process_group.h"

namespace tide_torch {
namespace {

void CheckOneP2p(const std::vector<at::Tensor>& tensors, const char* what) {
  TORCH_CHECK(tensors.size() == 1, "tide ", what, ": expects one tensor per call, got ",
              tensors.size());
  CheckCpuDense(tensors[0], what);
}

// Element offsets of `splits` rows of `row` elements each.
std::vector<size_t> Offsets(const std::vector<int64_t>& splits, size_t row) {
  std::vector<size_t> off(splits.size() + 1, 0);
  for (size_t i = 0; i < splits.size(); ++i)
    off[i + 1] = off[i] + static_cast<size_t>(splits[i]) * row;
  return off;
}

char* At(const at::Tensor& t, size_t elements) {
  return static_cast<char*>(t.data_ptr()) + elements * t.element_size();
}

}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupTide::send(std::vector<at::Tensor>& tensors,
                                                      int dst_rank, int /*tag*/) {
  CheckOneP2p(tensors, "send");
  CheckRoot(dst_rank, "send (destination)");
  auto work =
      c10::make_intrusive<WorkTide>(getRank(), c10d::OpType::SEND, std::vector<at::Tensor>{});
  at::Tensor buf = Stage(*work, tensors[0], true, false);
  const tideDataType_t type = TideType(buf);
  return Launch(work, "send", [&] {
    return tideSend(buf.data_ptr(), static_cast<size_t>(buf.numel()), type, dst_rank, comm_,
                    stream_);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTide::recv(std::vector<at::Tensor>& tensors,
                                                      int src_rank, int /*tag*/) {
  CheckOneP2p(tensors, "recv");
  CheckRoot(src_rank, "recv (source)");
  auto work = c10::make_intrusive<WorkTide>(getRank(), c10d::OpType::RECV, tensors, src_rank);
  at::Tensor buf = Stage(*work, tensors[0], false, true);
  const tideDataType_t type = TideType(buf);
  return Launch(work, "recv", [&] {
    return tideRecv(buf.data_ptr(), static_cast<size_t>(buf.numel()), type, src_rank, comm_,
                    stream_);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTide::recvAnysource(std::vector<at::Tensor>&, int) {
  TORCH_CHECK(false,
              "tide recv: a receive from any source is not supported (Tide matches sends and "
              "receives by peer, in order); pass src");
  __builtin_unreachable();
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTide::alltoall_base(at::Tensor& output,
                                                               at::Tensor& input,
                                                               std::vector<int64_t>& output_splits,
                                                               std::vector<int64_t>& input_splits,
                                                               const c10d::AllToAllOptions&) {
  CheckCpuDense(output, "alltoall_base");
  CheckCpuDense(input, "alltoall_base");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "tide alltoall_base: dtypes differ");
  const int n = getSize();
  auto work = c10::make_intrusive<WorkTide>(getRank(), c10d::OpType::ALLTOALL_BASE,
                                            std::vector<at::Tensor>{output});
  at::Tensor src = Stage(*work, input, true, false);
  at::Tensor dst = Stage(*work, output, false, true);
  const tideDataType_t type = TideType(dst);
  if (output_splits.empty() && input_splits.empty()) {
    TORCH_CHECK(input.numel() == output.numel() && input.numel() % n == 0,
                "tide alltoall_base: equal splits need input and output of one size divisible by ",
                n, " (got ", input.numel(), " and ", output.numel(), " elements)");
    const size_t each = static_cast<size_t>(input.numel() / n);
    return Launch(work, "alltoall_base", [&] {
      return tideAlltoAll(src.data_ptr(), dst.data_ptr(), each, type, comm_, stream_);
    });
  }
  // Unequal splits: rows of dimension 0 (an empty list means equal rows).
  auto rows_of = [&](const at::Tensor& t, std::vector<int64_t>& splits, const char* which) {
    TORCH_CHECK(t.dim() > 0 || t.numel() == 0, "tide alltoall_base: a 0-dim ", which);
    const int64_t rows = t.dim() > 0 ? t.size(0) : 0;
    if (splits.empty()) {
      TORCH_CHECK(rows % n == 0, "tide alltoall_base: ", rows, " ", which, " rows do not split ",
                  "equally over ", n, " ranks");
      splits.assign(static_cast<size_t>(n), rows / n);
    }
    TORCH_CHECK(splits.size() == static_cast<size_t>(n), "tide alltoall_base: ", which, " splits ",
                "list ", splits.size(), " sizes for ", n, " ranks");
    for (int64_t s : splits) TORCH_CHECK(s >= 0, "tide alltoall_base: a negative split");
    TORCH_CHECK(std::accumulate(splits.begin(), splits.end(), int64_t{0}) == rows,
                "tide alltoall_base: the ", which, " splits do not add up to its ", rows, " rows");
    return rows > 0 ? static_cast<size_t>(t.numel() / rows) : size_t{0};
  };
  std::vector<int64_t> in_splits = input_splits, out_splits = output_splits;
  const size_t in_row = rows_of(input, in_splits, "input");
  const size_t out_row = rows_of(output, out_splits, "output");
  const std::vector<size_t> in_off = Offsets(in_splits, in_row);
  const std::vector<size_t> out_off = Offsets(out_splits, out_row);
  return Launch(work, "alltoall_base", [&] {
    tideResult_t first = tideGroupStart();
    for (int p = 0; p < n && first == tideSuccess; ++p) {
      const size_t sc = in_off[p + 1] - in_off[p], rc = out_off[p + 1] - out_off[p];
      tideResult_t r = tideSuccess;
      if (sc > 0) r = tideSend(At(src, in_off[p]), sc, type, p, comm_, stream_);
      if (r == tideSuccess && rc > 0)
        r = tideRecv(At(dst, out_off[p]), rc, type, p, comm_, stream_);
      if (r != tideSuccess) first = r;
    }
    tideResult_t end = tideGroupEnd();
    return first != tideSuccess ? first : end;
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTide::alltoall(std::vector<at::Tensor>& outputs,
                                                          std::vector<at::Tensor>& inputs,
                                                          const c10d::AllToAllOptions&) {
  const int n = getSize();
  TORCH_CHECK(outputs.size() == static_cast<size_t>(n) && inputs.size() == static_cast<size_t>(n),
              "tide alltoall: expects ", n, " input and ", n, " output tensors");
  for (int p = 0; p < n; ++p) {
    CheckCpuDense(inputs[p], "alltoall");
    CheckCpuDense(outputs[p], "alltoall");
    TORCH_CHECK(inputs[p].scalar_type() == outputs[0].scalar_type() &&
                    outputs[p].scalar_type() == outputs[0].scalar_type(),
                "tide alltoall: every tensor needs one dtype");
  }
  auto work = c10::make_intrusive<WorkTide>(getRank(), c10d::OpType::ALLTOALL, outputs);
  std::vector<at::Tensor> src, dst;
  for (int p = 0; p < n; ++p) {
    src.push_back(Stage(*work, inputs[p], true, false));
    dst.push_back(Stage(*work, outputs[p], false, true));
  }
  const tideDataType_t type = TideType(dst[0]);
  return Launch(work, "alltoall", [&] {
    tideResult_t first = tideGroupStart();
    for (int p = 0; p < n && first == tideSuccess; ++p) {
      tideResult_t r = tideSuccess;
      if (src[p].numel() > 0) {
        r = tideSend(src[p].data_ptr(), static_cast<size_t>(src[p].numel()), type, p, comm_,
                     stream_);
      }
      if (r == tideSuccess && dst[p].numel() > 0) {
        r = tideRecv(dst[p].data_ptr(), static_cast<size_t>(dst[p].numel()), type, p, comm_,
                     stream_);
      }
      if (r != tideSuccess) first = r;
    }
    tideResult_t end = tideGroupEnd();
    return first != tideSuccess ? first : end;
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTide::barrier(const c10d::BarrierOptions&) {
  // A one-byte All-Reduce behind everything queued before it.
  at::Tensor token = at::zeros({1}, at::kByte);
  auto work =
      c10::make_intrusive<WorkTide>(getRank(), c10d::OpType::BARRIER, std::vector<at::Tensor>{});
  work->Keep(token);
  return Launch(work, "barrier", [&] {
    return tideAllReduce(token.data_ptr(), token.data_ptr(), 1, tideUint8, tideSum, comm_, stream_);
  });
}

}  // namespace tide_torch
