// tideCommPredictTime (include/tide/tide.h): the cost model's prediction of
// one call, through the planner's own choice of algorithm (chooseAlgorithm:
// TIDE_ALGO's forced row, else the row with the smallest prediction), so a
// caller that sizes its work by it (the gradient reducer's buckets, the
// trainer's planner) prices calls as the planner does.
#include <cstring>

#include "core/algorithm.h"
#include "core/comm.h"
#include "core/comm/api_call.h"
#include "core/issue/planner.h"
#include "core/kernels.h"
#include "core/registry.h"
#include "tide/tide.h"

using tide::Status;

namespace {

using tide::CollType;

// Point to point runs on the p2p channel, not a row: one message over the
// slowest link class of the communicator.
double sendRecvUs(const tideComm* comm, size_t bytes) {
  const tide::LinkCost& l = comm->topo.singleNode() ? comm->topo.intraNode : comm->topo.interNode;
  const double bw = l.bandwidthGBs > 1e-6 ? l.bandwidthGBs : 1e-6;
  return l.latencyUs + static_cast<double>(bytes) / (bw * 1e3);
}

Status predict(const tideComm* comm, int coll, size_t bytes, double* us) {
  const int st = comm->initState.load();
  if (st == tideInProgress)
    return tide::invalidUsage("communicator initialization is still in progress");
  if (st != tideSuccess)
    return tide::makeStatus(static_cast<tideResult_t>(st), "communicator failed to initialize");
  *us = 0;
  if (bytes == 0) return Status::Ok();
  if (coll == tideCollSendRecv || comm->nranks < 2) {
    *us = comm->nranks < 2 ? 0.0 : sendRecvUs(comm, bytes);
    return Status::Ok();
  }
  tide::CollArgs a;
  a.type = static_cast<CollType>(coll);
  a.dtype = tideFloat32;
  a.elemSize = 4;
  a.mem = tide::MemType::Host;
  a.op = tide::RedOp::Sum;
  // nccl-tests' size: the buffer that holds every rank's part.
  const size_t n = static_cast<size_t>(comm->nranks);
  const bool perPeer = a.type == CollType::AllGather || a.type == CollType::ReduceScatter ||
                       a.type == CollType::AlltoAll;
  size_t count = (bytes + a.elemSize - 1) / a.elemSize;
  if (perPeer) count = (count + n - 1) / n;
  a.count = count;
  if (a.type == CollType::AllReduce || a.type == CollType::Reduce ||
      a.type == CollType::ReduceScatter) {
    const tide::KernelTable* k = tide::kernelsFor(a.mem);
    if (k != nullptr) a.reduce = k->reduceFn(a.dtype, a.op);
  }
  const tide::AlgorithmInfo* row = tide::chooseAlgorithm(a, comm);
  if (row == nullptr)
    return tide::internalError("no algorithm implements %s", tide::collName(a.type));
  if (row->predictUs == nullptr) {
    // An unmodelled row (only TIDE_ALGO forces one): price the model's best.
    *us = 0;
    for (const tide::AlgorithmInfo* r : tide::registeredAlgorithms()) {
      if (!(r->collMask & tide::collBit(a.type)) || r->mem != a.mem || r->predictUs == nullptr ||
          !r->servesCodec(a.codec) || (r->supports != nullptr && !r->supports(a, comm->nranks)))
        continue;
      const double t = r->predictUs(a, comm->topo, comm->chunkBytes);
      if (*us == 0 || t < *us) *us = t;
    }
    return Status::Ok();
  }
  *us = row->predictUs(a, comm->topo, comm->chunkBytes);
  return Status::Ok();
}

}  // namespace

TIDE_API tideResult_t tideCommPredictTime(tideComm_t comm, tideCollective_t coll, size_t bytes,
                                          double* microseconds) {
  return tide::commCall("tideCommPredictTime", comm, [&]() -> Status {
    int c;
    std::memcpy(&c, &coll, sizeof(c));
    if (c < tideCollAllReduce || c > tideCollSendRecv)
      return tide::invalidArgument("unknown collective %d (tideCollAllReduce..tideCollSendRecv)",
                                   c);
    if (microseconds == nullptr) return tide::invalidArgument("microseconds is NULL");
    return predict(comm, c, bytes, microseconds);
  });
}
