// The UCX net's process-wide UCP context (see ucx_internal.h).
#include <sys/socket.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/config.h"
#include "core/log.h"
#include "transports/common/net_devices.h"
#include "transports/ucx/ucx_internal.h"

namespace tide {
namespace ucx {

Global& global() {
  static Global* g = new Global;
  return *g;
}

tideResult_t fail(tideResult_t code, const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  TIDE_WARN("ucx net: %s", buf);
  return code;
}

namespace {

// The side channel's interface: the first one the socket net would use
// (TIDE_SOCKET_IFNAME; default: not loopback, not docker/virbr; loopback when
// nothing else exists).
bool pickInterface(std::string* name, SockAddr* addr) {
  std::vector<NetDevice> devs = findNetDevices(knobString(Knob::SocketIfname), AF_UNSPEC);
  if (devs.empty()) return false;
  *name = devs[0].ifname;
  *addr = devs[0].addr;
  return true;
}

// What UCX_TLS (`tls`, may be null: UCX's default) allows of tcp: whether
// UCX may use it at all, and whether it is the only network transport (tcp
// and at most "self"). One parse of the comma list; a leading '^' excludes.
struct TlsUse {
  bool mayUseTcp = true;
  bool tcpOnly = false;
};

TlsUse tlsUse(const char* tls) {
  TlsUse u;
  if (tls == nullptr) return u;
  const bool exclude = tls[0] == '^';
  const std::string list = exclude ? tls + 1 : tls;
  bool tcp = false, all = false, other = false;
  size_t pos = 0;
  while (pos <= list.size()) {
    size_t end = list.find(',', pos);
    if (end == std::string::npos) end = list.size();
    const std::string item = list.substr(pos, end - pos);
    if (item.rfind("tcp", 0) == 0) {
      tcp = true;
    } else if (item == "all") {
      all = true;
    } else if (item != "self" && !item.empty()) {
      other = true;
    }
    pos = end + 1;
  }
  u.mayUseTcp = exclude ? !tcp : (tcp || all);
  u.tcpOnly = !exclude && tcp && !all && !other;
  return u;
}

}  // namespace

tideResult_t ucxInit(tideNetLogger_t /*logger*/) {
  Global& g = global();
  std::lock_guard<std::mutex> lock(g.mu);
  if (g.inited) return g.initResult;
  g.inited = true;
  if (!pickInterface(&g.ifname, &g.ifaddr)) {
    return g.initResult =
               fail(tideSystemError, "no usable network interface (TIDE_SOCKET_IFNAME='%s')",
                    knobString(Knob::SocketIfname).c_str());
  }
  g.ifaddr.setPort(0);
  ucp_config_t* config = nullptr;
  ucs_status_t st = ucp_config_read(nullptr, nullptr, &config);
  if (st != UCS_OK) {
    return g.initResult = fail(tideSystemError, "ucp_config_read: %s", ucs_status_string(st));
  }
  // UCX 1.13's endpoint keepalive can crash in ucp_worker_progress
  // (ucp_ep_do_uct_ep_am_keepalive) when the peer closes while a lane is
  // still connecting; peer death is detected through the side channel.
  if (getenv("UCX_KEEPALIVE_INTERVAL") == nullptr) {
    (void)ucp_config_modify(config, "KEEPALIVE_INTERVAL", "inf");
  }
  // Larger tcp fragments (UCX's default receive segment is 64 KiB): fewer
  // system calls and headers per byte; see TIDE_UCX_TCP_SEG_SIZE.
  uint64_t seg = knobSize(Knob::UcxTcpSegSize);
  // Only where tcp may be used: UCX warns about a setting no transport took.
  const TlsUse tls = tlsUse(getenv("UCX_TLS"));
  if (seg > 0 && tls.mayUseTcp && getenv("UCX_TCP_RX_SEG_SIZE") == nullptr) {
    std::string v = std::to_string(seg);
    st = ucp_config_modify(config, "RX_SEG_SIZE", v.c_str());  // tcp is the one UCT with it
    if (st != UCS_OK) {
      TIDE_INFO("ucx net: cannot set RX_SEG_SIZE=%s: %s", v.c_str(), ucs_status_string(st));
    }
  }
  // Eager (no rendezvous handshake) up to TIDE_UCX_TCP_RNDV_THRESH when tcp is
  // UCX's only network transport: a rendezvous needs the peer's test() to
  // answer before data moves, which on a busy machine costs a scheduling
  // delay per message. Not with shared memory in UCX_TLS: its rendezvous is
  // a single zero-copy transfer.
  uint64_t rndv = knobSize(Knob::UcxTcpRndvThresh);
  if (rndv > 0 && tls.tcpOnly && getenv("UCX_RNDV_THRESH") == nullptr) {
    std::string v = std::to_string(rndv);
    st = ucp_config_modify(config, "RNDV_THRESH", v.c_str());
    if (st != UCS_OK) {
      TIDE_INFO("ucx net: cannot set RNDV_THRESH=%s: %s", v.c_str(), ucs_status_string(st));
    }
  }
  g.wakeup = knobBool(Knob::UcxWakeup);
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_TAG | (g.wakeup ? UCP_FEATURE_WAKEUP : 0);
  params.mt_workers_shared = 1;
  st = ucp_init(&params, config, &g.ctx);
  ucp_config_release(config);
  if (st != UCS_OK) {
    return g.initResult =
               fail(tideSystemError, "ucp_init: %s (check UCX_TLS)", ucs_status_string(st));
  }
  ucp_context_h ctx = g.ctx;
  auto reg = [ctx](uintptr_t base, size_t len, void** handle) -> Status {
    ucp_mem_map_params_t mp{};
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    mp.address = reinterpret_cast<void*>(base);
    mp.length = len;
    ucp_mem_h memh = nullptr;
    ucs_status_t s = ucp_mem_map(ctx, &mp, &memh);
    if (s != UCS_OK)
      return systemError("ucx: ucp_mem_map(%zu bytes): %s", len, ucs_status_string(s));
    *handle = memh;
    return Status::Ok();
  };
  auto dereg = [ctx](void* handle) { ucp_mem_unmap(ctx, static_cast<ucp_mem_h>(handle)); };
  int64_t entries = knobInt(Knob::UcxMrCacheEntries);
  g.mrs = std::make_unique<MrCache>(reg, dereg, entries > 0 ? entries : 1, 0);
  g.devName = "ucx:" + g.ifname;
  TIDE_INFO("ucx net: UCP %s, side channel on %s (%s), wakeup %d", ucp_get_version_string(),
            g.ifname.c_str(), g.ifaddr.hostStr().c_str(), g.wakeup ? 1 : 0);
  return tideSuccess;
}

int configuredStreams() {
  return static_cast<int>(std::clamp<int64_t>(knobInt(Knob::UcxNstreams), 1, kMaxStreams));
}

size_t configuredUnit(int streams) {
  uint64_t u = knobSize(Knob::UcxStripeUnit);
  if (u == 0) {
    u = knobSize(Knob::NetChunkSize) / static_cast<uint64_t>(std::max(streams, 1));
    u = (u + 4095) & ~uint64_t{4095};
  }
  return static_cast<size_t>(std::clamp<uint64_t>(u, kMinStripeUnit, uint64_t{1} << 30));
}

bool epUsesTcp(ucp_ep_h ep) {
  char* text = nullptr;
  size_t len = 0;
  FILE* f = open_memstream(&text, &len);
  if (!f) return false;
  ucp_ep_print_info(ep, f);
  fclose(f);
  bool tcp = text && strstr(text, "tcp/") != nullptr;
  free(text);
  return tcp;
}

tideResult_t ucxDevices(int* ndev) {
  Global& g = global();
  std::lock_guard<std::mutex> lock(g.mu);
  *ndev = (g.inited && g.initResult == tideSuccess) ? 1 : 0;
  return tideSuccess;
}

tideResult_t ucxGetProperties(int dev, tideNetProperties_v1_t* props) {
  Global& g = global();
  if (dev != 0 || !g.ctx) return fail(tideInvalidArgument, "getProperties: no device %d", dev);
  memset(props, 0, sizeof(*props));
  props->name = g.devName.c_str();
  props->pciPath = nullptr;
  props->guid = 0;
  props->ptrSupport = TIDE_NET_PTR_HOST;
  props->speed = linkSpeedMbps(g.ifname);
  props->port = 0;
  props->latency = 0;
  props->maxComms = 65536;
  props->maxRecvs = kMaxRecvs;
  props->maxSize = size_t{1} << 31;
  return tideSuccess;
}

}  // namespace ucx
}  // namespace tide
