// tide_torch._C: the Python side of ProcessGroupTide (a subclass of
// torch.distributed's ProcessGroup, so every torch.distributed call reaches
// it) and the compressors behind tide_torch.compression_hook.
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <memory>
#include <string>

#include "process_group.h"
#include "tide/compress.h"

namespace py = pybind11;

namespace tide_torch {
namespace {

// A Tide compressor of one group's communicator: one per gradient bucket.
class Compressor {
 public:
  Compressor(const c10::intrusive_ptr<ProcessGroupTide>& pg, const std::string& codec,
             int block_size, double topk_ratio, bool error_feedback, bool stochastic_rounding,
             unsigned long long seed, bool inter_node_only)
      : pg_(pg) {
    tideCompressConfig_t config = TIDE_COMPRESS_CONFIG_INITIALIZER;
    config.codec = CodecByName(codec);
    if (block_size > 0) config.blockSize = block_size;
    config.topkRatio = topk_ratio;
    config.errorFeedback = error_feedback ? 1 : 0;
    config.stochasticRounding = stochastic_rounding ? 1 : 0;
    config.seed = seed;
    config.interNodeOnly = inter_node_only ? 1 : 0;
    Check(tideCompressorCreate(pg->comm(), &config, &compressor_), "tideCompressorCreate");
  }
  ~Compressor() {
    if (compressor_ == nullptr) return;
    try {
      // None of its calls may still be queued. Without the GIL: a queued
      // future's Python callback may need it.
      if (PyGILState_Check() != 0) {
        py::gil_scoped_release release;
        pg_->Synchronize();
      } else {
        pg_->Synchronize();
      }
    } catch (const std::exception&) {
      // The group's error was reported by its Work; free anyway.
    }
    (void)tideCompressorDestroy(compressor_);
  }
  Compressor(const Compressor&) = delete;
  Compressor& operator=(const Compressor&) = delete;

  c10::intrusive_ptr<c10d::Work> Allreduce(at::Tensor tensor, bool average) {
    return pg_->AllreduceCompressed(tensor, compressor_, average);
  }
  py::bytes State() {
    size_t bytes = 0;
    Check(tideCompressorGetState(compressor_, nullptr, &bytes), "tideCompressorGetState");
    std::string buf(bytes, '\0');
    Check(tideCompressorGetState(compressor_, buf.data(), &bytes), "tideCompressorGetState");
    buf.resize(bytes);
    return py::bytes(buf);
  }
  void SetState(const std::string& state) {
    Check(tideCompressorSetState(compressor_, state.data(), state.size()),
          "tideCompressorSetState");
  }
  void Reset() { Check(tideCompressorReset(compressor_), "tideCompressorReset"); }

 private:
  static tideCodec_t CodecByName(const std::string& name) {
    static const std::pair<const char*, tideCodec_t> kCodecs[] = {
        {"none", tideCodecNone}, {"fp16", tideCodecFp16}, {"bf16", tideCodecBf16},
        {"int8", tideCodecInt8}, {"int4", tideCodecInt4}, {"topk", tideCodecTopK},
        {"auto", tideCodecAuto}};
    for (const auto& [n, c] : kCodecs) {
      if (name == n) return c;
    }
    TORCH_CHECK(false, "tide: unknown codec \"", name,
                "\" (none, fp16, bf16, int8, int4, topk, auto)");
    __builtin_unreachable();
  }
  void Check(tideResult_t rc, const char* what) {
    if (rc == tideSuccess) return;
    const char* detail = tideGetLastError(pg_->comm());
    TORCH_CHECK(false, "tide ", what, ": ", tideGetErrorString(rc), ": ",
                detail != nullptr ? detail : "");
  }

  c10::intrusive_ptr<ProcessGroupTide> pg_;
  tideCompressor_t compressor_ = nullptr;
};

}  // namespace
}  // namespace tide_torch

PYBIND11_MODULE(_C, m) {
  using tide_torch::Compressor;
  using tide_torch::ProcessGroupTide;
  m.doc() = "Tide's torch.distributed backend (import tide_torch registers \"tide\")";
  // The base classes (ProcessGroup, Work, Store) are registered by torch.
  py::module::import("torch.distributed");

  py::class_<ProcessGroupTide, c10d::ProcessGroup, c10::intrusive_ptr<ProcessGroupTide>>(
      m, "ProcessGroupTide")
      .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       std::chrono::milliseconds timeout) {
             return c10::make_intrusive<ProcessGroupTide>(store, rank, size, timeout);
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
           py::call_guard<py::gil_scoped_release>())
      .def("synchronize", &ProcessGroupTide::Synchronize,
           "Waits for every operation queued on this group.",
           py::call_guard<py::gil_scoped_release>());

  py::class_<Compressor, std::shared_ptr<Compressor>>(m, "Compressor")
      .def(py::init<const c10::intrusive_ptr<ProcessGroupTide>&, const std::string&, int, double,
                    bool, bool, unsigned long long, bool>(),
           py::arg("group"), py::arg("codec"), py::arg("block_size") = 0,
           py::arg("topk_ratio") = 0.0, py::arg("error_feedback") = true,
           py::arg("stochastic_rounding") = false, py::arg("seed") = 0,
           py::arg("inter_node_only") = false)
      .def("allreduce", &Compressor::Allreduce, py::arg("tensor"), py::arg("average") = false,
           "Compressed All-Reduce of `tensor` in place (SUM, or AVG with average=True); "
           "returns a Work.",
           py::call_guard<py::gil_scoped_release>())
      .def("state", &Compressor::State, "The error-feedback state, as bytes (for checkpoints).")
      .def("set_state", &Compressor::SetState, py::arg("state"))
      .def("reset", &Compressor::Reset);
}
