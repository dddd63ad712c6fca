// tide-topo's machine-readable model (--json) and its price list (--plan).
#pragma once

#include <cstddef>
#include <string>

#include "core/topology.h"
#include "topology/model.h"

namespace tide_topo {

// The node model and a communicator's topology on `nodes` x `ranks` of it as
// JSON: devices, links, the device path matrix, each GPU's NIC, the rings
// and the double binary tree (parents over ring order). Needs nlohmann-json
// at build time; false and *error otherwise.
bool printJson(const tide::topo::NodeTopo& node, const tide::CommTopo& topo, int nodes, int ranks,
               std::string* error);

// For every collective: every modelled algorithm's predicted time for
// `bytes` on `nodes` x `ranks` of `topoFile` ("" = this node) and the
// planner's choice, which is what tideTopoPredictTime returns (printed
// beside it). Returns the exit status.
int printPlan(const std::string& topoFile, int nodes, int ranks, size_t bytes);

}  // namespace tide_topo
