#include "transports/ib/ib_verbs.h"

#include <dirent.h>
#include <limits.h>
#include <stdlib.h>

#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <cstring>

#include "core/config.h"
#include "core/log.h"
#include "transports/ib/ib_logic.h"

namespace tide {

namespace {

int speedMbps(uint8_t width, uint8_t speed) {
  int lanes = width == 1 ? 1 : width == 2 ? 4 : width == 4 ? 8 : width == 8 ? 12 : width == 16 ? 2 : 1;
  int perLane = 0;  // Mbit/s per lane
  switch (speed) {
    case 1: perLane = 2500; break;    // SDR
    case 2: perLane = 5000; break;    // DDR
    case 4: case 8: perLane = 10000; break;  // QDR / FDR10
    case 16: perLane = 14000; break;  // FDR
    case 32: perLane = 25000; break;  // EDR
    case 64: perLane = 50000; break;  // HDR
    case 128: perLane = 100000; break;  // NDR
    default: perLane = 10000;
  }
  return lanes * perLane;
}

// RoCE: the first IPv4-mapped GID (::ffff:a.b.c.d) when none is configured.
int pickGid(ibv_context* ctx, int port, int tableLen, ibv_gid* gid) {
  int64_t want = knobInt(Knob::IbGidIndex);
  if (want >= 0) {
    if (ibv_query_gid(ctx, port, static_cast<int>(want), gid) == 0) return static_cast<int>(want);
    return -1;
  }
  for (int i = 0; i < tableLen; ++i) {
    ibv_gid g;
    if (ibv_query_gid(ctx, port, i, &g) != 0) continue;
    const uint8_t* r = g.raw;
    bool v4mapped = r[10] == 0xff && r[11] == 0xff &&
                    std::all_of(r, r + 10, [](uint8_t b) { return b == 0; });
    if (v4mapped) {
      *gid = g;
      return i;
    }
  }
  return ibv_query_gid(ctx, port, 0, gid) == 0 ? 0 : -1;
}

}  // namespace

Status ibFindPorts(std::vector<IbPortInfo>* out) {
  out->clear();
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (!list || n == 0) {
    if (list) ibv_free_device_list(list);
    return systemError(
        "ib net: no RDMA device found (ibv_get_device_list returned %s; /sys/class/infiniband "
        "is empty or missing). Use TIDE_NET=socket or ucx on this machine.",
        list ? "0 devices" : strerror(errno));
  }
  HcaFilter filter = HcaFilter::parse(knobString(Knob::IbHca));
  std::string seen;
  for (int d = 0; d < n; ++d) {
    const char* name = ibv_get_device_name(list[d]);
    seen += std::string(seen.empty() ? "" : ", ") + name;
    ibv_context* ctx = ibv_open_device(list[d]);
    if (!ctx) continue;
    ibv_device_attr attr;
    if (ibv_query_device(ctx, &attr) == 0) {
      for (int p = 1; p <= attr.phys_port_cnt; ++p) {
        ibv_port_attr pa;
        if (ibv_query_port(ctx, p, &pa) != 0 || pa.state != IBV_PORT_ACTIVE) continue;
        if (!filter.matches(name, p)) continue;
        IbPortInfo info;
        info.device = name;
        info.port = p;
        info.linkLayer = pa.link_layer;
        info.lid = pa.lid;
        info.mtu = pa.active_mtu;
        info.speedMbps = speedMbps(pa.active_width, pa.active_speed);
        info.guid = attr.node_guid;
        info.gidIndex = pickGid(ctx, p, pa.gid_tbl_len, &info.gid);
        if (info.gidIndex < 0) {
          TIDE_WARN("ib net: %s:%d: no usable GID (TIDE_IB_GID_INDEX=%ld)", name, p,
                    static_cast<long>(knobInt(Knob::IbGidIndex)));
          continue;
        }
        char path[PATH_MAX];
        std::string dev = std::string("/sys/class/infiniband/") + name + "/device";
        if (realpath(dev.c_str(), path)) info.pciPath = path;
        out->push_back(info);
      }
    }
    ibv_close_device(ctx);
  }
  ibv_free_device_list(list);
  if (out->empty()) {
    return systemError("ib net: no active RDMA port matches TIDE_IB_HCA='%s' (devices: %s)",
                       knobString(Knob::IbHca).c_str(), seen.c_str());
  }
  return Status::Ok();
}

IbDevice::~IbDevice() {
  if (cq_) ibv_destroy_cq(cq_);
  if (pd_) ibv_dealloc_pd(pd_);
  if (ctx_) ibv_close_device(ctx_);
}

Status IbDevice::open(const IbPortInfo& port, int cqDepth, IbDevice** out) {
  *out = nullptr;
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (!list) return errnoError(errno, "ib net: ibv_get_device_list");
  auto dev = std::make_unique<IbDevice>();
  dev->port_ = port;
  for (int i = 0; i < n && !dev->ctx_; ++i) {
    if (port.device == ibv_get_device_name(list[i])) dev->ctx_ = ibv_open_device(list[i]);
  }
  ibv_free_device_list(list);
  if (!dev->ctx_) return systemError("ib net: cannot open %s", port.device.c_str());
  dev->pd_ = ibv_alloc_pd(dev->ctx_);
  if (!dev->pd_) return errnoError(errno, "ib net: ibv_alloc_pd(%s)", port.device.c_str());
  dev->cq_ = ibv_create_cq(dev->ctx_, cqDepth, nullptr, nullptr, 0);
  if (!dev->cq_) return errnoError(errno, "ib net: ibv_create_cq(%d)", cqDepth);
  *out = dev.release();
  return Status::Ok();
}

bool IbDevice::dmabufSupported() const {
  // rdma-core >= 34 (Debian 12 has 44) declares ibv_reg_dmabuf_mr; whether
  // the kernel driver accepts it is only known when a registration is tried.
  return true;
}

Status ibCreateQp(IbDevice* dev, int maxWr, ibv_qp** qp) {
  ibv_qp_init_attr a{};
  a.send_cq = dev->cq();
  a.recv_cq = dev->cq();
  a.qp_type = IBV_QPT_RC;
  a.cap.max_send_wr = maxWr;
  a.cap.max_recv_wr = maxWr;
  a.cap.max_send_sge = 1;
  a.cap.max_recv_sge = 1;
  a.cap.max_inline_data = sizeof(CtsEntry);
  *qp = ibv_create_qp(dev->pd(), &a);
  if (!*qp) return errnoError(errno, "ib net: ibv_create_qp");
  return Status::Ok();
}

Status ibQpToInit(ibv_qp* qp, int port) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = static_cast<uint8_t>(port);
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
  int rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  if (rc != 0) return errnoError(rc, "ib net: QP %u -> INIT", qp->qp_num);
  return Status::Ok();
}

Status ibQpToRtr(ibv_qp* qp, const IbPortInfo& local, const IbQpInfo& remote) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = local.mtu;
  a.dest_qp_num = remote.qpn;
  a.rq_psn = remote.psn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.port_num = static_cast<uint8_t>(local.port);
  if (local.linkLayer == IBV_LINK_LAYER_ETHERNET) {
    a.ah_attr.is_global = 1;
    memcpy(a.ah_attr.grh.dgid.raw, remote.gid, 16);
    a.ah_attr.grh.sgid_index = static_cast<uint8_t>(local.gidIndex);
    a.ah_attr.grh.hop_limit = 255;
  } else {
    a.ah_attr.dlid = remote.lid;
  }
  int rc = ibv_modify_qp(qp, &a,
                         IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                             IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  if (rc != 0) return errnoError(rc, "ib net: QP %u -> RTR", qp->qp_num);
  return Status::Ok();
}

Status ibQpToRts(ibv_qp* qp, uint32_t psn, int timeout, int retryCnt) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = psn;
  a.timeout = static_cast<uint8_t>(timeout);
  a.retry_cnt = static_cast<uint8_t>(retryCnt);
  a.rnr_retry = 7;
  a.max_rd_atomic = 1;
  int rc = ibv_modify_qp(qp, &a,
                         IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                             IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
  if (rc != 0) return errnoError(rc, "ib net: QP %u -> RTS", qp->qp_num);
  return Status::Ok();
}

Status ibRegMr(IbDevice* dev, void* addr, size_t len, int dmabufFd, uint64_t dmabufOffset,
               ibv_mr** out) {
  int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  if (dmabufFd >= 0) {
    *out = ibv_reg_dmabuf_mr(dev->pd(), dmabufOffset, len, reinterpret_cast<uintptr_t>(addr),
                             dmabufFd, access);
    if (!*out) return errnoError(errno, "ib net: ibv_reg_dmabuf_mr(%zu bytes)", len);
    return Status::Ok();
  }
  *out = ibv_reg_mr(dev->pd(), addr, len, access);
  if (!*out) return errnoError(errno, "ib net: ibv_reg_mr(%zu bytes)", len);
  return Status::Ok();
}

Status ibPostWrite(ibv_qp* qp, uint64_t wrId, const void* local, uint32_t lkey, size_t len,
                   uint64_t remote, uint32_t rkey, bool withImm, uint32_t imm, bool signaled) {
  ibv_sge sge{};
  sge.addr = reinterpret_cast<uintptr_t>(local);
  sge.length = static_cast<uint32_t>(len);
  sge.lkey = lkey;
  ibv_send_wr wr{};
  ibv_send_wr* bad = nullptr;
  wr.wr_id = wrId;
  wr.sg_list = len ? &sge : nullptr;
  wr.num_sge = len ? 1 : 0;
  wr.opcode = withImm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
  wr.send_flags = signaled ? IBV_SEND_SIGNALED : 0;
  if (len <= sizeof(CtsEntry) && len > 0) wr.send_flags |= IBV_SEND_INLINE;
  wr.imm_data = htonl(imm);
  wr.wr.rdma.remote_addr = remote;
  wr.wr.rdma.rkey = rkey;
  int rc = ibv_post_send(qp, &wr, &bad);
  if (rc != 0) return errnoError(rc, "ib net: ibv_post_send");
  return Status::Ok();
}

Status ibPostRecv(ibv_qp* qp, uint64_t wrId) {
  ibv_recv_wr wr{};
  ibv_recv_wr* bad = nullptr;
  wr.wr_id = wrId;
  wr.sg_list = nullptr;
  wr.num_sge = 0;
  int rc = ibv_post_recv(qp, &wr, &bad);
  if (rc != 0) return errnoError(rc, "ib net: ibv_post_recv");
  return Status::Ok();
}

}  // namespace tide
