// The trainer's process groups over Tide: the world communicator from the
// launcher's environment (tiderun, torchrun-style variables, Open MPI,
// Slurm; one process without any: no communicator at all), split with
// tideCommSplit into the data-parallel and tensor-parallel groups.
//
// Rank order: world rank = (pp_rank · D + dp_rank) · T + tp_rank (tensor-
// parallel ranks are neighbours, so on a node they share memory, as Megatron
// places them; pipeline stages are the furthest apart, the cheapest traffic
// for the slowest links).
#pragma once

#include <string>

#include "io/error.h"
#include "model/gpt.h"
#include "tide/tide.h"

namespace tide_train {

// An error every rank has already printed (check_all): main exits non-zero
// without printing it again.
class ReportedError : public Error {
 public:
  using Error::Error;
};

// Throws Error with Tide's message when `r` is not tideSuccess.
void check_tide(tideResult_t r, tideComm_t comm, const std::string& what);

class Groups {
 public:
  // Joins the job (the world communicator only; split() makes the groups).
  Groups();
  // dp, tp: the requested sizes (dp 0: world / tp). Throws Error when
  // world ≠ dp · tp · pp.
  Groups(int dp, int tp, int pp) : Groups() { split(dp, tp, pp); }
  void split(int dp, int tp, int pp);
  ~Groups();
  Groups(const Groups&) = delete;
  Groups& operator=(const Groups&) = delete;

  int world_size = 1, world_rank = 0;
  int dp_size = 1, dp_rank = 0, tp_size = 1, tp_rank = 0, pp_size = 1, pp_rank = 0;
  // null with one rank
  tideComm_t world = nullptr, dp = nullptr, tp = nullptr, pp = nullptr;

 private:
  bool abandon_ = false;  // split() refused the layout: the world is not destroyed
};

// TpCollectives over a communicator (blocking Tide calls on the caller's
// thread; comm null: identities).
class TideCollectives : public TpCollectives {
 public:
  explicit TideCollectives(tideComm_t comm) : comm_(comm) {}
  void allreduce_sum(float* buf, size_t n) override;
  void allreduce_max(float* buf, size_t n) override;
  void allreduce_sum(double* buf, size_t n) override;

 private:
  tideComm_t comm_;
};

// In-place All-Reduce helpers on any group (comm null: nothing to do).
void allreduce(tideComm_t comm, double* buf, size_t n, tideRedOp_t op);
void broadcast(tideComm_t comm, void* buf, size_t bytes, int root);
void barrier(tideComm_t comm);

}  // namespace tide_train
