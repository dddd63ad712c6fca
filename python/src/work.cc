#include "work.h"

#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>
#include <sched.h>

#include <exception>
#include <stdexcept>

namespace tide_torch {
namespace {

// How long wait() yields before it sleeps: a small collective finishes within
// this, and a woken sleeper costs a futex wake and a context switch.
constexpr auto kBriefWait = std::chrono::microseconds(50);

}  // namespace

WorkTide::WorkTide(int rank, c10d::OpType type, std::vector<at::Tensor> outputs, int source_rank)
    : c10d::Work(rank, type),
      outputs_(std::move(outputs)),
      source_rank_(source_rank),
      future_(
          c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {
}

void WorkTide::RunCopyIn() noexcept {
  try {
    for (auto& [from, to] : copy_in_) to.copy_(from);
  } catch (const std::exception& e) {
    copy_error_ = std::string("copying the input into a staging buffer failed: ") + e.what();
  }
  copy_in_.clear();
}

void WorkTide::Complete(tideResult_t status, const char* message) noexcept {
  std::string error;
  if (status != tideSuccess) {
    error = what_ + ": " + tideGetErrorString(status);
    if (message != nullptr && *message != '\0') error += std::string(": ") + message;
  } else if (!copy_error_.empty()) {
    error = what_ + ": " + copy_error_;
  } else {
    try {
      for (auto& [from, to] : copy_back_) to.copy_(from);
    } catch (const std::exception& e) {
      error = what_ + ": copying the result out of a staging buffer failed: " + e.what();
    }
  }
  copy_back_.clear();
  std::exception_ptr eptr;
  if (!error.empty()) eptr = std::make_exception_ptr(std::runtime_error(error));
  finish(eptr);  // wakes wait()
  done_.store(true, std::memory_order_release);
  try {
    if (eptr) {
      future_->setError(eptr);
    } else {
      future_->markCompleted(c10::IValue(outputs_));
    }
  } catch (const std::exception& e) {
    // A callback of the future threw; the future holds its error.
    (void)e;
  }
}

bool WorkTide::wait(std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + kBriefWait;
  while (!done_.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < end) {
    sched_yield();
  }
  return c10d::Work::wait(timeout);
}

int WorkTide::sourceRank() const {
  TORCH_CHECK(source_rank_ >= 0, "tide: sourceRank() is only defined for a recv");
  return source_rank_;
}

void StreamCopyIn(tideStream_t, tideResult_t, const char*, void* data) {
  static_cast<WorkTide*>(data)->RunCopyIn();
}

void StreamAfterCalls(tideStream_t, tideResult_t status, const char* message, void* data) {
  auto work = c10::intrusive_ptr<WorkTide>::reclaim(static_cast<WorkTide*>(data));
  work->Complete(status, message);
  // Nobody else holds it (a fire-and-forget async op): its tensors are freed
  // on the issuing side, not here.
  if (work.use_count() == 1 && work->graveyard() != nullptr) {
    std::shared_ptr<Graveyard> g = work->graveyard();
    g->Bury(std::move(work));
  }
}

tideDataType_t TideType(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat:
      return tideFloat32;
    case at::kDouble:
      return tideFloat64;
    case at::kHalf:
      return tideFloat16;
    case at::kBFloat16:
      return tideBfloat16;
    case at::kChar:
      return tideInt8;
    case at::kByte:
      return tideUint8;
    case at::kBool:
      return tideUint8;
    case at::kInt:
      return tideInt32;
    case at::kLong:
      return tideInt64;
    default:
      TORCH_CHECK(false, "tide: dtype ", t.scalar_type(),
                  " is not supported (Tide has float32, float64, float16, bfloat16, int8, "
                  "uint8, int32, int64; bool travels as uint8)");
      __builtin_unreachable();
  }
}

tideRedOp_t TideOp(const c10d::ReduceOp& op, at::ScalarType dtype) {
  const bool is_bool = dtype == at::kBool;
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      return is_bool ? tideMax : tideSum;
    case c10d::ReduceOp::PRODUCT:
      return is_bool ? tideMin : tideProd;
    case c10d::ReduceOp::MIN:
      return tideMin;
    case c10d::ReduceOp::MAX:
      return tideMax;
    case c10d::ReduceOp::AVG:
      TORCH_CHECK(!is_bool, "tide: AVG of bool tensors is not defined");
      return tideAvg;
    case c10d::ReduceOp::BAND:
      TORCH_CHECK(is_bool, "tide: BAND is supported for bool tensors only (as MIN)");
      return tideMin;
    case c10d::ReduceOp::BOR:
      TORCH_CHECK(is_bool, "tide: BOR is supported for bool tensors only (as MAX)");
      return tideMax;
    default:
      TORCH_CHECK(false, "tide: reduce op ", static_cast<int>(op.op_),
                  " is not supported (SUM, PRODUCT, MIN, MAX, AVG; BAND/BOR for bool)");
      __builtin_unreachable();
  }
}

void CheckCpuDense(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.defined(), "tide ", what, ": undefined tensor");
  TORCH_CHECK(t.device().is_cpu(), "tide ", what, ": tensor on ", t.device(),
              "; this build of tide_torch handles CPU tensors");
  TORCH_CHECK(t.layout() == at::kStrided, "tide ", what, ": sparse tensors are not supported");
  TORCH_CHECK(!t.is_complex(), "tide ", what, ": complex tensors are not supported");
}

}  // namespace tide_torch
