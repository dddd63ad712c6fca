// Topology search: NIC choice on the NVSwitch fixture (a), ring locality and
// socket crossings on the PCIe fixture (b) in all three forms, with the GPU
// to rank assignment shuffled so the search, not the input order, decides;
// channels spread over NICs across nodes; the greedy search above the exact
// limit.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <set>
#include <string>

#include "tests/topology/topo_test_util.h"
#include "tide_build_config.h"
#include "topology/search.h"

namespace tide::topo {
namespace {

using testing::buildFor;
using testing::fixture;

std::vector<std::string> forms(const std::string& machine) {
  std::vector<std::string> out;
  for (const char* f : testing::kForms) {
    if (std::string(f) == "hwloc" && !TIDE_HAVE_HWLOC) continue;
    out.push_back(fixture(machine + "." + f + ".xml"));
  }
  return out;
}

TEST(TopoSearch, NvSwitchNodeEveryGpuUsesTheNicUnderItsSwitch) {
  for (const std::string& path : forms("dgx_h100")) {
    NodeTopo t;
    ASSERT_TRUE(loadTopoFile(path, &t).ok()) << path;
    std::vector<int> gpus = t.indicesOf(DevKind::Gpu);
    std::vector<int> nics = gpuNics(t);
    ASSERT_EQ(gpus.size(), 8u);
    std::set<int> distinct(nics.begin(), nics.end());
    EXPECT_EQ(distinct.size(), 8u) << path;
    for (size_t g = 0; g < gpus.size(); ++g) {
      ASSERT_GE(nics[g], 0);
      EXPECT_EQ(t.devs[nics[g]].parent, t.devs[gpus[g]].parent) << path << " gpu " << g;
      EXPECT_EQ(t.devs[t.devs[gpus[g]].parent].kind, DevKind::PciSwitch);
    }
    // The communicator's placement agrees, on one node and on two.
    for (int nodes : {1, 2}) {
      CommTopo topo;
      BuildResult detail;
      ASSERT_TRUE(buildFor(t, nodes, 8, &topo, &detail).ok());
      for (int r = 0; r < topo.nranks; ++r) {
        const Placement& p = detail.placement[r];
        const NodeTopo& node = detail.nodes[topo.nodeOf[r]];
        ASSERT_GE(p.gpu, 0);
        ASSERT_GE(p.nic, 0);
        EXPECT_EQ(node.devs[p.nic].parent, node.devs[p.gpu].parent);
      }
      // Eight channels, each entering every node at a different GPU/NIC.
      ASSERT_EQ(topo.rings.size(), 8u);
      for (int nd = 0; nd < nodes; ++nd) {
        std::set<int> entryNics;
        for (const auto& ring : topo.rings) entryNics.insert(detail.placement[ring[nd * 8]].nic);
        EXPECT_EQ(entryNics.size(), 8u);
      }
    }
  }
}

// Cost matrix over GPUs as the communicator sees it, with rank i on GPU perm[i].
std::vector<RingCost> gpuCosts(const NodeTopo& t, const std::vector<int>& perm) {
  std::vector<int> gpus = t.indicesOf(DevKind::Gpu);
  int n = static_cast<int>(perm.size());
  std::vector<RingCost> c(static_cast<size_t>(n) * n);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      int a = gpus[perm[i]], b = gpus[perm[j]];
      const DevPath& p = t.path(a, b);
      c[i * n + j] = RingCost{p.type, p.gbs, t.devs[a].socket != t.devs[b].socket};
    }
  }
  return c;
}

void expectSwitchLocalRing(const NodeTopo& t, const std::vector<int>& ringGpus,
                           const std::string& what) {
  std::vector<int> gpus = t.indicesOf(DevKind::Gpu);
  int n = static_cast<int>(ringGpus.size());
  int crossings = 0, sameSwitchEdges = 0;
  for (int i = 0; i < n; ++i) {
    const Device& a = t.devs[gpus[ringGpus[i]]];
    const Device& b = t.devs[gpus[ringGpus[(i + 1) % n]]];
    crossings += a.socket != b.socket;
    sameSwitchEdges += a.parent == b.parent;
  }
  // Two GPUs per switch, four switches: each pair adjacent gives 4 such edges.
  EXPECT_EQ(sameSwitchEdges, 4) << what;
  EXPECT_EQ(crossings, 2) << what;  // the minimum for a ring over two sockets
}

TEST(TopoSearch, PcieNodeRingsKeepSwitchPairsAdjacentAndCrossSocketsTwice) {
  for (const std::string& path : forms("pcie_8gpu")) {
    NodeTopo t;
    ASSERT_TRUE(loadTopoFile(path, &t).ok()) << path;
    // Through the provider: every channel's ring.
    CommTopo topo;
    BuildResult detail;
    ASSERT_TRUE(buildFor(t, 1, 8, &topo, &detail).ok());
    std::vector<int> gpus = t.indicesOf(DevKind::Gpu);
    for (const auto& ring : topo.rings) {
      std::vector<int> ringGpus;
      for (int r : ring) {
        ringGpus.push_back(static_cast<int>(
            std::find(gpus.begin(), gpus.end(), detail.placement[r].gpu) - gpus.begin()));
      }
      expectSwitchLocalRing(t, ringGpus, path);
    }
    // The search itself, on shuffled assignments of GPUs to ranks.
    std::mt19937 rng(1234);
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<int> perm(8);
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng);
      std::vector<RingCost> cost = gpuCosts(t, perm);
      std::vector<int> order = searchRing(8, cost, trial % 8, true);
      ASSERT_EQ(order.size(), 8u);
      EXPECT_EQ(order[0], trial % 8);
      std::vector<int> ringGpus;
      for (int i : order) ringGpus.push_back(perm[i]);
      expectSwitchLocalRing(t, ringGpus, path + " trial " + std::to_string(trial));
      EXPECT_NEAR(ringBottleneck(order, cost, 8, true), 31.5, 0.1);
    }
  }
}

TEST(TopoSearch, OpenPathsAcrossNodesAlsoCrossOnce) {
  NodeTopo t;
  ASSERT_TRUE(loadTopoFile(fixture("pcie_8gpu.tide.xml"), &t).ok());
  CommTopo topo;
  BuildResult detail;
  ASSERT_TRUE(buildFor(t, 2, 8, &topo, &detail).ok());
  ASSERT_EQ(topo.rings.size(), 2u);  // one channel per NIC
  for (const auto& ring : topo.rings) {
    for (int nd = 0; nd < 2; ++nd) {
      int crossings = 0;
      for (int i = nd * 8; i + 1 < nd * 8 + 8; ++i) {
        crossings += topo.socketOf[ring[i]] != topo.socketOf[ring[i + 1]];
      }
      EXPECT_EQ(crossings, 1);  // a path through two sockets crosses once
    }
  }
  // The two channels enter each node on different NICs.
  EXPECT_NE(detail.placement[topo.rings[0][0]].nic, detail.placement[topo.rings[1][0]].nic);
}

TEST(TopoSearch, GreedyAboveTheExactLimit) {
  // 16 devices: 2 sockets x 2 switches x 4; same switch 30 GB/s, same socket
  // 20 GB/s, cross socket 10 GB/s. Best ring: switch groups contiguous,
  // 2 crossings, bottleneck 10.
  const int n = 16;
  std::vector<RingCost> cost(n * n);
  std::mt19937 rng(7);
  std::vector<int> group(n);
  std::iota(group.begin(), group.end(), 0);
  std::shuffle(group.begin(), group.end(), rng);  // device i is in switch group[i] / 4
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      int si = group[i] / 4, sj = group[j] / 4;
      RingCost& c = cost[i * n + j];
      if (i == j)
        c = RingCost{PathType::Self, 1e3, false};
      else if (si == sj)
        c = RingCost{PathType::PciSwitch, 30, false};
      else if (si / 2 == sj / 2)
        c = RingCost{PathType::PciHostBridge, 20, false};
      else
        c = RingCost{PathType::CrossSocket, 10, true};
    }
  }
  std::vector<int> order = searchRing(n, cost, 0, true);
  std::vector<int> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  for (int i = 0; i < n; ++i) EXPECT_EQ(sorted[i], i);
  EXPECT_EQ(ringCrossings(order, cost, n, true), 2);
  int switchChanges = 0;
  for (int i = 0; i < n; ++i) switchChanges += group[order[i]] / 4 != group[order[(i + 1) % n]] / 4;
  EXPECT_EQ(switchChanges, 4);
}

}  // namespace
}  // namespace tide::topo
