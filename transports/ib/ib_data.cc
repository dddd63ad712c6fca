// The verbs net's data path: registration (regMr through the MR cache),
// isend/irecv/test driving the engines of ib_engine.h, CQ polling
// and the poll fd (design in ib_net_internal.h).
// UNVERIFIED ON HARDWARE.
#include <arpa/inet.h>
#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "core/config.h"
#include "core/log.h"
#include "transports/ib/ib_net_internal.h"

namespace tide {
namespace ibnet {
namespace {

constexpr int kPollBatch = 32;

// Registers [data, data+size) for one request or one regMr. Host memory goes
// through the device's MR cache; device memory is registered directly, with
// ibv_reg_mr through peer memory (TIDE_NET_PTR_DEVICE) or with
// ibv_reg_dmabuf_mr on a dma-buf the core exports (TIDE_NET_PTR_DMABUF; the
// fd is closed once registered, the registration keeps the memory pinned).
Status acquireMr(Device* dev, void* data, size_t size, int type, Mr* out) {
  *out = Mr{};
  out->dev = dev;
  if (type == TIDE_NET_PTR_DMABUF) {
    int fd = -1;
    uint64_t offset = 0;
    const tideResult_t r = tideNetDmaBufFd(data, size ? size : 1, &fd, &offset);
    if (r != tideSuccess) {
      return makeStatus(r, "ib net: no dma-buf for device buffer %p (%zu bytes): %s", data, size,
                        tideGetErrorString(r));
    }
    Status s = ibRegMr(dev->dev, data, size ? size : 1, fd, offset, &out->direct);
    close(fd);
    TIDE_TRY(s);
    out->device = true;
    out->lkey = out->direct->lkey;
    out->rkey = out->direct->rkey;
    return Status::Ok();
  }
  if (type == TIDE_NET_PTR_DEVICE) {
    TIDE_TRY(ibRegMr(dev->dev, data, size ? size : 1, -1, 0, &out->direct));
    out->device = true;
    out->lkey = out->direct->lkey;
    out->rkey = out->direct->rkey;
    return Status::Ok();
  }
  TIDE_TRY(dev->cache->acquire(data, size, &out->entry));
  auto* mr = static_cast<ibv_mr*>(out->entry->handle);
  out->lkey = mr->lkey;
  out->rkey = mr->rkey;
  return Status::Ok();
}

// `keep`: leave the registration cached (regMr'd buffers, or implicit ones
// with TIDE_IB_MR_CACHE=1); otherwise it is dropped once unreferenced, so a
// freed and reused address range never hits a stale registration.
void releaseMr(Mr* m, bool keep) {
  if (m->direct) ibv_dereg_mr(m->direct);
  if (m->entry) {
    uintptr_t base = m->entry->base;
    size_t len = m->entry->len;
    m->dev->cache->release(m->entry);
    if (!keep) m->dev->cache->invalidate(reinterpret_cast<void*>(base), len);
  }
  *m = Mr{};
}

void breakComm(Comm* c, const Status& s) {
  if (!c->err.ok()) return;
  c->err = s;
  (void)c->fsm.apply(IbConnEvent::Fail);
  // Stops the HCA touching request buffers: outstanding WRs are flushed.
  for (ibv_qp* qp : c->qps) ibQpToError(qp);
  TIDE_INFO("%s", s.message().c_str());
}

// Watches the side channel: the peer never writes after set-up, so
// readable means closed (or reset).
void checkSideChannel(Comm* c) {
  if (c->peerClosed || c->sock < 0) return;
  uint8_t b;
  ssize_t r = ::recv(c->sock, &b, 1, MSG_DONTWAIT);
  if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
    c->peerClosed = true;
    c->peerClosedAt = std::chrono::steady_clock::now();
  }
}

void onCompletion(Comm* c, const ibv_wc& wc) {
  IbCompletion x;
  x.wrId = wc.wr_id;
  x.status = wc.status;
  x.statusStr = ibv_wc_status_str(wc.status);
  x.vendorErr = wc.vendor_err;
  x.hasImm = (wc.wc_flags & IBV_WC_WITH_IMM) != 0;
  x.imm = ntohl(wc.imm_data);
  Status s = c->sender ? c->sender->onCompletion(x) : c->receiver->onCompletion(x);
  if (!s.ok()) breakComm(c, s);
}

// Polls the CQ, feeds the engine, lets it post and complete; arms the CQ
// when idle.
void progress(Comm* c) {
  if (c->armed && ibDrainCqEvents(&c->cq)) c->armed = false;
  int found = 0;
  for (int round = 0; round < 2; ++round) {
    ibv_wc wcs[kPollBatch];
    int n;
    while ((n = ibv_poll_cq(c->cq.cq, kPollBatch, wcs)) > 0) {
      found += n;
      for (int i = 0; i < n; ++i) onCompletion(c, wcs[i]);
    }
    if (n < 0) breakComm(c, systemError("ib net: ibv_poll_cq failed on %s", c->peer.c_str()));
    if (found > 0 || c->armed || !c->err.ok()) break;
    // Idle: ask for an event (a caller may sleep on the poll fd), then look
    // once more for a completion that raced with arming.
    Status s = ibArmCq(&c->cq);
    if (!s.ok()) breakComm(c, s);
    c->armed = true;
  }
  if (c->err.ok()) {
    Status s = c->sender ? c->sender->progress() : c->receiver->progress();
    if (!s.ok()) breakComm(c, s);
  }
  if (found == 0) checkSideChannel(c);  // only when idle: a syscall
}

bool keepImplicit() { return knobBool(Knob::IbMrCache); }

Request* newRequest(Comm* c, bool send, void* data, size_t size, int tag) {
  auto* r = new Request;
  r->comm = c;
  r->send = send;
  r->msg.buf = static_cast<uint8_t*>(data);
  r->msg.size = size;
  r->msg.tag = tag;
  c->live.insert(r);
  return r;
}

// Registration of a request's buffer: the caller's mhandle, none for an
// empty buffer, else an implicit one.
Status requestMr(Comm* c, Request* r, void* mhandle) {
  IbMsg& m = r->msg;
  if (mhandle != nullptr) {
    auto* h = static_cast<Mr*>(mhandle);
    m.lkey = h->lkey;
    m.rkey = h->rkey;
    return Status::Ok();
  }
  if (m.size == 0 || m.buf == nullptr) return Status::Ok();
  TIDE_TRY(acquireMr(c->dev, m.buf, m.size, TIDE_NET_PTR_HOST, &r->mr));
  m.lkey = r->mr.lkey;
  m.rkey = r->mr.rkey;
  return Status::Ok();
}

}  // namespace

Status VerbsPoster::write(int qp, uint64_t wrId, const void* local, uint32_t lkey, size_t len,
                          uint64_t remote, uint32_t rkey, bool withImm, uint32_t imm,
                          bool signaled) {
  bool inl =
      len > 0 && len <= static_cast<size_t>(c_->inlineBytes) &&
      std::find(c_->deviceLkeys.begin(), c_->deviceLkeys.end(), lkey) == c_->deviceLkeys.end();
  return ibPostWrite(c_->qps[qp], wrId, local, lkey, len, remote, rkey, withImm, imm, signaled,
                     inl);
}

Status VerbsPoster::recv(int qp, uint64_t wrId) { return ibPostRecv(c_->qps[qp], wrId); }

void freeRequest(Request* r) {
  r->comm->live.erase(r);
  if (r->mr.entry || r->mr.direct) releaseMr(&r->mr, keepImplicit());
  delete r;
}

tideResult_t netRegMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  auto* c = static_cast<Comm*>(comm);
  if (c == nullptr || mhandle == nullptr || (data == nullptr && size > 0))
    return fail(invalidArgument("ib net: regMr: bad arguments"));
  *mhandle = nullptr;
  if (type != TIDE_NET_PTR_HOST && type != TIDE_NET_PTR_DEVICE && type != TIDE_NET_PTR_DMABUF)
    return fail(invalidArgument(
        "ib net: regMr: pointer type %d not supported (host, or device memory through peer "
        "memory or dma-buf)",
        type));
  auto m = std::make_unique<Mr>();
  Status s = acquireMr(c->dev, data, size, type, m.get());
  if (!s.ok()) return fail(s);
  if (m->device) c->deviceLkeys.push_back(m->lkey);
  *mhandle = m.release();
  return tideSuccess;
}

tideResult_t netDeregMr(void* comm, void* mhandle) {
  if (comm == nullptr || mhandle == nullptr) return fail(invalidArgument("ib net: deregMr: null"));
  auto* c = static_cast<Comm*>(comm);
  auto* m = static_cast<Mr*>(mhandle);
  if (m->device) {
    auto it = std::find(c->deviceLkeys.begin(), c->deviceLkeys.end(), m->lkey);
    if (it != c->deviceLkeys.end()) c->deviceLkeys.erase(it);
  }
  releaseMr(m, false);
  delete m;
  return tideSuccess;
}

tideResult_t netIsend(void* sendComm, const void* data, size_t size, int tag, void* mhandle,
                      void** request) {
  auto* c = static_cast<Comm*>(sendComm);
  if (c == nullptr || !c->send || request == nullptr || (size > 0 && data == nullptr))
    return fail(invalidArgument("ib net: isend: bad arguments"));
  *request = nullptr;
  if (size > kMaxMessage)
    return fail(invalidArgument("ib net: isend of %zu bytes (at most %zu)", size, kMaxMessage));
  if (!c->err.ok()) return fail(c->err);
  if (c->live.size() >= kMaxRequests) return tideSuccess;
  Request* r = newRequest(c, true, const_cast<void*>(data), size, tag);
  Status s = requestMr(c, r, mhandle);
  if (!s.ok()) {
    freeRequest(r);
    return fail(s);
  }
  c->sender->queue(&r->msg);
  progress(c);  // posts it now when the grant is already here
  *request = r;
  return tideSuccess;
}

tideResult_t netIrecv(void* recvComm, int n, void** data, const size_t* sizes, const int* tags,
                      void** mhandles, void** request) {
  auto* c = static_cast<Comm*>(recvComm);
  if (c == nullptr || c->send || n != 1 || request == nullptr || data == nullptr ||
      sizes == nullptr || tags == nullptr || (sizes[0] > 0 && data[0] == nullptr))
    return fail(invalidArgument("ib net: irecv: bad arguments (n=%d; this net takes n=1)", n));
  *request = nullptr;
  if (!c->err.ok()) return fail(c->err);
  progress(c);
  if (!c->err.ok()) return fail(c->err);
  if (!c->receiver->canPost() || c->live.size() >= kMaxRequests)
    return tideSuccess;  // no credit: retry after test()
  size_t cap = std::min(sizes[0], kMaxMessage);
  Request* r = newRequest(c, false, data[0], cap, tags[0]);
  Status s = requestMr(c, r, mhandles ? mhandles[0] : nullptr);
  if (s.ok()) s = c->receiver->post(&r->msg);
  if (!s.ok()) {
    c->receiver->forget(&r->msg);
    freeRequest(r);
    breakComm(c, s);
    return fail(s);
  }
  *request = r;
  return tideSuccess;
}

tideResult_t netTest(void* request, int* done, size_t* sizes) {
  auto* r = static_cast<Request*>(request);
  if (r == nullptr || done == nullptr) return fail(invalidArgument("ib net: test: null"));
  *done = 0;
  Comm* c = r->comm;
  progress(c);
  if (r->msg.done) {
    if (sizes != nullptr) sizes[0] = r->send ? r->msg.size : r->msg.bytes;
    freeRequest(r);
    *done = 1;
    return tideSuccess;
  }
  if (c->err.ok() && c->peerClosed &&
      std::chrono::steady_clock::now() - c->peerClosedAt >
          std::chrono::duration<double>(kCloseGraceSeconds)) {
    breakComm(c, remoteError("ib net: the peer %s closed the connection or died", c->peer.c_str()));
  }
  if (c->err.ok()) return tideSuccess;
  // The comm is broken: this request is finished with its error.
  if (c->sender) c->sender->forget(&r->msg);
  if (c->receiver) c->receiver->forget(&r->msg);
  freeRequest(r);
  return fail(c->err);
}

tideResult_t netGetPollFd(void* comm, int* fd) {
  auto* c = static_cast<Comm*>(comm);
  if (c == nullptr || fd == nullptr) return fail(invalidArgument("ib net: getPollFd: null"));
  *fd = c->epfd;
  return tideSuccess;
}

}  // namespace ibnet
}  // namespace tide
