// Thin layer over libibverbs for the verbs net: device/port/GID selection,
// protection domain, completion queue, RC queue pairs and their
// INIT -> RTR -> RTS transitions, memory registration (host memory with
// ibv_reg_mr, GPU memory through a dma-buf fd with ibv_reg_dmabuf_mr when
// rdma-core has it). Decisions (which device, how to stripe, credits) live in
// ib_logic.h; this file only executes them. Every function returns promptly.
//
// UNVERIFIED ON HARDWARE: the machine this was written on has no RDMA
// devices (no Soft-RoCE either); only the device enumeration's "no device"
// path runs here.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace tide {

struct IbPortInfo {
  std::string device;  // "mlx5_0"
  int port = 1;
  int linkLayer = IBV_LINK_LAYER_INFINIBAND;
  uint16_t lid = 0;
  int gidIndex = 0;
  ibv_gid gid{};
  int speedMbps = 0;
  ibv_mtu mtu = IBV_MTU_1024;
  std::string pciPath;
  uint64_t guid = 0;
};

// Active ports of the devices matching TIDE_IB_HCA, with the GID chosen by
// TIDE_IB_GID_INDEX. Fails (tideSystemError, naming what is missing) when
// there is no RDMA device at all or none matches.
Status ibFindPorts(std::vector<IbPortInfo>* out);

// What a peer needs to connect one QP (sent in the connection handshake).
struct IbQpInfo {
  uint32_t qpn;
  uint32_t psn;
  uint16_t lid;
  uint8_t linkLayer;
  uint8_t pad;
  uint8_t gid[16];
};

// Device context + PD + CQ for one port.
class IbDevice {
 public:
  ~IbDevice();
  static Status open(const IbPortInfo& port, int cqDepth, IbDevice** out);
  ibv_pd* pd() const { return pd_; }
  ibv_cq* cq() const { return cq_; }
  const IbPortInfo& port() const { return port_; }
  bool dmabufSupported() const;

 private:
  IbPortInfo port_;
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_cq* cq_ = nullptr;
};

// One RC QP driven through its states.
Status ibCreateQp(IbDevice* dev, int maxWr, ibv_qp** qp);
Status ibQpToInit(ibv_qp* qp, int port);
Status ibQpToRtr(ibv_qp* qp, const IbPortInfo& local, const IbQpInfo& remote);
Status ibQpToRts(ibv_qp* qp, uint32_t psn, int timeout, int retryCnt);

// Registers host memory (type TIDE_NET_PTR_HOST) or a dma-buf (fd >= 0).
Status ibRegMr(IbDevice* dev, void* addr, size_t len, int dmabufFd, uint64_t dmabufOffset,
               ibv_mr** out);

// Posts an RDMA write (with immediate when withImm) of [local, local+len) to
// remote; signaled when `signaled`.
Status ibPostWrite(ibv_qp* qp, uint64_t wrId, const void* local, uint32_t lkey, size_t len,
                   uint64_t remote, uint32_t rkey, bool withImm, uint32_t imm, bool signaled);
// Posts a zero-length receive (consumed by a write with immediate).
Status ibPostRecv(ibv_qp* qp, uint64_t wrId);

}  // namespace tide
