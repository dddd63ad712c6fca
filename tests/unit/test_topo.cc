// Topology: XML reader, the three fixture forms, the node model's paths, live
// detection on this machine, and the provider's CommTopo for one and several
// nodes (including TIDE_TOPO_FILE / TIDE_TOPO_DUMP_FILE through the registered
// provider).
#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

#include "core/config.h"
#include "core/topology.h"
#include "tests/topology/topo_test_util.h"
#include "tide_build_config.h"
#include "topology/formats.h"
#include "topology/model.h"
#include "topology/provider.h"
#include "topology/xml.h"

namespace tide::topo {
namespace {

using testing::buildFor;
using testing::fixture;

NodeTopo load(const std::string& name) {
  NodeTopo t;
  Status s = loadTopoFile(fixture(name), &t);
  EXPECT_TRUE(s.ok()) << name << ": " << s.message();
  return t;
}

// ---- XML ---------------------------------------------------------------------------

TEST(TopoXml, ParsesElementsAttributesAndComments) {
  XmlNode root;
  ASSERT_TRUE(parseXml("<?xml version=\"1.0\"?>\n<!-- c --><a x='1' y=\"&lt;2&amp;\">"
                       "<b/><!-- inner --><c z=\"0x10\">text</c></a>",
                       &root)
                  .ok());
  EXPECT_EQ(root.tag, "a");
  EXPECT_EQ(root.attr("x"), "1");
  EXPECT_EQ(root.attr("y"), "<2&");
  ASSERT_EQ(root.kids.size(), 2u);
  EXPECT_EQ(root.kids[1].num("z"), 16);
  EXPECT_EQ(root.kids[1].text, "text");
}

TEST(TopoXml, RejectsMalformedInput) {
  XmlNode root;
  for (const char* bad : {"", "<a>", "<a></b>", "<a x=1/>", "<a/><b/>", "<a x=\"1/>", "text"}) {
    EXPECT_FALSE(parseXml(bad, &root).ok()) << bad;
  }
  NodeTopo t;
  EXPECT_FALSE(
      loadTopoText("<tide-topology><gpu id=\"1\" parent=\"9\"/></tide-topology>", &t).ok());
  EXPECT_FALSE(
      loadTopoText("<tide-topology><cpu id=\"0\"/><gpu id=\"1\"/></tide-topology>", &t).ok());
  EXPECT_FALSE(loadTopoText("<other/>", &t).ok());
  EXPECT_FALSE(loadTopoText("<system version=\"1\"></system>", &t).ok());
}

TEST(TopoXml, CpuListsRoundTrip) {
  std::vector<bool> v;
  ASSERT_TRUE(parseCpuList("0-3,8,10-11", &v));
  EXPECT_EQ(formatCpuList(v), "0-3,8,10-11");
  EXPECT_FALSE(parseCpuList("3-1", &v));
}

// ---- Fixtures: three forms, one model ------------------------------------------------

TEST(TopoFixtures, ThreeFormsLoadToTheSameModel) {
  for (const char* m : testing::kMachines) {
    std::string ref;
    for (const char* form : testing::kForms) {
      if (std::string(form) == "hwloc" && !TIDE_HAVE_HWLOC) continue;
      NodeTopo t = load(std::string(m) + "." + form + ".xml");
      std::string canon = writeTideXml(t, true);
      if (ref.empty()) {
        ref = canon;
      } else {
        EXPECT_EQ(canon, ref) << m << " " << form;
      }
    }
  }
}

TEST(TopoFixtures, DumpRoundTrips) {
  for (const char* m : testing::kMachines) {
    NodeTopo t = load(std::string(m) + ".nccl.xml");
    NodeTopo back;
    ASSERT_TRUE(loadTopoText(writeTideXml(t), &back).ok());
    EXPECT_EQ(writeTideXml(back), writeTideXml(t)) << m;
  }
}

TEST(TopoModel, NvSwitchNode) {
  NodeTopo t = load("dgx_h100.nccl.xml");
  EXPECT_EQ(t.count(DevKind::Cpu), 2);
  EXPECT_EQ(t.count(DevKind::PciSwitch), 8);
  EXPECT_EQ(t.count(DevKind::Gpu), 8);
  EXPECT_EQ(t.count(DevKind::Nic), 8);
  EXPECT_EQ(t.count(DevKind::NvSwitch), 1);  // four chips, one fabric
  std::vector<int> gpus = t.indicesOf(DevKind::Gpu);
  for (int a : gpus) {
    for (int b : gpus) {
      if (a == b) continue;
      EXPECT_EQ(t.path(a, b).type, PathType::NVLink);
      EXPECT_DOUBLE_EQ(t.path(a, b).gbs, 450.0);  // 18 links x 25 GB/s
    }
  }
  for (int g : gpus) {
    for (int n : t.indicesOf(DevKind::Nic)) {
      PathType want = t.devs[g].parent == t.devs[n].parent   ? PathType::PciSwitch
                      : t.devs[g].socket == t.devs[n].socket ? PathType::PciHostBridge
                                                             : PathType::CrossSocket;
      EXPECT_EQ(t.path(g, n).type, want);
    }
  }
}

TEST(TopoModel, PcieNodePathClassesAndBottlenecks) {
  NodeTopo t = load("pcie_8gpu.nccl.xml");
  std::vector<int> g = t.indicesOf(DevKind::Gpu);
  ASSERT_EQ(g.size(), 8u);
  EXPECT_EQ(t.path(g[0], g[1]).type, PathType::PciSwitch);
  EXPECT_EQ(t.path(g[0], g[2]).type, PathType::PciHostBridge);
  EXPECT_EQ(t.path(g[0], g[4]).type, PathType::CrossSocket);
  EXPECT_NEAR(t.path(g[0], g[1]).gbs, 31.5, 0.1);  // Gen4 x16
  EXPECT_NEAR(t.path(g[0], g[4]).gbs, std::min(31.5, kSmpGBs), 0.1);
  EXPECT_LT(t.path(g[0], g[1]).latUs, t.path(g[0], g[4]).latUs);
}

TEST(TopoModel, NcclDirectNvLinksCountOnce) {
  const char* xml =
      "<system version=\"1\"><cpu numaid=\"0\" affinity=\"0000000f\">"
      "<pci busid=\"0000:01:00.0\" class=\"0x030200\" link_speed=\"16.0 GT/s PCIe\" "
      "link_width=\"16\">"
      "<gpu dev=\"0\" sm=\"80\"><nvlink target=\"0000:02:00.0\" count=\"12\" "
      "tclass=\"0x030200\"/></gpu></pci>"
      "<pci busid=\"0000:02:00.0\" class=\"0x030200\" link_speed=\"16.0 GT/s PCIe\" "
      "link_width=\"16\">"
      "<gpu dev=\"1\" sm=\"80\"><nvlink target=\"0000:01:00.0\" count=\"12\" "
      "tclass=\"0x030200\"/></gpu></pci>"
      "</cpu></system>";
  NodeTopo t;
  ASSERT_TRUE(loadTopoText(xml, &t).ok());
  std::vector<int> g = t.indicesOf(DevKind::Gpu);
  ASSERT_EQ(g.size(), 2u);
  ASSERT_EQ(t.links.size(), 1u);
  EXPECT_EQ(t.links[0].count, 12);
  EXPECT_EQ(t.path(g[0], g[1]).type, PathType::NVLink);
  EXPECT_DOUBLE_EQ(t.path(g[0], g[1]).gbs, 300.0);
}

// ---- Live detection ------------------------------------------------------------------

int onlineCores() {
  std::set<std::pair<std::string, std::string>> cores;
  for (long c = 0; c < sysconf(_SC_NPROCESSORS_CONF); ++c) {
    std::string base = "/sys/devices/system/cpu/cpu" + std::to_string(c) + "/topology/";
    std::string pkg, core;
    std::string text;
    if (!readFile(base + "physical_package_id", &pkg).ok()) continue;
    if (!readFile(base + "core_id", &core).ok()) continue;
    cores.emplace(pkg, core);
  }
  return static_cast<int>(cores.size());
}

void expectThisMachine(const NodeTopo& t) {
  EXPECT_EQ(t.count(DevKind::Cpu), 1);
  ASSERT_GE(t.count(DevKind::Cpu), 1);
  EXPECT_EQ(t.devs[0].cores, onlineCores());
  EXPECT_EQ(t.count(DevKind::Gpu), 0);
  EXPECT_EQ(t.count(DevKind::NvSwitch), 0);
  // Any NIC found must be a real network interface of this machine.
  for (int n : t.indicesOf(DevKind::Nic)) {
    std::string ignored;
    EXPECT_TRUE(readFile("/sys/class/net/" + t.devs[n].name + "/address", &ignored).ok() ||
                readFile("/sys/class/infiniband/" + t.devs[n].name + "/node_guid", &ignored).ok())
        << t.devs[n].name;
  }
}

TEST(TopoDetect, LiveMachine) {
  NodeTopo t;
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(detectLocal(&t).ok());
  auto t1 = std::chrono::steady_clock::now();
  NodeTopo again;
  ASSERT_TRUE(detectLocal(&again).ok());  // cached
  auto t2 = std::chrono::steady_clock::now();
  printf("[ info ] live detection %.1f ms, cached %.3f ms\n%s",
         std::chrono::duration<double, std::milli>(t1 - t0).count(),
         std::chrono::duration<double, std::milli>(t2 - t1).count(), describeTree(t).c_str());
  expectThisMachine(t);
  EXPECT_EQ(writeTideXml(again), writeTideXml(t));
}

TEST(TopoDetect, SysfsFallback) {
  NodeTopo t;
  ASSERT_TRUE(detectSysfs(&t).ok());
  expectThisMachine(t);
  NodeTopo live;
  ASSERT_TRUE(detectLocal(&live).ok());
  EXPECT_EQ(t.devs[0].cpuset, live.devs[0].cpuset);
}

// ---- CommTopo --------------------------------------------------------------------------

TEST(TopoBuild, SingleNodeHostRanks) {
  NodeTopo t;
  ASSERT_TRUE(detectLocal(&t).ok());
  CommTopo topo;
  BuildResult detail;
  ASSERT_TRUE(buildFor(t, 1, 4, &topo, &detail, 2).ok());
  EXPECT_EQ(topo.rank, 2);
  EXPECT_EQ(topo.nnodes, 1);
  for (int a = 0; a < 4; ++a) {
    EXPECT_EQ(topo.socketOf[a], 0);
    for (int b = 0; b < 4; ++b) {
      EXPECT_EQ(topo.path[a * 4 + b], a == b ? PathType::Self : PathType::SameNuma);
    }
  }
  ASSERT_GE(topo.rings.size(), 1u);
  std::vector<int> ring = topo.rings[0];
  std::sort(ring.begin(), ring.end());
  EXPECT_EQ(ring, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_FALSE(topo.text.empty());
}

TEST(TopoBuild, TwoNodesNetworkPathsAndContiguousRings) {
  NodeTopo t = load("dgx_h100.tide.xml");
  CommTopo topo;
  BuildResult detail;
  ASSERT_TRUE(buildFor(t, 2, 8, &topo, &detail).ok());
  EXPECT_EQ(topo.nnodes, 2);
  EXPECT_EQ(topo.path[0 * 16 + 8], PathType::Network);
  EXPECT_DOUBLE_EQ(topo.link[0 * 16 + 8].bandwidthGBs, 50.0);  // 400 Gb/s NICs
  EXPECT_EQ(topo.path[0 * 16 + 1], PathType::NVLink);
  EXPECT_DOUBLE_EQ(topo.interNode.bandwidthGBs, 50.0);
  EXPECT_DOUBLE_EQ(topo.intraNode.bandwidthGBs, 450.0);
  for (const auto& ring : topo.rings) {
    ASSERT_EQ(ring.size(), 16u);
    for (int i = 0; i < 8; ++i) EXPECT_LT(ring[i], 8);  // node 0 first, contiguous
    std::vector<int> s = ring;
    std::sort(s.begin(), s.end());
    for (int i = 0; i < 16; ++i) EXPECT_EQ(s[i], i);
  }
}

TEST(TopoBuild, DeterministicAndFast) {
  NodeTopo t = load("dgx_h100.tide.xml");
  CommTopo a, b;
  BuildResult da, db;
  const int iters = 10;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) ASSERT_TRUE(buildFor(t, 1, 8, &a, &da, 0).ok());
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() /
      iters;
  ASSERT_TRUE(buildFor(t, 1, 8, &b, &db, 5).ok());
  EXPECT_EQ(a.rings, b.rings);
  EXPECT_EQ(a.path, b.path);
  EXPECT_EQ(a.socketOf, b.socketOf);
  printf("[ info ] build for 8 ranks (DGX fixture): %.2f ms\n", ms);
  EXPECT_LT(ms, 50.0);
}

TEST(TopoBuild, BadBlobFails) {
  std::vector<PeerInfo> peers(2);
  peers[1].rank = 1;
  CommTopo topo;
  BuildResult detail;
  EXPECT_FALSE(buildCommTopo({"junk", "junk"}, peers, 0, &topo, &detail).ok());
  EXPECT_FALSE(buildCommTopo({"junk"}, peers, 0, &topo, &detail).ok());
}

// The registered provider honours TIDE_TOPO_FILE and TIDE_TOPO_DUMP_FILE.
TEST(TopoProvider, TopoFileAndDumpFile) {
  const TopologyProvider* p = topologyProvider();
  ASSERT_NE(p, nullptr);
  ASSERT_NE(p->describeLocal, nullptr);
  ASSERT_NE(p->build, nullptr);
  std::string dump = "/tmp/tide-topo-test-" + std::to_string(getpid()) + ".xml";
  setenv("NCCL_TOPO_FILE",
         fixture(TIDE_HAVE_HWLOC ? "pcie_8gpu.hwloc.xml" : "pcie_8gpu.nccl.xml").c_str(), 1);
  setenv("TIDE_TOPO_DUMP_FILE", dump.c_str(), 1);
  std::string id;
  ASSERT_TRUE(p->nodeIdentity(&id).ok());
  std::vector<PeerInfo> peers(8);
  std::vector<std::string> blobs(8);
  for (int r = 0; r < 8; ++r) {
    peers[r].rank = r;
    peers[r].hostHash = 77;
    Status s = p->describeLocal(peers[r], &blobs[r]);
    ASSERT_TRUE(s.ok()) << s.message();
  }
  CommTopo topo;
  Status s = p->build(blobs, peers, 0, &topo);
  unsetenv("NCCL_TOPO_FILE");
  unsetenv("TIDE_TOPO_DUMP_FILE");
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(topo.socketOf, (std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1}));
  EXPECT_EQ(topo.path[0 * 8 + 1], PathType::PciSwitch);
  NodeTopo dumped;
  ASSERT_TRUE(loadTopoFile(dump, &dumped).ok());
  EXPECT_EQ(writeTideXml(dumped, true), writeTideXml(load("pcie_8gpu.tide.xml"), true));
  remove(dump.c_str());
}

TEST(TopoProvider, BadTopoFileFallsBackToDetection) {
  const TopologyProvider* p = topologyProvider();
  ASSERT_NE(p, nullptr);
  setenv("TIDE_TOPO_FILE", "/nonexistent/tide-topo.xml", 1);
  PeerInfo me;
  me.rank = 0;
  std::string blob;
  Status s = p->describeLocal(me, &blob);
  unsetenv("TIDE_TOPO_FILE");
  ASSERT_TRUE(s.ok()) << s.message();
  CommTopo topo;
  ASSERT_TRUE(p->build({blob}, {me}, 0, &topo).ok());
  EXPECT_EQ(topo.socketOf[0], 0);  // this machine: one package
}

}  // namespace
}  // namespace tide::topo
