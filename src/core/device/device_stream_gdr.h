// GPUDirect RDMA planning for operations on CUDA streams (core/device/device_stream.cc):
// which Send / Recv ops post their device buffer straight to the peer's
// connection instead of staging it through a pinned host slot. Pure functions
// of their inputs (no driver, no communicator), unit-tested on the CPU
// (tests/unit/test_gdr_plan.cc). Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/algorithm.h"
#include "tide/net.h"

namespace tide {
namespace devstream {
// True when a GPU of this process can export its memory as a dma-buf (the
// driver has cuMemGetHandleForAddressRange and a device reports
// CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED), i.e. when tideNetDmaBufFd can work.
// Probes the CUDA driver only on hosts with the NVIDIA kernel driver
// (/dev/nvidiactl) or when Tide already did; cached. For nets deciding
// whether to advertise TIDE_NET_PTR_DMABUF (core/device/device_stream_gdr.cc).
bool dmaBufExportSupported();
}  // namespace devstream
}  // namespace tide

namespace tide::gdr {

// TIDE_NET_GDR values.
inline constexpr int kKnobAuto = -1;
inline constexpr int kKnobOff = 0;
inline constexpr int kKnobRequire = 1;  // auto, and WARN when a device op cannot use it

enum class Reason {
  kDirect,      // posted as a device pointer
  kOff,         // TIDE_NET_GDR=0
  kNotP2p,      // a collective (staged; the host algorithms need host memory)
  kHostBuffer,  // the buffer is host memory (nothing to stage anyway)
  kSelf,        // peer is this rank (or out of range): a local copy
  kNoSupport,   // the peer's connection does not accept device memory
  kGroup,       // another point-to-point op of the group on this comm is staged,
                // or a receive overlaps a send (the batch shares one memory type)
  kNoFlush,     // a receive, and the driver cannot flush the NIC's writes to the
                // GPU before the stream reads them (cuFlushGPUDirectRDMAWrites)
};

struct Choice {
  bool direct = false;
  bool dmaBuf = false;  // direct through a dma-buf registration (else peer memory)
  Reason reason = Reason::kNotP2p;
};

// One op: `type` Send or Recv (anything else stages), `isDevice` whether its
// buffer (Send: sendbuff, Recv: recvbuff) is device memory, `peer` its peer,
// `self`/`nranks` the communicator's, `support` the TIDE_NET_PTR_* bits of the
// point-to-point connection to `peer` (Connection::devicePtrSupport), `knob`
// TIDE_NET_GDR (any value other than 0 and 1 means auto), `canFlush` whether
// the driver can flush GPUDirect RDMA writes (needed by receives only).
inline Choice chooseOp(CollType type, bool isDevice, int peer, int self, int nranks, int support,
                       int knob, bool canFlush = true) {
  Choice c;
  if (type != CollType::Send && type != CollType::Recv) return c;  // kNotP2p
  if (knob == kKnobOff) {
    c.reason = Reason::kOff;
    return c;
  }
  if (!isDevice) {
    c.reason = Reason::kHostBuffer;
    return c;
  }
  if (peer < 0 || peer >= nranks || peer == self) {
    c.reason = Reason::kSelf;
    return c;
  }
  const int bits = support & (TIDE_NET_PTR_DEVICE | TIDE_NET_PTR_DMABUF);
  if (bits == 0) {
    c.reason = Reason::kNoSupport;
    return c;
  }
  if (type == CollType::Recv && !canFlush) {
    c.reason = Reason::kNoFlush;
    return c;
  }
  c.direct = true;
  c.dmaBuf = (bits & TIDE_NET_PTR_DMABUF) != 0;
  c.reason = Reason::kDirect;
  return c;
}

// True when a device op that is not direct for `reason` deserves the
// TIDE_NET_GDR=1 warning (a device buffer of a point-to-point op to another
// rank that still has to be staged).
inline bool worthWarning(Reason reason, int knob) {
  return knob == kKnobRequire &&
         (reason == Reason::kNoSupport || reason == Reason::kGroup || reason == Reason::kNoFlush);
}

// The point-to-point ops of one communicator within one group, in order:
// their buffer ranges and per-op choices. The executor runs them as one batch
// with one memory type, so the batch is direct only when every op is; a
// receive that overlaps a send of the batch (the batch then stages it through
// host scratch) also keeps the whole batch staged.
struct P2pOp {
  bool isSend = false;
  uintptr_t buf = 0;
  size_t bytes = 0;
  Choice choice;
};

// Rewrites the choices of `ops` in place: all stay direct, or every direct
// one becomes staged with Reason::kGroup. Returns whether the batch is direct
// (false for an empty batch).
inline bool settleBatch(std::vector<P2pOp>& ops) {
  bool all = !ops.empty();
  for (const P2pOp& o : ops) all = all && o.choice.direct;
  for (size_t i = 0; all && i < ops.size(); ++i) {
    if (ops[i].isSend) continue;
    for (const P2pOp& s : ops) {
      if (!s.isSend || s.bytes == 0 || ops[i].bytes == 0) continue;
      if (ops[i].buf < s.buf + s.bytes && s.buf < ops[i].buf + ops[i].bytes) all = false;
    }
  }
  if (!all) {
    for (P2pOp& o : ops) {
      if (o.choice.direct) o.choice = Choice{false, false, Reason::kGroup};
    }
  }
  return all;
}

}  // namespace tide::gdr
