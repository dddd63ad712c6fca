// Built-in net registry, TIDE_NET / TIDE_NET_PLUGIN selection, plugin
// loading (dlopen) and the exported tideNetGet().
#include "transports/net/net_registry.h"

#include <dirent.h>
#include <dlfcn.h>

#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>

#include "core/config.h"
#include "core/log.h"
#include "tide_build_config.h"

namespace tide {
namespace {

struct NetTable {
  std::mutex mu;
  std::vector<const tideNet_v1_t*> builtins;
  std::map<std::string, const tideNet_v1_t*> plugins;  // by the TIDE_NET_PLUGIN value
  std::map<const tideNet_v1_t*, tideResult_t> inited;  // init() result per net
};

NetTable& table() {
  static NetTable* t = new NetTable;  // never destroyed: used from static init/exit
  return *t;
}

thread_local std::string tDetail;

bool rdmaDevicePresent() {
  DIR* d = opendir("/sys/class/infiniband");
  if (d == nullptr) return false;
  bool any = false;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') any = true;
  }
  closedir(d);
  return any;
}

const tideNet_v1_t* builtinLocked(NetTable& t, const std::string& name) {
  for (const tideNet_v1_t* n : t.builtins)
    if (name == n->name) return n;
  return nullptr;
}

bool validTable(const tideNet_v1_t* n) {
  return n->name != nullptr && n->init && n->devices && n->getProperties && n->listen &&
         n->connect && n->accept && n->regMr && n->deregMr && n->isend && n->irecv && n->test &&
         n->closeSend && n->closeRecv && n->closeListen;
}

// Loads (once) the plugin named by a TIDE_NET_PLUGIN-style value.
Status loadPluginLocked(NetTable& t, const std::string& spec, const tideNet_v1_t** out) {
  auto it = t.plugins.find(spec);
  if (it != t.plugins.end()) {
    *out = it->second;
    return Status::Ok();
  }
  std::string file = spec.find('/') != std::string::npos ? spec : "libtide-net-" + spec + ".so";
  void* h = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* e = dlerror();
    return systemError("net plugin \"%s\": cannot load %s: %s", spec.c_str(), file.c_str(),
                       e ? e : "?");
  }
  auto* net = static_cast<const tideNet_v1_t*>(dlsym(h, TIDE_NET_PLUGIN_SYMBOL));
  if (net == nullptr) {
    dlclose(h);
    return systemError("net plugin %s does not export %s (is it a Tide net plugin, ABI v%d?)",
                       file.c_str(), TIDE_NET_PLUGIN_SYMBOL, TIDE_NET_ABI_VERSION);
  }
  if (!validTable(net)) {
    dlclose(h);
    return systemError("net plugin %s: %s has a NULL name or required function", file.c_str(),
                       TIDE_NET_PLUGIN_SYMBOL);
  }
  TIDE_INFO("loaded net plugin \"%s\" from %s", net->name, file.c_str());
  t.plugins[spec] = net;  // stays loaded for the life of the process
  *out = net;
  return Status::Ok();
}

Status initLocked(NetTable& t, const tideNet_v1_t* net) {
  auto it = t.inited.find(net);
  tideResult_t r;
  if (it != t.inited.end()) {
    r = it->second;
  } else {
    tDetail.clear();
    r = net->init(netLogger);
    t.inited[net] = r;
  }
  if (r != tideSuccess) return netStatus(r, net->name, "init");
  int n = 0;
  TIDE_TRY(netStatus(net->devices(&n), net->name, "devices"));
  if (n <= 0) return systemError("net %s: no usable device on this node", net->name);
  return Status::Ok();
}

std::string knownNames(NetTable& t) {
  std::string s;
  for (const tideNet_v1_t* n : t.builtins) s += std::string(s.empty() ? "" : ", ") + n->name;
  if (!TIDE_HAVE_UCX) s += ", ucx (not built)";
  if (!TIDE_HAVE_IBVERBS) s += ", ib (not built)";
  return s + ", or a plugin loaded by TIDE_NET_PLUGIN";
}

}  // namespace

void registerNet(const tideNet_v1_t* net) {
  NetTable& t = table();
  std::lock_guard<std::mutex> g(t.mu);
  for (const tideNet_v1_t*& n : t.builtins) {
    if (std::strcmp(n->name, net->name) == 0) {
      n = net;
      return;
    }
  }
  t.builtins.push_back(net);
}

std::vector<std::string> registeredNetNames() {
  NetTable& t = table();
  std::lock_guard<std::mutex> g(t.mu);
  std::vector<std::string> v;
  for (const tideNet_v1_t* n : t.builtins) v.emplace_back(n->name);
  return v;
}

Status selectNet(const std::string& name, const tideNet_v1_t** out) {
  NetTable& t = table();
  std::lock_guard<std::mutex> g(t.mu);
  const tideNet_v1_t* net = nullptr;
  std::string want = name;
  std::string plugin = knobString(Knob::NetPlugin);
  if (want.empty()) want = knobString(Knob::Net);
  if (!want.empty()) {
    net = builtinLocked(t, want);
    if (net == nullptr && !plugin.empty()) {
      const tideNet_v1_t* p = nullptr;
      TIDE_TRY(loadPluginLocked(t, plugin, &p));
      if (want == p->name || want == plugin) net = p;
    }
    if (net == nullptr && !name.empty()) {
      // An explicit name that is no built-in: try it as a plugin itself.
      Status s = loadPluginLocked(t, want, &net);
      if (!s.ok() && (want == "ucx" || want == "ib"))
        return invalidArgument("net \"%s\" is not built into this Tide (known: %s)", want.c_str(),
                               knownNames(t).c_str());
      TIDE_TRY(s);
    }
    if (net == nullptr) {
      return invalidArgument("TIDE_NET=%s: no such net (known: %s)", want.c_str(),
                             knownNames(t).c_str());
    }
  } else if (!plugin.empty()) {
    TIDE_TRY(loadPluginLocked(t, plugin, &net));
  } else {
    if (rdmaDevicePresent()) net = builtinLocked(t, TIDE_HAVE_UCX ? "ucx" : "ib");
    if (net == nullptr) net = builtinLocked(t, "socket");
    if (net == nullptr) return internalError("no socket net registered");
  }
  Status s = initLocked(t, net);
  if (!s.ok()) {
    return Status(s.code(), std::string("net ") + net->name + " cannot be used: " + s.message());
  }
  *out = net;
  return Status::Ok();
}

void netLogger(int level, const char* file, int line, const char* fmt, ...) {
  LogLevel lv = level <= TIDE_NET_LOG_WARN   ? LogLevel::Warn
                : level == TIDE_NET_LOG_INFO ? LogLevel::Info
                                             : LogLevel::Trace;
  if (logLevel() < lv) return;
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  logMessage(lv, file ? file : "net", line, "%s", buf);
}

void setNetErrorDetail(const std::string& detail) { tDetail = detail; }

Status netStatus(tideResult_t r, const char* netName, const char* what) {
  if (r == tideSuccess) {
    tDetail.clear();
    return Status::Ok();
  }
  std::string msg = std::string(netName) + ": " + what + " failed (" + tideGetErrorString(r) + ")";
  if (!tDetail.empty()) msg += ": " + tDetail;
  tDetail.clear();
  if (r <= tideSuccess || r >= tideNumResults || r == tideInProgress) r = tideInternalError;
  return Status(r, msg);
}

}  // namespace tide

extern "C" __attribute__((visibility("default"))) tideResult_t tideNetGet(
    const char* name, const tideNet_v1_t** net) {
  if (net == nullptr) return tideInvalidArgument;
  try {
    tide::Status s = tide::selectNet(name ? name : "", net);
    if (!s.ok()) TIDE_WARN("tideNetGet(%s): %s", name ? name : "NULL", s.message().c_str());
    return s.code();
  } catch (...) {
    return tideInternalError;
  }
}
