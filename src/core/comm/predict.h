// The cost model as a query, without a communicator: what tideTopoPredictTime
// (include/tide/tide.h) answers and what `tide-topo --plan` prints.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/topology.h"

namespace tide {

// The topology a communicator of `nnodes` x `ranksPerNode` ranks would get on
// nodes described by `topoFile` ("" for this node), through the registered
// topology provider. Cached per (file, nnodes, ranksPerNode). Thread-safe.
Status topoOfFile(const std::string& topoFile, int nnodes, int ranksPerNode, CommTopo* out);

struct AlgoPrediction {
  const char* name;  // the algorithm table's name ("ring", ...)
  double us;
};

// Every modelled host algorithm's predicted time for collective `coll`
// (a tideCollective_t) of `bytes` (nccl-tests' size, as tideCommPredictTime)
// on `topo` with `nranks` ranks, float32 sum; *chosenUs gets the smallest
// (the planner's automatic choice), 0 for 0 bytes. SendRecv has no rows: the
// list stays empty and *chosenUs is one message over the slowest link class.
Status predictAll(const CommTopo& topo, int nranks, size_t chunkBytes, int coll, size_t bytes,
                  std::vector<AlgoPrediction>* rows, double* chosenUs);

}  // namespace tide
