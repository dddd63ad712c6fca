// GPUDirect RDMA on the core side: the planning of CUDA-stream Send / Recv
// ops that skip staging (the pure rules are in core/device/device_stream_gdr.h) and
// the exported dma-buf export tideNetDmaBufFd (include/tide/net.h).
#include "core/device/device_stream_gdr.h"

#include <sys/stat.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/device/device_stream_state.h"
#include "core/log.h"
#include "cuda/cuda_loader.h"
#include "tide/net.h"

namespace tide {
namespace devstream {

namespace {

// TIDE_NET_GDR, read once.
int gdrKnob() {
  static const int k = static_cast<int>(knobInt(Knob::NetGdr));
  return k;
}

const char* whyStaged(gdr::Reason reason) {
  switch (reason) {
    case gdr::Reason::kNoSupport:
      return "its connection does not register device memory";
    case gdr::Reason::kNoFlush:
      return "the CUDA driver cannot flush GPUDirect RDMA writes (cuFlushGPUDirectRDMAWrites, "
             "CUDA 11.3+)";
    default:
      return "another send/recv of the group cannot use it (or buffers overlap)";
  }
}

}  // namespace

void planGdr(const std::vector<OpDesc>& ops, const std::vector<bool>& isDev, bool canFlush,
             std::vector<bool>* direct) {
  direct->assign(ops.size(), false);
  const int knob = gdrKnob();
  if (knob == gdr::kKnobOff) return;
  std::vector<tideComm*> comms;
  for (const OpDesc& op : ops) {
    if (std::find(comms.begin(), comms.end(), op.comm) == comms.end()) comms.push_back(op.comm);
  }
  for (tideComm* comm : comms) {
    std::vector<gdr::P2pOp> batch;
    std::vector<size_t> index;
    for (size_t i = 0; i < ops.size(); ++i) {
      const OpDesc& op = ops[i];
      const CollArgs& a = op.args;
      if (op.comm != comm || (a.type != CollType::Send && a.type != CollType::Recv)) continue;
      int support = 0;
      const size_t slot = static_cast<size_t>(a.root) * kNumChannels + kP2pChannel;
      if (a.root >= 0 && a.root < comm->nranks && slot < comm->conns.size() &&
          comm->conns[slot] != nullptr) {
        support = comm->conns[slot]->devicePtrSupport();
      }
      gdr::P2pOp p;
      p.isSend = a.type == CollType::Send;
      p.buf = reinterpret_cast<uintptr_t>(p.isSend ? a.sendbuff : a.recvbuff);
      p.bytes = a.count * a.elemSize;
      p.choice = gdr::chooseOp(a.type, isDev[i], a.root, comm->rank, comm->nranks, support, knob,
                               canFlush);
      batch.push_back(p);
      index.push_back(i);
    }
    const bool ok = gdr::settleBatch(batch);
    for (size_t j = 0; j < batch.size(); ++j) {
      (*direct)[index[j]] = ok;
      if (!ok && gdr::worthWarning(batch[j].choice.reason, knob)) {
        CommState* st = stateOf(comm);
        const int peer = ops[index[j]].args.root;
        bool first = false;
        {
          std::lock_guard<std::mutex> lock(st->mu);
          first = st->gdrWarned.insert(peer).second;
        }
        if (first) {
          TIDE_WARN(
              "comm %08x rank %d: send/recv with peer %d: GPUDirect RDMA required "
              "(TIDE_NET_GDR=1) but %s; staging through host memory",
              static_cast<unsigned>(comm->commHash), comm->rank, peer,
              whyStaged(batch[j].choice.reason));
        }
      }
    }
  }
}

bool dmaBufExportSupported() {
  if (cuda::driverIfProbed() == nullptr) {
    struct stat st;
    if (stat("/dev/nvidiactl", &st) != 0) return false;  // no NVIDIA kernel driver
  }
  return cuda::dmaBufSupported(-1);
}

}  // namespace devstream
}  // namespace tide

extern "C" __attribute__((visibility("default"))) tideResult_t tideNetDmaBufFd(const void* ptr,
                                                                               size_t size, int* fd,
                                                                               uint64_t* offset) {
  if (ptr == nullptr || size == 0 || fd == nullptr || offset == nullptr) {
    return tideInvalidArgument;
  }
  try {
    std::string why;
    switch (tide::cuda::exportDmaBuf(ptr, size, fd, offset, &why)) {
      case tide::cuda::DmaBufResult::kOk:
        return tideSuccess;
      case tide::cuda::DmaBufResult::kNotDevice:
        TIDE_INFO("tideNetDmaBufFd(%p, %zu): %s", ptr, size, why.c_str());
        return tideInvalidArgument;
      case tide::cuda::DmaBufResult::kUnsupported:
      case tide::cuda::DmaBufResult::kFailed:
        TIDE_INFO("tideNetDmaBufFd(%p, %zu): %s", ptr, size, why.c_str());
        return tideSystemError;
    }
    return tideInternalError;
  } catch (...) {
    return tideInternalError;
  }
}
