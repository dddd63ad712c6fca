// Tide's topology schema: writer and reader.
#include <cstdio>

#include "topology/formats.h"

namespace tide::topo {

namespace {

std::string fmt1(double v) {
  char b[32];
  snprintf(b, sizeof(b), "%.1f", v);
  return b;
}

}  // namespace

std::string writeTideXml(const NodeTopo& t, bool canonical) {
  std::string out = "<tide-topology version=\"1\"";
  if (!canonical && !t.host.empty()) out += " host=\"" + xmlEscape(t.host) + "\"";
  out += ">\n";
  for (size_t i = 0; i < t.devs.size(); ++i) {
    const Device& d = t.devs[i];
    out += "  <" + std::string(devKindName(d.kind)) + " id=\"" + std::to_string(i) + "\"";
    if (d.parent >= 0) out += " parent=\"" + std::to_string(d.parent) + "\"";
    if (d.kind == DevKind::Cpu) {
      out += " numa=\"" + std::to_string(d.numa) + "\" cpus=\"" + d.cpuset + "\"";
      if (!canonical && d.cores > 0) out += " cores=\"" + std::to_string(d.cores) + "\"";
    }
    if (!d.bus.empty()) out += " bus=\"" + xmlEscape(d.bus) + "\"";
    if (!d.name.empty()) out += " name=\"" + xmlEscape(d.name) + "\"";
    if (d.parent >= 0 && d.pciGBs > 0) out += " pcie-gbs=\"" + fmt1(d.pciGBs) + "\"";
    if (d.kind == DevKind::Nic) {
      out += " speed-gbs=\"" + fmt1(d.speedGBs) + "\" rdma=\"" + (d.rdma ? "1" : "0") + "\"";
    }
    out += "/>\n";
  }
  for (const Link& l : t.links) {
    out += "  <link a=\"" + std::to_string(l.a) + "\" b=\"" + std::to_string(l.b) + "\" type=\"" +
           linkKindName(l.kind) + "\" count=\"" + std::to_string(l.count) + "\" gbs=\"" +
           fmt1(l.gbs) + "\"/>\n";
  }
  out += "</tide-topology>\n";
  return out;
}

Status readTideXml(const XmlNode& root, NodeTopo* t) {
  *t = NodeTopo{};
  if (root.tag != "tide-topology") return invalidArgument("not a tide-topology document");
  if (root.attr("version", "1") != "1")
    return invalidArgument("tide-topology version %s not supported", root.attr("version").c_str());
  t->host = root.attr("host");
  std::vector<int> idToIndex;
  std::vector<std::pair<int, int>> parents;  // (device index, parent id)
  for (const XmlNode& k : root.kids) {
    if (k.tag == "link") continue;
    DevKind kind;
    if (!parseDevKind(k.tag, &kind))
      return invalidArgument("tide-topology: unknown element <%s>", k.tag.c_str());
    int id = static_cast<int>(k.num("id", -1));
    if (id < 0 || id > 100000)
      return invalidArgument("tide-topology: <%s> without a valid id", k.tag.c_str());
    if (idToIndex.size() <= static_cast<size_t>(id)) idToIndex.resize(id + 1, -1);
    if (idToIndex[id] >= 0) return invalidArgument("tide-topology: duplicate id %d", id);
    idToIndex[id] = static_cast<int>(t->devs.size());
    Device d;
    d.kind = kind;
    d.bus = k.attr("bus");
    d.name = k.attr("name");
    d.numa = static_cast<int>(k.num("numa", -1));
    d.cpuset = k.attr("cpus");
    d.cores = static_cast<int>(k.num("cores", 0));
    d.pciGBs = k.num("pcie-gbs", 0);
    d.speedGBs = k.num("speed-gbs", 0);
    d.rdma = k.attr("rdma") == "1";
    if (k.has("parent")) parents.emplace_back(idToIndex[id], static_cast<int>(k.num("parent", -1)));
    t->devs.push_back(std::move(d));
  }
  auto lookup = [&](int id) {
    return id >= 0 && static_cast<size_t>(id) < idToIndex.size() ? idToIndex[id] : -1;
  };
  for (auto [dev, pid] : parents) {
    int p = lookup(pid);
    if (p < 0) return invalidArgument("tide-topology: parent %d does not exist", pid);
    t->devs[dev].parent = p;
  }
  for (const XmlNode& k : root.kids) {
    if (k.tag != "link") continue;
    Link l;
    l.a = lookup(static_cast<int>(k.num("a", -1)));
    l.b = lookup(static_cast<int>(k.num("b", -1)));
    if (l.a < 0 || l.b < 0) return invalidArgument("tide-topology: link to a missing device");
    if (!parseLinkKind(k.attr("type", "nvlink"), &l.kind))
      return invalidArgument("tide-topology: link type %s", k.attr("type").c_str());
    l.count = static_cast<int>(k.num("count", 1));
    l.gbs = k.num("gbs", 0);
    if (l.gbs <= 0 && l.kind == LinkKind::NvLink) l.gbs = l.count * kNvLinkPerLinkGBs;
    t->links.push_back(l);
  }
  return normalize(t);
}

Status loadTopoText(const std::string& text, NodeTopo* t) {
  XmlNode root;
  TIDE_TRY(parseXml(text, &root));
  if (root.tag == "tide-topology") return readTideXml(root, t);
  if (root.tag == "system") return readNcclXml(root, t);
  if (root.tag == "topology") return readHwlocXml(text, t);
  return invalidArgument("unknown topology document <%s>", root.tag.c_str());
}

Status loadTopoFile(const std::string& path, NodeTopo* t) {
  std::string text;
  TIDE_TRY(readFile(path, &text));
  Status s = loadTopoText(text, t);
  if (!s.ok()) return makeStatus(s.code(), "%s: %s", path.c_str(), s.message().c_str());
  return Status::Ok();
}

}  // namespace tide::topo
