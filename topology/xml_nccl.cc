// Reader for NCCL's topology XML schema (<system version="1">), the format
// cloud vendors publish for their GPU nodes.
#include <algorithm>
#include <cctype>
#include <map>

#include "topology/formats.h"

namespace tide::topo {

namespace {

// "ffffffff,00000000" (32-bit groups, most significant first) -> "32-63".
bool affinityToList(const std::string& mask, std::string* out) {
  std::vector<std::string> groups;
  std::string cur;
  for (char c : mask) {
    if (c == ',') {
      groups.push_back(cur);
      cur.clear();
    } else if (!isspace(static_cast<unsigned char>(c))) {
      cur += c;
    }
  }
  groups.push_back(cur);
  std::vector<bool> cpus(groups.size() * 32, false);
  for (size_t g = 0; g < groups.size(); ++g) {
    std::string h = groups[groups.size() - 1 - g];
    if (h.size() > 2 && h[0] == '0' && (h[1] == 'x' || h[1] == 'X')) h = h.substr(2);
    if (h.empty() || h.size() > 8) return false;
    char* end = nullptr;
    unsigned long v = strtoul(h.c_str(), &end, 16);
    if (*end != '\0') return false;
    for (int b = 0; b < 32; ++b) {
      if (v & (1ul << b)) cpus[g * 32 + b] = true;
    }
  }
  *out = formatCpuList(cpus);
  return true;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(tolower(static_cast<unsigned char>(c)));
  return s;
}

struct NvLinkRef {
  int gpu;
  std::string target;
  int count;
  int sm;
};

class NcclReader {
 public:
  explicit NcclReader(NodeTopo* t) : t_(t) {}

  Status cpu(const XmlNode& c) {
    Device d;
    d.kind = DevKind::Cpu;
    d.numa = static_cast<int>(c.num("numaid", -1));
    if (!affinityToList(c.attr("affinity", "0"), &d.cpuset))
      return invalidArgument("NCCL topology: bad cpu affinity '%s'", c.attr("affinity").c_str());
    int self = add(std::move(d));
    for (const XmlNode& k : c.kids) TIDE_TRY(child(k, self));
    return Status::Ok();
  }

  Status finish() {
    std::map<std::pair<int, int>, NvLinkRef> direct;
    for (const NvLinkRef& r : nv_) {
      int target = -1;
      for (size_t i = 0; i < t_->devs.size(); ++i) {
        if (t_->devs[i].kind == DevKind::Gpu && t_->devs[i].bus == r.target)
          target = static_cast<int>(i);
      }
      if (target == r.gpu) continue;
      if (target >= 0) {
        auto key = std::minmax(r.gpu, target);
        auto [it, fresh] = direct.emplace(key, r);
        if (!fresh && r.count > it->second.count) it->second = r;
        continue;
      }
      // Not a GPU: an NVSwitch (NCCL marks it with tclass 0x068000).
      Device sw;
      sw.kind = DevKind::NvSwitch;
      sw.bus = r.target;
      int s = add(std::move(sw));
      t_->links.push_back(
          Link{r.gpu, s, LinkKind::NvLink, r.count, r.count * nvLinkGBs(r.sm), kNvLinkLatUs});
    }
    for (const auto& [key, r] : direct) {
      t_->links.push_back(Link{key.first, key.second, LinkKind::NvLink, r.count,
                               r.count * nvLinkGBs(r.sm), kNvLinkLatUs});
    }
    return normalize(t_);
  }

 private:
  int add(Device d) {
    t_->devs.push_back(std::move(d));
    return static_cast<int>(t_->devs.size()) - 1;
  }

  void nics(const XmlNode& nic, int parent, const std::string& bus, double pci) {
    for (const XmlNode& net : nic.kids) {
      if (net.tag != "net") continue;
      Device d;
      d.kind = DevKind::Nic;
      d.parent = parent;
      d.bus = bus;
      d.name = net.attr("name");
      d.speedGBs = net.num("speed", 0) / 8000.0;  // Mbit/s
      d.rdma = net.has("guid") || net.attr("gdr") == "1";
      d.pciGBs = pci;
      add(std::move(d));
    }
  }

  Status child(const XmlNode& k, int parent) {
    if (k.tag == "nic") {
      nics(k, parent, "", 0);
      return Status::Ok();
    }
    if (k.tag != "pci") return Status::Ok();  // ignore unknown elements
    std::string bus = lower(k.attr("busid"));
    double pci = pciLinkGBs(k.num("link_speed", 0), static_cast<int>(k.num("link_width", 0)));
    bool hasPci =
        std::any_of(k.kids.begin(), k.kids.end(), [](const XmlNode& x) { return x.tag == "pci"; });
    if (hasPci) {
      Device sw;
      sw.kind = DevKind::PciSwitch;
      sw.parent = parent;
      sw.bus = bus;
      sw.pciGBs = pci;
      int s = add(std::move(sw));
      for (const XmlNode& x : k.kids) TIDE_TRY(child(x, s));
      return Status::Ok();
    }
    for (const XmlNode& x : k.kids) {
      if (x.tag == "gpu") {
        Device g;
        g.kind = DevKind::Gpu;
        g.parent = parent;
        g.bus = bus;
        g.pciGBs = pci;
        int gi = add(std::move(g));
        int sm = static_cast<int>(x.num("sm", 0));
        for (const XmlNode& l : x.kids) {
          if (l.tag != "nvlink") continue;
          nv_.push_back(
              NvLinkRef{gi, lower(l.attr("target")), static_cast<int>(l.num("count", 1)), sm});
        }
      } else if (x.tag == "nic") {
        nics(x, parent, bus, pci);
      }
    }
    return Status::Ok();
  }

  NodeTopo* t_;
  std::vector<NvLinkRef> nv_;
};

}  // namespace

Status readNcclXml(const XmlNode& root, NodeTopo* t) {
  *t = NodeTopo{};
  if (root.tag != "system") return invalidArgument("not an NCCL <system> document");
  NcclReader r(t);
  for (const XmlNode& c : root.kids) {
    if (c.tag == "cpu") TIDE_TRY(r.cpu(c));
  }
  if (t->devs.empty()) return invalidArgument("NCCL topology without <cpu>");
  return r.finish();
}

}  // namespace tide::topo
