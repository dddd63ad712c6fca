// tide-topo: shows what Tide's topology provider sees on this node (or in
// an XML file): the device tree, the path matrix, each GPU's NIC, and the
// rings a communicator of --ranks ranks on each of --nodes such nodes gets.
//
//   tide-topo [--xml FILE] [--dump FILE] [--ranks N] [--nodes K] [--canonical] [--json]
//   tide-topo [--xml FILE] --plan BYTES [--nodes K] [--ranks-per-node N]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/topology.h"
#include "report.h"
#include "topology/formats.h"
#include "topology/provider.h"

namespace {

void usage() {
  fprintf(stderr,
          "usage: tide-topo [--xml FILE] [--dump FILE] [--ranks N] [--nodes K] [--canonical]\n"
          "                 [--json] [--plan BYTES]\n"
          "  --xml FILE   load FILE (Tide, NCCL or hwloc XML) instead of detecting this node\n"
          "  --dump FILE  write the model in Tide's schema to FILE\n"
          "  --ranks N    ranks per node for the communicator shown (default: GPUs, else cores)\n"
          "  --nodes K    number of identical nodes (default 1)\n"
          "  --canonical  print only the canonical Tide XML (what fixture tests compare)\n"
          "  --json       print the model and the communicator as JSON (devices, links, paths,\n"
          "               each GPU's NIC, rings, trees)\n"
          "  --plan BYTES predicted time of every algorithm of every collective for BYTES\n"
          "               (K, M, G suffixes) on --nodes x --ranks-per-node (= --ranks)\n");
}

}  // namespace

int main(int argc, char** argv) {
  std::string xml, dump;
  int ranks = 0, nodes = 1;
  bool canonical = false, json = false;
  long long plan = -1;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) {
        usage();
        exit(2);
      }
      return argv[++i];
    };
    if (a == "--xml")
      xml = value();
    else if (a == "--dump")
      dump = value();
    else if (a == "--ranks" || a == "--ranks-per-node")
      ranks = atoi(value());
    else if (a == "--json")
      json = true;
    else if (a == "--plan") {
      char* end = nullptr;
      const char* v = value();
      double x = strtod(v, &end);
      const char suffix = end != nullptr ? *end : '\0';
      const double mult = suffix == 'K' || suffix == 'k'   ? 1024.0
                          : suffix == 'M' || suffix == 'm' ? 1048576.0
                          : suffix == 'G' || suffix == 'g' ? 1073741824.0
                                                           : 1.0;
      if (end == v || x < 0 || (suffix != '\0' && mult == 1.0)) {
        fprintf(stderr, "tide-topo: --plan %s: not a size\n", v);
        return 2;
      }
      plan = static_cast<long long>(x * mult);
    } else if (a == "--nodes")
      nodes = atoi(value());
    else if (a == "--canonical")
      canonical = true;
    else {
      usage();
      return a == "--help" || a == "-h" ? 0 : 2;
    }
  }
  using namespace tide::topo;  // NOLINT(google-build-using-namespace): main() of the tool
  if (plan >= 0) {
    if (nodes < 1 || ranks < 1 || ranks > 4096 || nodes * ranks > 65536) {
      fprintf(stderr, "tide-topo: --plan needs --nodes >= 1 and --ranks-per-node >= 1\n");
      return 2;
    }
    return tide_topo::printPlan(xml, nodes, ranks, static_cast<size_t>(plan));
  }
  NodeTopo node;
  tide::Status s = xml.empty() ? localNodeTopo(&node) : loadTopoFile(xml, &node);
  if (!s.ok()) {
    fprintf(stderr, "tide-topo: %s\n", s.message().c_str());
    return 1;
  }
  if (!dump.empty()) {
    s = writeFile(dump, writeTideXml(node));
    if (!s.ok()) {
      fprintf(stderr, "tide-topo: %s\n", s.message().c_str());
      return 1;
    }
  }
  if (canonical) {
    fputs(writeTideXml(node, true).c_str(), stdout);
    return 0;
  }
  if (!json) {
    printf("node %s: %d socket(s), %d PCIe switch(es), %d GPU(s), %d NIC(s), %d NVSwitch\n\n",
           node.host.c_str(), node.count(DevKind::Cpu), node.count(DevKind::PciSwitch),
           node.count(DevKind::Gpu), node.count(DevKind::Nic), node.count(DevKind::NvSwitch));
    printf("devices:\n%s\n", describeTree(node).c_str());
    printf("paths (class, bottleneck GB/s):\n%s\n", describePaths(node).c_str());
  }
  std::vector<int> gpus = node.indicesOf(DevKind::Gpu);
  std::vector<int> nic = gpuNics(node);
  for (size_t g = 0; g < gpus.size() && !json; ++g) {
    printf("gpu [%d] %s -> nic %s\n", gpus[g], node.devs[gpus[g]].bus.c_str(),
           nic[g] >= 0 ? node.devs[nic[g]].name.c_str() : "none");
  }
  // A communicator: `ranks` per node, spread over the CPUs of each socket.
  if (ranks <= 0) {
    ranks = static_cast<int>(gpus.size());
    if (ranks == 0) {
      for (const Device& d : node.devs) ranks += d.kind == DevKind::Cpu ? d.cores : 0;
    }
    if (ranks <= 0) ranks = 1;
  }
  if (nodes < 1 || ranks > 4096 || nodes * ranks > 65536) {
    fprintf(stderr, "tide-topo: bad --ranks/--nodes\n");
    return 2;
  }
  std::vector<int> cpuDevs = node.indicesOf(DevKind::Cpu);
  std::vector<std::string> blobs;
  std::vector<tide::PeerInfo> peers;
  for (int nd = 0; nd < nodes; ++nd) {
    for (int l = 0; l < ranks; ++l) {
      tide::PeerInfo p;
      p.rank = static_cast<int>(peers.size());
      p.hostHash = 0x1000 + nd;
      snprintf(p.host, sizeof(p.host), "%s#%d", node.host.c_str(), nd);
      peers.push_back(p);
      // Rank l binds to socket (l * sockets / ranks): block distribution.
      std::string cpus;
      if (!cpuDevs.empty()) {
        cpus = node.devs[cpuDevs[static_cast<size_t>(l) * cpuDevs.size() / ranks]].cpuset;
      }
      blobs.push_back(makeBlob(node, cpus));
    }
  }
  tide::CommTopo topo;
  BuildResult detail;
  s = buildCommTopo(blobs, peers, 0, &topo, &detail);
  if (!s.ok()) {
    fprintf(stderr, "tide-topo: %s\n", s.message().c_str());
    return 1;
  }
  if (json) {
    std::string error;
    if (!tide_topo::printJson(node, topo, nodes, ranks, &error)) {
      fprintf(stderr, "tide-topo: %s\n", error.c_str());
      return 1;
    }
    return 0;
  }
  printf("\ncommunicator of %d node(s) x %d rank(s):\n%s", nodes, ranks, topo.text.c_str());
  return 0;
}
