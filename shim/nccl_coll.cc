// NCCL shim: reduction operators, collectives, point-to-point and groups.
// See nccl_api.cc for the buffer model.
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cuda/cuda_loader.h"
#include "shim/shim_internal.h"
#include "shim/staging.h"

using tide::shim::fail;
namespace shim = tide::shim;

namespace {

tideDataType_t td(ncclDataType_t t) { return static_cast<tideDataType_t>(t); }

// A root or peer outside [0, nranks) fails the call itself, also inside a
// group (as NCCL does), with a message naming it. Unknown nranks (creation
// deferred to the group's end): checked by Tide when the call runs.
ncclResult_t checkRank(ncclComm_t comm, int r, const char* what, const char* role) {
  if (comm != nullptr && comm->nranks > 0 && (r < 0 || r >= comm->nranks)) {
    return fail(comm, ncclInvalidArgument, "%s: %s %d is not a rank of this communicator [0, %d)",
                what, role, r, comm->nranks);
  }
  return ncclSuccess;
}

// How a call's buffers are handled. Host-buffer mode: as they are, blocking.
// GPU mode: the buffers (device or host) and the caller's stream go to Tide,
// which orders the operation on the stream; a one-rank communicator with
// device buffers copies on the stream itself (*local); a PreMulSum, scaled
// on the host, and calls on the NULL stream stage synchronously
// (shim/staging.h).
struct Route {
  bool local = false;
  bool device = false;
};

ncclResult_t route(ncclComm_t comm, const char* what, ncclDataType_t dt, const void* a,
                   const void* b, Route* rt) {
  if (comm == nullptr) return fail(nullptr, ncclInvalidArgument, "%s: comm is NULL", what);
  if (!shim::dtypeOk(dt)) {
    return fail(comm, ncclInvalidArgument, "%s: invalid datatype %d", what, static_cast<int>(dt));
  }
  rt->device =
      !comm->hostMode && (tide::cuda::isDevicePointer(a) || tide::cuda::isDevicePointer(b));
  rt->local = rt->device && comm->nranks == 1;
  return ncclSuccess;
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

// One entry point's call as the shared body below sees it.
struct Call {
  ncclComm_t comm;
  const char* what;
  ncclDataType_t dt;
  const void* send;  // null for ncclRecv
  void* recv;        // null for ncclSend
  size_t bytes;      // what submit() reports and the one-rank device path moves
  // The one-rank device path: a stream-ordered copy send -> recv, or a self
  // send / receive matched in the communicator's queue.
  enum class Local { kCopy, kSend, kRecv } local = Local::kCopy;
};

// Blocking (or recorded inside a group): the body every collective and
// point-to-point entry point shares. Routes the buffers by `plan`; with
// `red`, resolves `op` into *red (after the routing checks, so a NULL comm is
// reported first); on a one-rank communicator with device buffers takes the
// stream-ordered local path (not for a PreMulSum, which must scale);
// otherwise submits run(staging), the Tide call on the buffers the staging
// hands over (in()/out()). `run` may read *red when it runs.
ncclResult_t runCall(const Call& c, cudaStream_t stream, shim::Staging::Plan plan,
                     std::function<tideResult_t(const shim::Staging&)> run,
                     ncclRedOp_t op = ncclSum, Reduction* red = nullptr) {
  Route rt;
  ncclResult_t r = route(c.comm, c.what, c.dt, c.send, c.recv, &rt);
  if (r == ncclSuccess && red != nullptr) r = resolveOp(c.comm, op, c.dt, c.what, red);
  if (r != ncclSuccess) return r;
  const bool preMul = red != nullptr && red->preMul;
  if (rt.local && !preMul) {
    // Inside a group it runs at the outermost ncclGroupEnd, in issue order
    // with the group's other operations (as NCCL does), not at call time.
    const Call call = c;
    shim::Deferred local = [call, stream]() -> ncclResult_t {
      switch (call.local) {
        case Call::Local::kSend:
          return localSendRecv(call.comm, call.what, true, const_cast<void*>(call.send), call.bytes,
                               stream);
        case Call::Local::kRecv:
          return localSendRecv(call.comm, call.what, false, call.recv, call.bytes, stream);
        case Call::Local::kCopy:
          break;
      }
      return localCopy(call.comm, call.what, call.recv, call.send, call.bytes, stream);
    };
    if (shim::inGroup()) {
      shim::deferOp(std::move(local), static_cast<double>(c.bytes));
      return ncclSuccess;
    }
    return local();
  }
  // Staged synchronously (shim/staging.h): a PreMulSum, which scales on the
  // host, and the NULL stream (the legacy default stream: ranks as threads
  // of one process share it, so stream-ordered collectives on it would wait
  // for each other's turn forever).
  const bool stage = !c.comm->hostMode && (preMul || stream == nullptr);
  auto st = std::make_shared<shim::Staging>(c.comm, c.what, stream, stage, std::move(plan));
  return shim::submit(
      c.comm, c.what, static_cast<double>(c.bytes), [st, run = std::move(run)] { return run(*st); },
      st);
}

// A collective that does not reduce: `run(staging)` is its Tide call. What
// escapes (allocation failure) becomes an error code, as for every entry point.
template <typename PlanFn, typename Run>
ncclResult_t collective(const Call& c, cudaStream_t stream, PlanFn plan, Run run) noexcept {
  return shim::guarded(c.comm, c.what, [&]() -> ncclResult_t {
    return runCall(c, stream, std::move(plan), std::move(run));
  });
}

// A reducing collective: run(in, out, op) is its Tide call on the staged
// buffers, `in` being the input premultiplied for a PreMulSum; the input
// holds `count` elements, times the number of ranks when `inputPerRank`
// (ReduceScatter).
template <typename PlanFn, typename Run>
ncclResult_t reduction(const Call& c, cudaStream_t stream, ncclRedOp_t op, size_t count,
                       bool inputPerRank, PlanFn plan, Run run) noexcept {
  return shim::guarded(c.comm, c.what, [&]() -> ncclResult_t {
    auto red = std::make_shared<Reduction>();
    const ncclComm_t comm = c.comm;
    const ncclDataType_t dt = c.dt;
    auto call = [=](const shim::Staging& st) {
      size_t inCount = count;
      if (inputPerRank) {
        int nranks = 1;
        tideCommCount(comm->tide, &nranks);
        inCount *= static_cast<size_t>(nranks);
      }
      return run(red->input(st.in(), inCount, dt), st.out(), red->op, st.tideStream());
    };
    return runCall(c, stream, std::move(plan), call, op, red.get());
  });
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
  return shim::guarded(comm, "ncclRedOpDestroy", [&]() -> ncclResult_t {
    if (comm == nullptr)
      return fail(nullptr, ncclInvalidArgument, "ncclRedOpDestroy: comm is NULL");
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
  });
}
SHIM_ALIAS(ncclRedOpDestroy)

// ---- Collectives ---------------------------------------------------------------------
// Each call states the bytes this rank reads and writes (its staging plan),
// then runs the Tide collective on what the staging hands over: the caller's
// buffers, or host copies of device buffers.

SHIM_API ncclResult_t pncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                     ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                     cudaStream_t stream) {
  const size_t bytes = count * shim::dtypeBytes(datatype);
  return reduction(
      {comm, "ncclAllReduce", datatype, sendbuff, recvbuff, bytes}, stream, op, count, false,
      [=](shim::Staging& s, int, int) {
        s.input(sendbuff, bytes);
        s.output(recvbuff, bytes);
      },
      [=](const void* in, void* out, tideRedOp_t red, tideStream_t ts) {
        return tideAllReduce(in, out, count, td(datatype), red, comm->tide, ts);
      });
}
SHIM_ALIAS(ncclAllReduce)

SHIM_API ncclResult_t pncclReduce(const void* sendbuff, void* recvbuff, size_t count,
                                  ncclDataType_t datatype, ncclRedOp_t op, int root,
                                  ncclComm_t comm, cudaStream_t stream) {
  const size_t bytes = count * shim::dtypeBytes(datatype);
  if (checkRank(comm, root, "ncclReduce", "root") != ncclSuccess) return ncclInvalidArgument;
  return reduction(
      {comm, "ncclReduce", datatype, sendbuff, recvbuff, bytes}, stream, op, count, false,
      [=](shim::Staging& s, int rank, int) {
        s.input(sendbuff, bytes);
        s.output(recvbuff, bytes, rank == root);
      },
      [=](const void* in, void* out, tideRedOp_t red, tideStream_t ts) {
        return tideReduce(in, out, count, td(datatype), red, root, comm->tide, ts);
      });
}
SHIM_ALIAS(ncclReduce)

SHIM_API ncclResult_t pncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                         ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                         cudaStream_t stream) {
  const size_t bytes = recvcount * shim::dtypeBytes(datatype);
  return reduction(
      {comm, "ncclReduceScatter", datatype, sendbuff, recvbuff, bytes}, stream, op, recvcount, true,
      [=](shim::Staging& s, int, int n) {
        s.input(sendbuff, bytes * static_cast<size_t>(n));
        s.output(recvbuff, bytes);
      },
      [=](const void* in, void* out, tideRedOp_t red, tideStream_t ts) {
        return tideReduceScatter(in, out, recvcount, td(datatype), red, comm->tide, ts);
      });
}
SHIM_ALIAS(ncclReduceScatter)

SHIM_API ncclResult_t pncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                     ncclDataType_t datatype, int root, ncclComm_t comm,
                                     cudaStream_t stream) {
  const size_t bytes = count * shim::dtypeBytes(datatype);
  if (checkRank(comm, root, "ncclBroadcast", "root") != ncclSuccess) return ncclInvalidArgument;
  return collective(
      {comm, "ncclBroadcast", datatype, sendbuff, recvbuff, bytes}, stream,
      [=](shim::Staging& s, int rank, int) {
        if (rank == root) s.input(sendbuff, bytes);
        s.output(recvbuff, bytes);
      },
      [=](const shim::Staging& st) {
        // Non-roots read nothing: hand Tide their (staged) receive buffer.
        const void* src = st.in() != nullptr ? st.in() : st.out();
        return tideBroadcast(src, st.out(), count, td(datatype), root, comm->tide, st.tideStream());
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
  const size_t bytes = sendcount * shim::dtypeBytes(datatype);
  return collective(
      {comm, "ncclAllGather", datatype, sendbuff, recvbuff, bytes}, stream,
      [=](shim::Staging& s, int, int n) {
        s.input(sendbuff, bytes);
        s.output(recvbuff, bytes * static_cast<size_t>(n));
      },
      [=](const shim::Staging& st) {
        return tideAllGather(st.in(), st.out(), sendcount, td(datatype), comm->tide,
                             st.tideStream());
      });
}
SHIM_ALIAS(ncclAllGather)

SHIM_API ncclResult_t pncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                                    ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  const size_t bytes = count * shim::dtypeBytes(datatype);
  return collective(
      {comm, "ncclAlltoAll", datatype, sendbuff, recvbuff, bytes}, stream,
      [=](shim::Staging& s, int, int n) {
        s.input(sendbuff, bytes * static_cast<size_t>(n));
        s.output(recvbuff, bytes * static_cast<size_t>(n));
      },
      [=](const shim::Staging& st) {
        return tideAlltoAll(st.in(), st.out(), count, td(datatype), comm->tide, st.tideStream());
      });
}
SHIM_ALIAS(ncclAlltoAll)

namespace {

// Gather and Scatter: point-to-point in one Tide group (nested inside the
// caller's group when there is one); the root's own block goes to itself.
// `send`/`recv` are what Tide sees (host copies when staged); in place when
// the root's own block of the big buffer is the small one.
tideResult_t gatherScatter(bool gather, const void* send, void* recv, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm, tideStream_t ts) {
  const size_t bytes = count * shim::dtypeBytes(datatype);
  int n = 0, me = 0;
  tideCommCount(comm->tide, &n);
  tideCommUserRank(comm->tide, &me);
  if (root < 0 || root >= n) return tideInvalidArgument;
  tideResult_t res = tideGroupStart();
  if (res != tideSuccess) return res;
  const bool isRoot = me == root;
  // The big buffer: gathered into at the root (recv), scattered from (send).
  auto block = [&](int p) -> char* {
    char* big =
        gather ? static_cast<char*>(recv) : const_cast<char*>(static_cast<const char*>(send));
    return big + static_cast<size_t>(p) * bytes;
  };
  const void* small = gather ? send : recv;
  if (isRoot) {
    for (int p = 0; p < n && res == tideSuccess; ++p) {
      if (p == me && block(p) == small) continue;  // in place
      res = gather ? tideRecv(block(p), count, td(datatype), p, comm->tide, ts)
                   : tideSend(block(p), count, td(datatype), p, comm->tide, ts);
    }
  }
  if (res == tideSuccess && !(isRoot && block(me) == small)) {
    res = gather ? tideSend(send, count, td(datatype), root, comm->tide, ts)
                 : tideRecv(recv, count, td(datatype), root, comm->tide, ts);
  }
  const tideResult_t end = tideGroupEnd();
  return res != tideSuccess ? res : end;
}

ncclResult_t gatherScatterCall(bool gather, const void* sendbuff, void* recvbuff, size_t count,
                               ncclDataType_t datatype, int root, ncclComm_t comm,
                               cudaStream_t stream) {
  const size_t bytes = count * shim::dtypeBytes(datatype);
  const char* what = gather ? "ncclGather" : "ncclScatter";
  if (checkRank(comm, root, what, "root") != ncclSuccess) return ncclInvalidArgument;
  return collective(
      {comm, what, datatype, sendbuff, recvbuff, bytes}, stream,
      [=](shim::Staging& s, int rank, int n) {
        const size_t big = bytes * static_cast<size_t>(n);
        if (gather) {
          s.input(sendbuff, bytes);
          if (rank == root) s.output(recvbuff, big);
        } else {
          if (rank == root) s.input(sendbuff, big);
          s.output(recvbuff, bytes);
        }
      },
      [=](const shim::Staging& st) {
        return gatherScatter(gather, st.in(), st.out(), count, datatype, root, comm,
                             st.tideStream());
      });
}

// ncclSend (`isSend`, buf read) and ncclRecv (buf written).
ncclResult_t pointToPoint(bool isSend, void* buf, size_t count, ncclDataType_t datatype, int peer,
                          ncclComm_t comm, cudaStream_t stream) {
  const size_t bytes = count * shim::dtypeBytes(datatype);
  if (checkRank(comm, peer, isSend ? "ncclSend" : "ncclRecv", "peer") != ncclSuccess) {
    return ncclInvalidArgument;
  }
  const Call c{comm,
               isSend ? "ncclSend" : "ncclRecv",
               datatype,
               isSend ? buf : nullptr,
               isSend ? nullptr : buf,
               bytes,
               isSend ? Call::Local::kSend : Call::Local::kRecv};
  return collective(
      c, stream,
      [=](shim::Staging& s, int, int) {
        if (isSend) {
          s.input(buf, bytes);
        } else {
          s.output(buf, bytes);
        }
      },
      [=](const shim::Staging& st) {
        return isSend ? tideSend(st.in(), count, td(datatype), peer, comm->tide, st.tideStream())
                      : tideRecv(st.out(), count, td(datatype), peer, comm->tide, st.tideStream());
      });
}

}  // namespace

SHIM_API ncclResult_t pncclGather(const void* sendbuff, void* recvbuff, size_t count,
                                  ncclDataType_t datatype, int root, ncclComm_t comm,
                                  cudaStream_t stream) {
  return gatherScatterCall(true, sendbuff, recvbuff, count, datatype, root, comm, stream);
}
SHIM_ALIAS(ncclGather)

SHIM_API ncclResult_t pncclScatter(const void* sendbuff, void* recvbuff, size_t count,
                                   ncclDataType_t datatype, int root, ncclComm_t comm,
                                   cudaStream_t stream) {
  return gatherScatterCall(false, sendbuff, recvbuff, count, datatype, root, comm, stream);
}
SHIM_ALIAS(ncclScatter)

SHIM_API ncclResult_t pncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype,
                                int peer, ncclComm_t comm, cudaStream_t stream) {
  return pointToPoint(true, const_cast<void*>(sendbuff), count, datatype, peer, comm, stream);
}
SHIM_ALIAS(ncclSend)

SHIM_API ncclResult_t pncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                                ncclComm_t comm, cudaStream_t stream) {
  return pointToPoint(false, recvbuff, count, datatype, peer, comm, stream);
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
