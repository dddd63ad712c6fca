// Helpers shared by the topology unit tests: fixture paths and a
// communicator built from node models without processes.
#pragma once

#include <string>
#include <vector>

#include "core/topology.h"
#include "tests/topology/topo_fixture_dir.h"
#include "topology/formats.h"
#include "topology/provider.h"

namespace tide::topo::testing {

inline std::string fixture(const std::string& name) {
  return std::string(TIDE_TOPO_FIXTURE_DIR) + "/" + name;
}

inline const char* const kMachines[] = {"dgx_h100", "pcie_8gpu", "this_machine"};
inline const char* const kForms[] = {"tide", "nccl", "hwloc"};

// `nodes` copies of `node`, `ranksPerNode` ranks each, rank l of a node bound
// to the CPUs of socket (l * sockets / ranksPerNode).
inline Status buildFor(const NodeTopo& node, int nodes, int ranksPerNode, CommTopo* topo,
                       BuildResult* detail, int rank = 0) {
  std::vector<std::string> blobs;
  std::vector<PeerInfo> peers;
  std::vector<int> cpus = node.indicesOf(DevKind::Cpu);
  for (int nd = 0; nd < nodes; ++nd) {
    for (int l = 0; l < ranksPerNode; ++l) {
      PeerInfo p;
      p.rank = static_cast<int>(peers.size());
      p.hostHash = 0xabc0 + nd;
      peers.push_back(p);
      std::string set = cpus.empty() ? "" : node.devs[cpus[l * cpus.size() / ranksPerNode]].cpuset;
      blobs.push_back(makeBlob(node, set));
    }
  }
  return buildCommTopo(blobs, peers, rank, topo, detail);
}

}  // namespace tide::topo::testing
