#include "report.h"

#include <cstdio>
#include <vector>

#include "algorithms/patterns/cost.h"
#include "algorithms/patterns/tree.h"
#include "core/comm/predict.h"
#include "core/config.h"
#include "tide/tide.h"
#if TIDE_TOPO_HAVE_JSON
#include <nlohmann/json.hpp>
#endif

namespace tide_topo {

bool printJson(const tide::topo::NodeTopo& node, const tide::CommTopo& topo, int nodes, int ranks,
               std::string* error) {
#if TIDE_TOPO_HAVE_JSON
  (void)error;
  using nlohmann::json;
  using namespace tide::topo;  // NOLINT(google-build-using-namespace): the model's names
  json j;
  j["host"] = node.host;
  json devs = json::array();
  for (size_t i = 0; i < node.devs.size(); ++i) {
    const Device& d = node.devs[i];
    devs.push_back({{"index", i},
                    {"kind", devKindName(d.kind)},
                    {"bus", d.bus},
                    {"name", d.name},
                    {"parent", d.parent},
                    {"socket", d.socket},
                    {"numa", d.numa},
                    {"cpuset", d.cpuset},
                    {"cores", d.cores},
                    {"pciGBs", d.pciGBs},
                    {"speedGBs", d.speedGBs},
                    {"rdma", d.rdma}});
  }
  j["devices"] = devs;
  json links = json::array();
  for (const Link& l : node.links) {
    links.push_back({{"a", l.a},
                     {"b", l.b},
                     {"kind", linkKindName(l.kind)},
                     {"count", l.count},
                     {"gbs", l.gbs},
                     {"latUs", l.latUs}});
  }
  j["links"] = links;
  json paths = json::array();
  for (size_t a = 0; a < node.devs.size(); ++a) {
    json row = json::array();
    for (size_t b = 0; b < node.devs.size(); ++b) {
      const DevPath& p = node.path(static_cast<int>(a), static_cast<int>(b));
      row.push_back({{"type", tide::pathName(p.type)}, {"gbs", p.gbs}, {"latUs", p.latUs}});
    }
    paths.push_back(row);
  }
  j["paths"] = paths;
  json gpus = json::array();
  const std::vector<int> g = node.indicesOf(DevKind::Gpu);
  const std::vector<int> nic = gpuNics(node);
  for (size_t i = 0; i < g.size(); ++i) {
    gpus.push_back({{"index", g[i]},
                    {"bus", node.devs[g[i]].bus},
                    {"nicIndex", nic[i]},
                    {"nic", nic[i] >= 0 ? json(node.devs[nic[i]].name) : json(nullptr)}});
  }
  j["gpus"] = gpus;
  json comm;
  comm["nodes"] = nodes;
  comm["ranksPerNode"] = ranks;
  comm["nodeRanks"] = topo.nodeRanks;
  comm["rings"] = topo.rings;
  comm["intraNode"] = {{"latencyUs", topo.intraNode.latencyUs},
                       {"bandwidthGBs", topo.intraNode.bandwidthGBs}};
  comm["interNode"] = {{"latencyUs", topo.interNode.latencyUs},
                       {"bandwidthGBs", topo.interNode.bandwidthGBs}};
  // The tree algorithm's double binary tree: over rings[0]'s order.
  const int n = topo.nranks;
  const std::vector<int> order = tide::pattern::ringOrder(topo, n);
  json trees = json::array();
  for (int t = 0; t < 2; ++t) {
    std::vector<int> parent(static_cast<size_t>(n), -1);
    for (int r = 0; r < n; ++r) {
      const int p = tide::pattern::doubleTree(tide::pattern::positionOf(order, r), n, t).parent;
      parent[static_cast<size_t>(r)] = p < 0 ? -1 : order[static_cast<size_t>(p)];
    }
    trees.push_back({{"tree", t}, {"parentOfRank", parent}});
  }
  comm["trees"] = trees;
  j["communicator"] = comm;
  std::puts(j.dump(1).c_str());
  return true;
#else
  (void)node;
  (void)topo;
  (void)nodes;
  (void)ranks;
  *error = "--json needs nlohmann-json (nlohmann-json3-dev) at build time";
  return false;
#endif
}

int printPlan(const std::string& topoFile, int nodes, int ranks, size_t bytes) {
  tide::CommTopo topo;
  tide::Status s = tide::topoOfFile(topoFile, nodes, ranks, &topo);
  if (!s.ok()) {
    std::fprintf(stderr, "tide-topo: %s\n", s.message().c_str());
    return 1;
  }
  static const struct {
    tideCollective_t coll;
    const char* name;
  } kColls[] = {{tideCollAllReduce, "allreduce"},
                {tideCollBroadcast, "broadcast"},
                {tideCollReduce, "reduce"},
                {tideCollAllGather, "allgather"},
                {tideCollReduceScatter, "reducescatter"},
                {tideCollAlltoAll, "alltoall"},
                {tideCollSendRecv, "sendrecv"}};
  std::printf("# %zu bytes on %d node(s) x %d rank(s) of %s (predicted microseconds)\n", bytes,
              nodes, ranks, topoFile.empty() ? "this node" : topoFile.c_str());
  std::printf("%-14s %-10s %14s\n", "collective", "algorithm", "us");
  int rc = 0;
  for (const auto& c : kColls) {
    std::vector<tide::AlgoPrediction> rows;
    double chosen = 0;
    s = tide::predictAll(topo, nodes * ranks, tide::knobSize(tide::Knob::ChunkSize), c.coll, bytes,
                         &rows, &chosen);
    if (!s.ok()) {
      std::fprintf(stderr, "tide-topo: %s: %s\n", c.name, s.message().c_str());
      rc = 1;
      continue;
    }
    for (const tide::AlgoPrediction& r : rows) {
      if (r.us >= 1e20) {  // the model's "not on this layout" (direct: one node only)
        std::printf("%-14s %-10s %14s\n", c.name, r.name, "n/a");
      } else {
        std::printf("%-14s %-10s %14.2f%s\n", c.name, r.name, r.us,
                    r.us == chosen ? "  (chosen)" : "");
      }
    }
    double api = -1;
    const tideResult_t ar = tideTopoPredictTime(topoFile.empty() ? nullptr : topoFile.c_str(),
                                                nodes, ranks, c.coll, bytes, &api);
    std::printf("%-14s %-10s %14.2f  tideTopoPredictTime: %.2f%s\n", c.name, "=>", chosen, api,
                ar == tideSuccess ? "" : " (failed)");
    if (ar != tideSuccess) rc = 1;
  }
  return rc;
}

}  // namespace tide_topo
