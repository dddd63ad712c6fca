// tideCommPredictTime (include/tide/tide.h): the cost model's prediction of
// one call, through the planner's own choice of algorithm (chooseAlgorithm:
// TIDE_ALGO's forced row, else the row with the smallest prediction), so a
// caller that sizes its work by it (the gradient reducer's buckets, the
// trainer's planner) prices calls as the planner does.
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>

#include "core/algorithm.h"
#include "core/comm.h"
#include "core/comm/api_call.h"
#include "core/comm/predict.h"
#include "core/config.h"
#include "core/issue/planner.h"
#include "core/kernels.h"
#include "core/registry.h"
#include "tide/tide.h"

using tide::Status;

namespace {

using tide::CollType;

// Point to point runs on the p2p channel, not a row: one message over the
// slowest link class of the communicator.
double sendRecvUs(const tide::CommTopo& topo, size_t bytes) {
  const tide::LinkCost& l = topo.singleNode() ? topo.intraNode : topo.interNode;
  const double bw = l.bandwidthGBs > 1e-6 ? l.bandwidthGBs : 1e-6;
  return l.latencyUs + static_cast<double>(bytes) / (bw * 1e3);
}

// The arguments of a float32 sum of `bytes` (nccl-tests' size) on n ranks.
tide::CollArgs argsOf(int coll, size_t bytes, int nranks) {
  tide::CollArgs a;
  a.type = static_cast<CollType>(coll);
  a.dtype = tideFloat32;
  a.elemSize = 4;
  a.mem = tide::MemType::Host;
  a.op = tide::RedOp::Sum;
  const size_t n = static_cast<size_t>(nranks);
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
  return a;
}

bool modelled(const tide::AlgorithmInfo* r, const tide::CollArgs& a, int nranks) {
  return (r->collMask & tide::collBit(a.type)) && r->mem == a.mem && r->predictUs != nullptr &&
         r->servesCodec(a.codec) && (r->supports == nullptr || r->supports(a, nranks));
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
    *us = comm->nranks < 2 ? 0.0 : sendRecvUs(comm->topo, bytes);
    return Status::Ok();
  }
  const tide::CollArgs a = argsOf(coll, bytes, comm->nranks);
  const tide::AlgorithmInfo* row = tide::chooseAlgorithm(a, comm);
  if (row == nullptr)
    return tide::internalError("no algorithm implements %s", tide::collName(a.type));
  if (row->predictUs == nullptr) {
    // An unmodelled row (only TIDE_ALGO forces one): price the model's best.
    std::vector<tide::AlgoPrediction> rows;
    return tide::predictAll(comm->topo, comm->nranks, comm->chunkBytes, coll, bytes, &rows, us);
  }
  *us = row->predictUs(a, comm->topo, comm->chunkBytes);
  return Status::Ok();
}

// Reads the caller's value as an int (a bad value is not a valid enum value:
// loading it as tideCollective_t would be undefined).
Status checkColl(const tideCollective_t* coll, int* c) {
  std::memcpy(c, coll, sizeof(*c));
  if (*c < tideCollAllReduce || *c > tideCollSendRecv)
    return tide::invalidArgument("unknown collective %d (tideCollAllReduce..tideCollSendRecv)", *c);
  return Status::Ok();
}

}  // namespace

namespace tide {

Status predictAll(const CommTopo& topo, int nranks, size_t chunkBytes, int coll, size_t bytes,
                  std::vector<AlgoPrediction>* rows, double* chosenUs) {
  rows->clear();
  *chosenUs = 0;
  if (bytes == 0 || nranks < 2) return Status::Ok();
  if (coll == tideCollSendRecv) {
    *chosenUs = sendRecvUs(topo, bytes);
    return Status::Ok();
  }
  const CollArgs a = argsOf(coll, bytes, nranks);
  for (const AlgorithmInfo* r : registeredAlgorithms()) {
    if (!modelled(r, a, nranks)) continue;
    const double t = r->predictUs(a, topo, chunkBytes);
    rows->push_back({r->name, t});
    if (rows->size() == 1 || t < *chosenUs) *chosenUs = t;
  }
  if (rows->empty()) return internalError("no modelled algorithm implements %s", collName(a.type));
  return Status::Ok();
}

Status topoOfFile(const std::string& topoFile, int nnodes, int ranksPerNode, CommTopo* out) {
  static std::mutex mu;
  static std::map<std::tuple<std::string, int, int>, CommTopo>* cache =
      new std::map<std::tuple<std::string, int, int>, CommTopo>();  // never destroyed: used at exit
  const auto key = std::make_tuple(topoFile, nnodes, ranksPerNode);
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache->find(key);
    if (it != cache->end()) {
      *out = it->second;
      return Status::Ok();
    }
  }
  const TopologyProvider* provider = topologyProvider();
  if (provider == nullptr || provider->describeFile == nullptr || provider->build == nullptr) {
    return invalidUsage("this build has no topology provider that reads topology files");
  }
  std::vector<std::string> blobs;
  std::vector<PeerInfo> peers;
  for (int nd = 0; nd < nnodes; ++nd) {
    for (int l = 0; l < ranksPerNode; ++l) {
      PeerInfo p;
      p.rank = static_cast<int>(peers.size());
      p.hostHash = 0x7043000ull + static_cast<uint64_t>(nd);
      std::snprintf(p.host, sizeof(p.host), "node%d", nd);
      peers.push_back(p);
      std::string blob;
      TIDE_TRY(provider->describeFile(topoFile, l, ranksPerNode, &blob));
      blobs.push_back(std::move(blob));
    }
  }
  CommTopo topo;
  TIDE_TRY(provider->build(blobs, peers, 0, &topo));
  std::lock_guard<std::mutex> lock(mu);
  (*cache)[key] = topo;
  *out = std::move(topo);
  return Status::Ok();
}

}  // namespace tide

TIDE_API tideResult_t tideTopoPredictTime(const char* topoFile, int nnodes, int ranksPerNode,
                                          tideCollective_t coll, size_t bytes,
                                          double* microseconds) {
  return tide::guarded("tideTopoPredictTime", nullptr, [&]() -> Status {
    int c;
    TIDE_TRY(checkColl(&coll, &c));
    if (microseconds == nullptr) return tide::invalidArgument("microseconds is NULL");
    if (nnodes < 1 || ranksPerNode < 1 || static_cast<int64_t>(nnodes) * ranksPerNode > 65536) {
      return tide::invalidArgument(
          "%d node(s) x %d rank(s): each must be >= 1, at most 65536 ranks", nnodes, ranksPerNode);
    }
    tide::CommTopo topo;
    Status s = tide::topoOfFile(topoFile != nullptr ? topoFile : "", nnodes, ranksPerNode, &topo);
    if (!s.ok() && s.code() != tideInvalidUsage) {
      return tide::invalidArgument("topology file %s: %s",
                                   topoFile != nullptr ? topoFile : "(this node)",
                                   s.message().c_str());
    }
    TIDE_TRY(std::move(s));
    std::vector<tide::AlgoPrediction> rows;
    return tide::predictAll(topo, nnodes * ranksPerNode, tide::knobSize(tide::Knob::ChunkSize), c,
                            bytes, &rows, microseconds);
  });
}

TIDE_API tideResult_t tideCommPredictTime(tideComm_t comm, tideCollective_t coll, size_t bytes,
                                          double* microseconds) {
  return tide::commCall("tideCommPredictTime", comm, [&]() -> Status {
    int c;
    TIDE_TRY(checkColl(&coll, &c));
    if (microseconds == nullptr) return tide::invalidArgument("microseconds is NULL");
    return predict(comm, c, bytes, microseconds);
  });
}
