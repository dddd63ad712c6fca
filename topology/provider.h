// The topology provider (registered with the core) and the pieces of it
// that tide-topo and the unit tests drive directly.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "core/topology.h"
#include "topology/model.h"

namespace tide::topo {

// Printable identity of this node: TIDE_HOSTID, else host name + network
// namespace inode. Thread-safe.
Status nodeIdentity(std::string* out);

// The blob a rank contributes: its CPU affinity and its node's model.
std::string makeBlob(const NodeTopo& node, const std::string& cpus);

// Where a rank sits in its node's model (indices into that model's devs).
struct Placement {
  int gpu = -1;     // GPU device, -1 for host-memory ranks
  int nic = -1;     // NIC its inter-node traffic uses, -1 when the node has none
  int socket = -1;  // CPU package
};

// Everything build() derives, kept for tools and tests.
struct BuildResult {
  std::vector<NodeTopo> nodes;       // per CommTopo node
  std::vector<Placement> placement;  // per rank
};

// The provider's build(), also returning the per-node models and placements.
// Deterministic: depends only on the arguments. Does not write files.
Status buildCommTopo(const std::vector<std::string>& blobs, const std::vector<PeerInfo>& peers,
                     int rank, CommTopo* out, BuildResult* detail);

// TIDE_TOPO_FILE when set (cached per path), else live detection (cached).
Status localNodeTopo(NodeTopo* out);

}  // namespace tide::topo
