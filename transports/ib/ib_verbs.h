// Thin layer over libibverbs for the verbs net: device/port/GID selection,
// device context and protection domain, completion queues with a completion
// channel, RC queue pairs and their INIT -> RTR -> RTS transitions, memory
// registration (host memory with ibv_reg_mr, GPU memory through a dma-buf fd
// with ibv_reg_dmabuf_mr), posting RDMA writes and receives. Decisions
// (which device, GID, striping, credits) live in ib_logic.h; this file only
// executes them. Every function returns promptly (no waiting on a peer).
//
// UNVERIFIED ON HARDWARE: the machine this was written on has no RDMA
// devices (no Soft-RoCE either); only the "no device" path runs there.
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
  int maxQpWr = 0;  // device limit on WRs per queue
  int maxCqe = 0;   // device limit on CQ entries
};

// Active ports of the devices matching TIDE_IB_HCA, with the GID chosen by
// TIDE_IB_GID_INDEX (ibSelectGid). Fails (tideSystemError, naming what is
// missing) when there is no RDMA device at all or none matches.
Status ibFindPorts(std::vector<IbPortInfo>* out);

// Device context + protection domain of one port. Thread-safe (verbs
// objects may be used from several threads).
class IbDevice {
 public:
  ~IbDevice();
  static Status open(const IbPortInfo& port, IbDevice** out);
  ibv_context* ctx() const { return ctx_; }
  ibv_pd* pd() const { return pd_; }
  const IbPortInfo& port() const { return port_; }

 private:
  IbPortInfo port_;
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
};

// A CQ whose completion channel fd is non-blocking (poll()able).
struct IbCq {
  ibv_comp_channel* channel = nullptr;
  ibv_cq* cq = nullptr;
  unsigned unacked = 0;  // events taken with ibv_get_cq_event, not yet acked
};
Status ibCreateCq(IbDevice* dev, int depth, IbCq* out);
void ibDestroyCq(IbCq* cq);  // acks pending events first; idempotent
// Requests an event for the next completion.
Status ibArmCq(IbCq* cq);
// Takes every pending event off the channel (non-blocking); true if any.
bool ibDrainCqEvents(IbCq* cq);

// One RC QP (RESET). *inlineBytes = what the device granted (0 if it
// refused inline data).
Status ibCreateQp(IbDevice* dev, ibv_cq* cq, int maxSendWr, int maxRecvWr, int wantInline,
                  ibv_qp** qp, int* inlineBytes);
Status ibQpToInit(ibv_qp* qp, int port);
struct IbRemoteQp {
  uint32_t qpn = 0;
  uint32_t psn = 0;
  uint16_t lid = 0;
  uint8_t gid[16] = {};
  ibv_mtu mtu = IBV_MTU_1024;  // path MTU (the smaller of both ports')
};
Status ibQpToRtr(ibv_qp* qp, const IbPortInfo& local, const IbRemoteQp& remote);
Status ibQpToRts(ibv_qp* qp, uint32_t psn, int timeout, int retryCnt);
// Moves the QP to ERROR: outstanding WRs complete with IBV_WC_WR_FLUSH_ERR.
void ibQpToError(ibv_qp* qp);

// Registers host memory (dmabufFd < 0) or a dma-buf (dmabufFd >= 0) with
// local and remote write access.
Status ibRegMr(IbDevice* dev, void* addr, size_t len, int dmabufFd, uint64_t dmabufOffset,
               ibv_mr** out);

// Posts an RDMA write (with immediate when withImm) of [local, local+len) to
// remote; signaled when `signaled`; inline when `inlineOk` (len must fit).
Status ibPostWrite(ibv_qp* qp, uint64_t wrId, const void* local, uint32_t lkey, size_t len,
                   uint64_t remote, uint32_t rkey, bool withImm, uint32_t imm, bool signaled,
                   bool inlineOk);
// Posts a zero-length receive (consumed by a write with immediate).
Status ibPostRecv(ibv_qp* qp, uint64_t wrId);

}  // namespace tide
