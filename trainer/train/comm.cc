// Process groups and blocking collectives of the trainer (train/comm.h).
#include "train/comm.h"

#include <cstdio>
#include <cstdlib>

#include "io/error.h"

namespace tide_train {

void check_tide(tideResult_t r, tideComm_t comm, const std::string& what) {
  if (r == tideSuccess) return;
  std::string msg = what + ": " + tideGetErrorString(r);
  const char* detail = tideGetLastError(comm);
  if (detail != nullptr && *detail != '\0') msg += std::string(" (") + detail + ")";
  throw Error(msg);
}

namespace {

bool launched() {
  for (const char* v : {"TIDE_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID"})
    if (std::getenv(v) != nullptr) return true;
  return false;
}

}  // namespace

Groups::Groups() {
  if (launched()) {
    check_tide(tideCommInitFromEnv(&world), nullptr, "joining the job (tideCommInitFromEnv)");
    check_tide(tideCommCount(world, &world_size), world, "tideCommCount");
    check_tide(tideCommUserRank(world, &world_rank), world, "tideCommUserRank");
  }
}

void Groups::split(int dpn, int tpn, int ppn) {
  if (tpn < 1 || ppn < 1 || dpn < 0) throw Error("--dp, --tp and --pp must be positive");
  if (dpn == 0) dpn = world_size % (tpn * ppn) == 0 ? world_size / (tpn * ppn) : 0;
  if (dpn * tpn * ppn != world_size) {
    const std::string msg = "world size " + std::to_string(world_size) + " is not --dp " +
                            std::to_string(dpn) + " x --tp " + std::to_string(tpn) + " x --pp " +
                            std::to_string(ppn);
    if (world == nullptr) throw Error(msg);
    // Every rank finds this (the same flags): each prints its line, then
    // waits for the others before any exits (the launcher stops the rest
    // once one exits), as check_all does. The world communicator is left
    // to the process's end.
    abandon_ = true;
    std::fflush(stdout);
    std::fprintf(stderr, "tide-train: error: %s\n", msg.c_str());
    std::fflush(stderr);
    double x = 0.0;
    tideAllReduce(&x, &x, 1, tideFloat64, tideSum, world, nullptr);
    throw ReportedError(msg);
  }
  dp_size = dpn;
  tp_size = tpn;
  pp_size = ppn;
  tp_rank = world_rank % tpn;
  dp_rank = (world_rank / tpn) % dpn;
  pp_rank = world_rank / (tpn * dpn);
  if (world != nullptr && tp_size > 1)
    check_tide(tideCommSplit(world, pp_rank * dp_size + dp_rank, tp_rank, &tp, nullptr), world,
               "making the tensor-parallel group");
  if (world != nullptr && dp_size > 1)
    check_tide(tideCommSplit(world, pp_rank * tp_size + tp_rank, dp_rank, &dp, nullptr), world,
               "making the data-parallel group");
  if (world != nullptr && pp_size > 1)
    check_tide(tideCommSplit(world, dp_rank * tp_size + tp_rank, pp_rank, &pp, nullptr), world,
               "making the pipeline group");
}

Groups::~Groups() {
  if (pp != nullptr) tideCommDestroy(pp);
  if (dp != nullptr) tideCommDestroy(dp);
  if (tp != nullptr) tideCommDestroy(tp);
  if (world != nullptr && !abandon_) tideCommDestroy(world);
}

void TideCollectives::allreduce_sum(float* buf, size_t n) {
  if (comm_ == nullptr || n == 0) return;
  check_tide(tideAllReduce(buf, buf, n, tideFloat32, tideSum, comm_, nullptr), comm_,
             "tensor-parallel All-Reduce");
}

void TideCollectives::allreduce_max(float* buf, size_t n) {
  if (comm_ == nullptr || n == 0) return;
  check_tide(tideAllReduce(buf, buf, n, tideFloat32, tideMax, comm_, nullptr), comm_,
             "tensor-parallel All-Reduce (max)");
}

void TideCollectives::allreduce_sum(double* buf, size_t n) { allreduce(comm_, buf, n, tideSum); }

void allreduce(tideComm_t comm, double* buf, size_t n, tideRedOp_t op) {
  if (comm == nullptr || n == 0) return;
  check_tide(tideAllReduce(buf, buf, n, tideFloat64, op, comm, nullptr), comm, "All-Reduce");
}

void broadcast(tideComm_t comm, void* buf, size_t bytes, int root) {
  if (comm == nullptr || bytes == 0) return;
  check_tide(tideBroadcast(buf, buf, bytes, tideUint8, root, comm, nullptr), comm, "Broadcast");
}

void barrier(tideComm_t comm) {
  if (comm == nullptr) return;
  double x = 0.0;
  allreduce(comm, &x, 1, tideSum);
}

}  // namespace tide_train
