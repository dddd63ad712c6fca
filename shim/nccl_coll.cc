// NCCL shim: reduction operators, collectives, point-to-point and groups.
// See nccl_api.cc for the buffer model.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cuda/cuda_loader.h"
#include "shim/shim_internal.h"

using tide::shim::fail;
namespace shim = tide::shim;

namespace {

tideDataType_t td(ncclDataType_t t) { return static_cast<tideDataType_t>(t); }

// Device buffers: a one-rank communicator needs no communication, so every
// operation is a local copy enqueued on the caller's stream (stream-ordered,
// capturable in CUDA graphs); *local is then set. With more ranks, device
// buffers need Tide's CUDA path, which this build lacks: ncclInvalidUsage.
// Host buffers in GPU mode run after the caller's stream has drained.
ncclResult_t checkBuffers(ncclComm_t comm, const char* what, const void* a, const void* b,
                          cudaStream_t stream, bool* local) {
  *local = false;
  if (comm->hostMode) return ncclSuccess;
  if (tide::cuda::isDevicePointer(a) || tide::cuda::isDevicePointer(b)) {
    if (comm->nranks == 1) {
      *local = true;
      return ncclSuccess;
    }
    return fail(comm, ncclInvalidUsage,
                "%s: device buffers on %d ranks need Tide's CUDA path, which this build lacks; "
                "use host buffers (e.g. cudaMallocHost) for now",
                what, comm->nranks);
  }
  const int rc = tide::cuda::waitStream(reinterpret_cast<tide::cuda::CuStream>(stream), 600.0);
  if (rc != 0) {
    return fail(comm, ncclUnhandledCudaError, "%s: waiting for the stream: %s", what,
                tide::cuda::driverErrorString(rc).c_str());
  }
  return ncclSuccess;
}

ncclResult_t checkArgs(ncclComm_t comm, const char* what, ncclDataType_t dt, const void* a,
                       const void* b, cudaStream_t stream, bool* local) {
  *local = false;
  if (comm == nullptr) return fail(nullptr, ncclInvalidArgument, "%s: comm is NULL", what);
  if (!shim::dtypeOk(dt)) {
    return fail(comm, ncclInvalidArgument, "%s: invalid datatype %d", what, static_cast<int>(dt));
  }
  return checkBuffers(comm, what, a, b, stream, local);
}

// dst = src on the caller's stream (one-rank device path).
ncclResult_t localCopy(ncclComm_t comm, const char* what, void* dst, const void* src, size_t bytes,
                       cudaStream_t stream) {
  if (bytes == 0 || dst == src) return ncclSuccess;
  std::string why;
  if (tide::cuda::ensureContext(&why) < 0) {
    return fail(comm, ncclUnhandledCudaError, "%s: %s", what, why.c_str());
  }
  const int rc = tide::cuda::driver()->cuMemcpyAsync(
      reinterpret_cast<tide::cuda::CuDevPtr>(dst), reinterpret_cast<tide::cuda::CuDevPtr>(src),
      bytes, reinterpret_cast<tide::cuda::CuStream>(stream));
  if (rc != 0) {
    return fail(comm, ncclUnhandledCudaError, "%s: cuMemcpyAsync: %s", what,
                tide::cuda::driverErrorString(rc).c_str());
  }
  return ncclSuccess;
}

ncclResult_t preMulOnDevice(ncclComm_t comm, const char* what) {
  return fail(comm, ncclInvalidUsage, "%s: PreMulSum on device buffers needs Tide's CUDA path",
              what);
}

// One-rank send/recv to itself: the n-th send pairs with the n-th receive,
// whichever comes first waits in the communicator's queue.
ncclResult_t localSendRecv(ncclComm_t comm, const char* what, bool isSend, void* buf, size_t bytes,
                           cudaStream_t stream) {
  ncclComm::Pending mine{buf, bytes};
  ncclComm::Pending other{};
  {
    std::lock_guard<std::mutex> lock(comm->mu);
    auto& theirs = isSend ? comm->selfRecvs : comm->selfSends;
    if (theirs.empty()) {
      (isSend ? comm->selfSends : comm->selfRecvs).push_back(mine);
      return ncclSuccess;
    }
    other = theirs.front();
    theirs.pop_front();
  }
  const ncclComm::Pending& s = isSend ? mine : other;
  const ncclComm::Pending& r = isSend ? other : mine;
  if (s.bytes != r.bytes) {
    return fail(comm, ncclInvalidArgument, "%s: send of %zu bytes matched a receive of %zu", what,
                s.bytes, r.bytes);
  }
  return localCopy(comm, what, r.buf, s.buf, s.bytes, stream);
}

// A reduction as Tide runs it: a built-in op, or Sum over a premultiplied
// copy of the input (PreMulSum). The copy is made when the operation runs
// and lives as long as the recorded operation.
struct Reduction {
  tideRedOp_t op = tideSum;
  bool preMul = false;
  ncclComm::PreMulSum pm{};
  std::shared_ptr<std::vector<char>> scratch = std::make_shared<std::vector<char>>();

  const void* input(const void* send, size_t count, ncclDataType_t dt) const {
    if (!preMul) return send;
    const double s = pm.residence == ncclScalarDevice ? shim::loadScalar(pm.scalar, dt) : pm.value;
    scratch->resize(count * shim::dtypeBytes(dt) + 1);
    shim::scaleHost(scratch->data(), send, count, dt, s);
    return scratch->data();
  }
};

ncclResult_t resolveOp(ncclComm_t comm, ncclRedOp_t op, ncclDataType_t dt, const char* what,
                       Reduction* out) {
  const int o = static_cast<int>(op);
  if (o >= 0 && o < ncclNumOps) {
    out->op = static_cast<tideRedOp_t>(o);
    return ncclSuccess;
  }
  ncclDataType_t made;
  {
    std::lock_guard<std::mutex> lock(comm->mu);
    auto it = comm->ops.find(o);
    if (it != comm->ops.end()) {
      out->preMul = true;
      out->pm = it->second;
    }
  }
  if (!out->preMul) return fail(comm, ncclInvalidArgument, "%s: invalid reduction op %d", what, o);
  made = out->pm.dtype;
  if (made != dt) {
    return fail(comm, ncclInvalidArgument, "%s: PreMulSum op %d was made for datatype %d, not %d",
                what, o, static_cast<int>(made), static_cast<int>(dt));
  }
  return ncclSuccess;
}

}  // namespace

// ---- Reduction operators --------------------------------------------------------

SHIM_API ncclResult_t pncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar,
                                                ncclDataType_t datatype,
                                                ncclScalarResidence_t residence, ncclComm_t comm) {
  return shim::guarded(comm, "ncclRedOpCreatePreMulSum", [&]() -> ncclResult_t {
    const char* what = "ncclRedOpCreatePreMulSum";
    if (op == nullptr || scalar == nullptr || comm == nullptr) {
      return fail(comm, ncclInvalidArgument, "%s: op, scalar or comm is NULL", what);
    }
    if (!shim::dtypeOk(datatype))
      return fail(comm, ncclInvalidArgument, "%s: invalid datatype", what);
    if (residence != ncclScalarDevice && residence != ncclScalarHostImmediate) {
      return fail(comm, ncclInvalidArgument, "%s: invalid residence %d", what, residence);
    }
    if (residence == ncclScalarDevice && tide::cuda::isDevicePointer(scalar)) {
      return fail(comm, ncclInvalidUsage, "%s: device-resident scalars need Tide's CUDA path",
                  what);
    }
    ncclComm::PreMulSum pm{datatype, residence, 0.0, scalar};
    if (residence == ncclScalarHostImmediate) pm.value = shim::loadScalar(scalar, datatype);
    std::lock_guard<std::mutex> lock(comm->mu);
    if (comm->nextOp >= ncclMaxRedOp) {
      comm->mu.unlock();
      ncclResult_t r = fail(comm, ncclInvalidUsage, "%s: out of operator handles", what);
      comm->mu.lock();
      return r;
    }
    const int id = comm->nextOp++;
    comm->ops[id] = pm;
    *op = static_cast<ncclRedOp_t>(id);
    return ncclSuccess;
  });
}
SHIM_ALIAS(ncclRedOpCreatePreMulSum)

SHIM_API ncclResult_t pncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  if (comm == nullptr) return fail(nullptr, ncclInvalidArgument, "ncclRedOpDestroy: comm is NULL");
  size_t erased;
  {
    std::lock_guard<std::mutex> lock(comm->mu);
    erased = comm->ops.erase(static_cast<int>(op));
  }
  if (erased == 0) {
    return fail(comm, ncclInvalidArgument, "ncclRedOpDestroy: %d is not an operator of this comm",
                static_cast<int>(op));
  }
  return ncclSuccess;
}
SHIM_ALIAS(ncclRedOpDestroy)

// ---- Collectives ---------------------------------------------------------------------

SHIM_API ncclResult_t pncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                     ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                     cudaStream_t stream) {
  return shim::guarded(comm, "ncclAllReduce", [&]() -> ncclResult_t {
    const char* what = "ncclAllReduce";
    Reduction red;
    bool local = false;
    ncclResult_t r = checkArgs(comm, what, datatype, sendbuff, recvbuff, stream, &local);
    if (r == ncclSuccess) r = resolveOp(comm, op, datatype, what, &red);
    if (r != ncclSuccess) return r;
    if (local)
      return red.preMul ? preMulOnDevice(comm, what)
                        : localCopy(comm, what, recvbuff, sendbuff,
                                    count * shim::dtypeBytes(datatype), stream);
    return shim::submit(comm, what, static_cast<double>(count * shim::dtypeBytes(datatype)), [=] {
      return tideAllReduce(red.input(sendbuff, count, datatype), recvbuff, count, td(datatype),
                           red.op, comm->tide, nullptr);
    });
  });
}
SHIM_ALIAS(ncclAllReduce)

SHIM_API ncclResult_t pncclReduce(const void* sendbuff, void* recvbuff, size_t count,
                                  ncclDataType_t datatype, ncclRedOp_t op, int root,
                                  ncclComm_t comm, cudaStream_t stream) {
  return shim::guarded(comm, "ncclReduce", [&]() -> ncclResult_t {
    const char* what = "ncclReduce";
    Reduction red;
    bool local = false;
    ncclResult_t r = checkArgs(comm, what, datatype, sendbuff, recvbuff, stream, &local);
    if (r == ncclSuccess) r = resolveOp(comm, op, datatype, what, &red);
    if (r != ncclSuccess) return r;
    if (local)
      return red.preMul ? preMulOnDevice(comm, what)
                        : localCopy(comm, what, recvbuff, sendbuff,
                                    count * shim::dtypeBytes(datatype), stream);
    return shim::submit(comm, what, static_cast<double>(count * shim::dtypeBytes(datatype)), [=] {
      return tideReduce(red.input(sendbuff, count, datatype), recvbuff, count, td(datatype), red.op,
                        root, comm->tide, nullptr);
    });
  });
}
SHIM_ALIAS(ncclReduce)

SHIM_API ncclResult_t pncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                         ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                         cudaStream_t stream) {
  return shim::guarded(comm, "ncclReduceScatter", [&]() -> ncclResult_t {
    const char* what = "ncclReduceScatter";
    Reduction red;
    bool local = false;
    ncclResult_t r = checkArgs(comm, what, datatype, sendbuff, recvbuff, stream, &local);
    if (r == ncclSuccess) r = resolveOp(comm, op, datatype, what, &red);
    if (r != ncclSuccess) return r;
    if (local)
      return red.preMul ? preMulOnDevice(comm, what)
                        : localCopy(comm, what, recvbuff, sendbuff,
                                    recvcount * shim::dtypeBytes(datatype), stream);
    return shim::submit(
        comm, what, static_cast<double>(recvcount * shim::dtypeBytes(datatype)), [=] {
          int nranks = 1;
          tideCommCount(comm->tide, &nranks);
          return tideReduceScatter(red.input(sendbuff, recvcount * nranks, datatype), recvbuff,
                                   recvcount, td(datatype), red.op, comm->tide, nullptr);
        });
  });
}
SHIM_ALIAS(ncclReduceScatter)

SHIM_API ncclResult_t pncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                     ncclDataType_t datatype, int root, ncclComm_t comm,
                                     cudaStream_t stream) {
  return shim::guarded(comm, "ncclBroadcast", [&]() -> ncclResult_t {
    const char* what = "ncclBroadcast";
    bool local = false;
    ncclResult_t r = checkArgs(comm, what, datatype, sendbuff, recvbuff, stream, &local);
    if (r != ncclSuccess) return r;
    if (local)
      return localCopy(comm, what, recvbuff, sendbuff, count * shim::dtypeBytes(datatype), stream);
    return shim::submit(comm, what, static_cast<double>(count * shim::dtypeBytes(datatype)), [=] {
      return tideBroadcast(sendbuff, recvbuff, count, td(datatype), root, comm->tide, nullptr);
    });
  });
}
SHIM_ALIAS(ncclBroadcast)

SHIM_API ncclResult_t pncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root,
                                 ncclComm_t comm, cudaStream_t stream) {
  return pncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}
SHIM_ALIAS(ncclBcast)

SHIM_API ncclResult_t pncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                     ncclDataType_t datatype, ncclComm_t comm,
                                     cudaStream_t stream) {
  return shim::guarded(comm, "ncclAllGather", [&]() -> ncclResult_t {
    const char* what = "ncclAllGather";
    bool local = false;
    ncclResult_t r = checkArgs(comm, what, datatype, sendbuff, recvbuff, stream, &local);
    if (r != ncclSuccess) return r;
    if (local)
      return localCopy(comm, what, recvbuff, sendbuff, sendcount * shim::dtypeBytes(datatype),
                       stream);
    return shim::submit(
        comm, what, static_cast<double>(sendcount * shim::dtypeBytes(datatype)), [=] {
          return tideAllGather(sendbuff, recvbuff, sendcount, td(datatype), comm->tide, nullptr);
        });
  });
}
SHIM_ALIAS(ncclAllGather)

SHIM_API ncclResult_t pncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                                    ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  return shim::guarded(comm, "ncclAlltoAll", [&]() -> ncclResult_t {
    const char* what = "ncclAlltoAll";
    bool local = false;
    ncclResult_t r = checkArgs(comm, what, datatype, sendbuff, recvbuff, stream, &local);
    if (r != ncclSuccess) return r;
    if (local)
      return localCopy(comm, what, recvbuff, sendbuff, count * shim::dtypeBytes(datatype), stream);
    return shim::submit(comm, what, static_cast<double>(count * shim::dtypeBytes(datatype)), [=] {
      return tideAlltoAll(sendbuff, recvbuff, count, td(datatype), comm->tide, nullptr);
    });
  });
}
SHIM_ALIAS(ncclAlltoAll)

// Gather and Scatter: point-to-point in one Tide group (nested inside the
// caller's group when there is one); the root's own block goes to itself.
SHIM_API ncclResult_t pncclGather(const void* sendbuff, void* recvbuff, size_t count,
                                  ncclDataType_t datatype, int root, ncclComm_t comm,
                                  cudaStream_t stream) {
  return shim::guarded(comm, "ncclGather", [&]() -> ncclResult_t {
    const char* what = "ncclGather";
    bool local = false;
    ncclResult_t r = checkArgs(comm, what, datatype, sendbuff, recvbuff, stream, &local);
    if (r != ncclSuccess) return r;
    if (local)
      return localCopy(comm, what, recvbuff, sendbuff, count * shim::dtypeBytes(datatype), stream);
    const size_t bytes = count * shim::dtypeBytes(datatype);
    return shim::submit(comm, what, static_cast<double>(bytes), [=]() -> tideResult_t {
      int n = 0, me = 0;
      tideCommCount(comm->tide, &n);
      tideCommUserRank(comm->tide, &me);
      if (root < 0 || root >= n) return tideInvalidArgument;
      tideResult_t res = tideGroupStart();
      if (res != tideSuccess) return res;
      if (me == root) {
        for (int p = 0; p < n && res == tideSuccess; ++p) {
          char* dst = static_cast<char*>(recvbuff) + static_cast<size_t>(p) * bytes;
          if (p == me && dst == sendbuff) continue;  // in place
          res = tideRecv(dst, count, td(datatype), p, comm->tide, nullptr);
        }
      }
      const bool inPlace =
          me == root && static_cast<char*>(recvbuff) + static_cast<size_t>(me) * bytes == sendbuff;
      if (res == tideSuccess && !inPlace) {
        res = tideSend(sendbuff, count, td(datatype), root, comm->tide, nullptr);
      }
      const tideResult_t end = tideGroupEnd();
      return res != tideSuccess ? res : end;
    });
  });
}
SHIM_ALIAS(ncclGather)

SHIM_API ncclResult_t pncclScatter(const void* sendbuff, void* recvbuff, size_t count,
                                   ncclDataType_t datatype, int root, ncclComm_t comm,
                                   cudaStream_t stream) {
  return shim::guarded(comm, "ncclScatter", [&]() -> ncclResult_t {
    const char* what = "ncclScatter";
    bool local = false;
    ncclResult_t r = checkArgs(comm, what, datatype, sendbuff, recvbuff, stream, &local);
    if (r != ncclSuccess) return r;
    if (local)
      return localCopy(comm, what, recvbuff, sendbuff, count * shim::dtypeBytes(datatype), stream);
    const size_t bytes = count * shim::dtypeBytes(datatype);
    return shim::submit(comm, what, static_cast<double>(bytes), [=]() -> tideResult_t {
      int n = 0, me = 0;
      tideCommCount(comm->tide, &n);
      tideCommUserRank(comm->tide, &me);
      if (root < 0 || root >= n) return tideInvalidArgument;
      tideResult_t res = tideGroupStart();
      if (res != tideSuccess) return res;
      const char* own = static_cast<const char*>(sendbuff) + static_cast<size_t>(me) * bytes;
      if (me == root) {
        for (int p = 0; p < n && res == tideSuccess; ++p) {
          const char* src = static_cast<const char*>(sendbuff) + static_cast<size_t>(p) * bytes;
          if (p == me && src == recvbuff) continue;  // in place
          res = tideSend(src, count, td(datatype), p, comm->tide, nullptr);
        }
      }
      if (res == tideSuccess && !(me == root && own == recvbuff)) {
        res = tideRecv(recvbuff, count, td(datatype), root, comm->tide, nullptr);
      }
      const tideResult_t end = tideGroupEnd();
      return res != tideSuccess ? res : end;
    });
  });
}
SHIM_ALIAS(ncclScatter)

SHIM_API ncclResult_t pncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype,
                                int peer, ncclComm_t comm, cudaStream_t stream) {
  return shim::guarded(comm, "ncclSend", [&]() -> ncclResult_t {
    const char* what = "ncclSend";
    bool local = false;
    ncclResult_t r = checkArgs(comm, what, datatype, sendbuff, nullptr, stream, &local);
    if (r != ncclSuccess) return r;
    if (local)
      return localSendRecv(comm, what, true, const_cast<void*>(sendbuff),
                           count * shim::dtypeBytes(datatype), stream);
    return shim::submit(comm, what, static_cast<double>(count * shim::dtypeBytes(datatype)), [=] {
      return tideSend(sendbuff, count, td(datatype), peer, comm->tide, nullptr);
    });
  });
}
SHIM_ALIAS(ncclSend)

SHIM_API ncclResult_t pncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                                ncclComm_t comm, cudaStream_t stream) {
  return shim::guarded(comm, "ncclRecv", [&]() -> ncclResult_t {
    const char* what = "ncclRecv";
    bool local = false;
    ncclResult_t r = checkArgs(comm, what, datatype, nullptr, recvbuff, stream, &local);
    if (r != ncclSuccess) return r;
    if (local)
      return localSendRecv(comm, what, false, recvbuff, count * shim::dtypeBytes(datatype), stream);
    return shim::submit(comm, what, static_cast<double>(count * shim::dtypeBytes(datatype)), [=] {
      return tideRecv(recvbuff, count, td(datatype), peer, comm->tide, nullptr);
    });
  });
}
SHIM_ALIAS(ncclRecv)

// ---- Groups ---------------------------------------------------------------------------

SHIM_API ncclResult_t pncclGroupStart() {
  shim::groupPush();
  return ncclSuccess;
}
SHIM_ALIAS(ncclGroupStart)

SHIM_API ncclResult_t pncclGroupEnd() {
  return shim::guarded(nullptr, "ncclGroupEnd", [] { return shim::groupPop(nullptr); });
}
SHIM_ALIAS(ncclGroupEnd)

SHIM_API ncclResult_t pncclGroupSimulateEnd(ncclSimInfo_t* simInfo) {
  return shim::guarded(nullptr, "ncclGroupSimulateEnd", [&]() -> ncclResult_t {
    constexpr unsigned kSimMagic = 0x74685283;
    if (simInfo == nullptr || simInfo->magic != kSimMagic ||
        simInfo->size < offsetof(ncclSimInfo_t, estimatedTime) + sizeof(float)) {
      return fail(nullptr, ncclInvalidArgument,
                  "ncclGroupSimulateEnd: simInfo not initialised with NCCL_SIM_INFO_INITIALIZER");
    }
    if (!shim::inGroup()) {
      return fail(nullptr, ncclInvalidUsage, "ncclGroupSimulateEnd without ncclGroupStart");
    }
    return shim::groupPop(simInfo);
  });
}
SHIM_ALIAS(ncclGroupSimulateEnd)
