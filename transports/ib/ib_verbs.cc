#include "transports/ib/ib_verbs.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

#include "core/config.h"
#include "core/log.h"
#include "transports/common/hca_filter.h"
#include "transports/ib/ib_logic.h"

namespace tide {

namespace {

int speedMbps(uint8_t width, uint8_t speed) {
  int lanes = width == 1    ? 1
              : width == 2  ? 4
              : width == 4  ? 8
              : width == 8  ? 12
              : width == 16 ? 2
                            : 1;
  int perLane = 0;  // Mbit/s per lane
  switch (speed) {
    case 1:
      perLane = 2500;
      break;  // SDR
    case 2:
      perLane = 5000;
      break;  // DDR
    case 4:
    case 8:
      perLane = 10000;
      break;  // QDR / FDR10
    case 16:
      perLane = 14000;
      break;  // FDR
    case 32:
      perLane = 25000;
      break;  // EDR
    case 64:
      perLane = 50000;
      break;  // HDR
    case 128:
      perLane = 100000;
      break;  // NDR
    default:
      perLane = 10000;
  }
  return lanes * perLane;
}

// Reads the port's GID table and lets ibSelectGid choose.
int pickGid(ibv_context* ctx, int port, int tableLen, bool roce, ibv_gid* gid) {
  std::vector<IbGidEntry> table;
  for (int i = 0; i < tableLen; ++i) {
    ibv_gid_entry e{};
    if (ibv_query_gid_ex(ctx, port, i, &e, 0) != 0) continue;  // empty slot
    IbGidEntry g;
    g.index = i;
    g.type = e.gid_type == IBV_GID_TYPE_ROCE_V2   ? IbGidType::RoceV2
             : e.gid_type == IBV_GID_TYPE_ROCE_V1 ? IbGidType::RoceV1
                                                  : IbGidType::Ib;
    memcpy(g.raw, e.gid.raw, 16);
    table.push_back(g);
  }
  int pos = ibSelectGid(table, knobInt(Knob::IbGidIndex), roce);
  if (pos < 0) return -1;
  memcpy(gid->raw, table[pos].raw, 16);
  return table[pos].index;
}

// ibv_wc_status values ib_logic.h relies on.
static_assert(kIbWcSuccess == IBV_WC_SUCCESS && kIbWcLocLenErr == IBV_WC_LOC_LEN_ERR &&
              kIbWcLocQpOpErr == IBV_WC_LOC_QP_OP_ERR && kIbWcLocProtErr == IBV_WC_LOC_PROT_ERR &&
              kIbWcWrFlushErr == IBV_WC_WR_FLUSH_ERR && kIbWcRetryExcErr == IBV_WC_RETRY_EXC_ERR &&
              kIbWcRnrRetryExcErr == IBV_WC_RNR_RETRY_EXC_ERR);

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
        info.maxQpWr = attr.max_qp_wr;
        info.maxCqe = attr.max_cqe;
        info.gidIndex =
            pickGid(ctx, p, pa.gid_tbl_len, pa.link_layer == IBV_LINK_LAYER_ETHERNET, &info.gid);
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
  if (pd_) ibv_dealloc_pd(pd_);
  if (ctx_) ibv_close_device(ctx_);
}

Status IbDevice::open(const IbPortInfo& port, IbDevice** out) {
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
  *out = dev.release();
  return Status::Ok();
}

Status ibCreateCq(IbDevice* dev, int depth, IbCq* out) {
  *out = IbCq{};
  out->channel = ibv_create_comp_channel(dev->ctx());
  if (!out->channel) return errnoError(errno, "ib net: ibv_create_comp_channel");
  int fl = fcntl(out->channel->fd, F_GETFL);
  if (fl < 0 || fcntl(out->channel->fd, F_SETFL, fl | O_NONBLOCK) != 0) {
    int e = errno;
    ibDestroyCq(out);
    return errnoError(e, "ib net: completion channel O_NONBLOCK");
  }
  int maxCqe = dev->port().maxCqe > 0 ? dev->port().maxCqe : depth;
  out->cq = ibv_create_cq(dev->ctx(), std::min(depth, maxCqe), nullptr, out->channel, 0);
  if (!out->cq) {
    int e = errno;
    ibDestroyCq(out);
    return errnoError(e, "ib net: ibv_create_cq(%d)", depth);
  }
  return Status::Ok();
}

void ibDestroyCq(IbCq* c) {
  if (c->cq) {
    ibDrainCqEvents(c);
    if (c->unacked) ibv_ack_cq_events(c->cq, c->unacked);
    ibv_destroy_cq(c->cq);
  }
  if (c->channel) ibv_destroy_comp_channel(c->channel);
  *c = IbCq{};
}

Status ibArmCq(IbCq* c) {
  int rc = ibv_req_notify_cq(c->cq, 0);
  if (rc != 0) return errnoError(rc, "ib net: ibv_req_notify_cq");
  return Status::Ok();
}

bool ibDrainCqEvents(IbCq* c) {
  bool any = false;
  ibv_cq* cq = nullptr;
  void* ctx = nullptr;
  while (c->channel && ibv_get_cq_event(c->channel, &cq, &ctx) == 0) {
    ++c->unacked;
    any = true;
  }
  if (c->unacked >= 64) {  // acking takes a lock: batch it
    ibv_ack_cq_events(c->cq, c->unacked);
    c->unacked = 0;
  }
  return any;
}

Status ibCreateQp(IbDevice* dev, ibv_cq* cq, int maxSendWr, int maxRecvWr, int wantInline,
                  ibv_qp** qp, int* inlineBytes) {
  ibv_qp_init_attr a{};
  a.send_cq = cq;
  a.recv_cq = cq;
  a.qp_type = IBV_QPT_RC;
  a.cap.max_send_wr = maxSendWr;
  a.cap.max_recv_wr = maxRecvWr;
  a.cap.max_send_sge = 1;
  a.cap.max_recv_sge = 1;
  a.cap.max_inline_data = wantInline;
  *qp = ibv_create_qp(dev->pd(), &a);
  if (!*qp && wantInline > 0) {  // some devices have no inline support
    a.cap.max_inline_data = 0;
    *qp = ibv_create_qp(dev->pd(), &a);
  }
  if (!*qp) {
    return errnoError(errno, "ib net: ibv_create_qp(send %d, recv %d WRs) on %s", maxSendWr,
                      maxRecvWr, dev->port().device.c_str());
  }
  *inlineBytes = static_cast<int>(a.cap.max_inline_data);
  return Status::Ok();
}

Status ibQpToInit(ibv_qp* qp, int port) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = static_cast<uint8_t>(port);
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
  int rc =
      ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  if (rc != 0) return errnoError(rc, "ib net: QP %u -> INIT", qp->qp_num);
  return Status::Ok();
}

Status ibQpToRtr(ibv_qp* qp, const IbPortInfo& local, const IbRemoteQp& remote) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = remote.mtu;
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
    a.ah_attr.grh.traffic_class = 0;
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

void ibQpToError(ibv_qp* qp) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  (void)ibv_modify_qp(qp, &a, IBV_QP_STATE);
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
                   uint64_t remote, uint32_t rkey, bool withImm, uint32_t imm, bool signaled,
                   bool inlineOk) {
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
  if (inlineOk && len > 0) wr.send_flags |= IBV_SEND_INLINE;
  wr.imm_data = htonl(imm);
  wr.wr.rdma.remote_addr = remote;
  wr.wr.rdma.rkey = rkey;
  int rc = ibv_post_send(qp, &wr, &bad);
  if (rc != 0) return errnoError(rc, "ib net: ibv_post_send (QP %u, %zu bytes)", qp->qp_num, len);
  return Status::Ok();
}

Status ibPostRecv(ibv_qp* qp, uint64_t wrId) {
  ibv_recv_wr wr{};
  ibv_recv_wr* bad = nullptr;
  wr.wr_id = wrId;
  wr.sg_list = nullptr;
  wr.num_sge = 0;
  int rc = ibv_post_recv(qp, &wr, &bad);
  if (rc != 0) return errnoError(rc, "ib net: ibv_post_recv (QP %u)", qp->qp_num);
  return Status::Ok();
}

}  // namespace tide
