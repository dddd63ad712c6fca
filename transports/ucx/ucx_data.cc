// UCX net data path: tag sends and receives, progress, wake-ups, memory
// registration, and the net's table (see ucx_net.h for the design).
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "core/log.h"
#include "core/registry.h"
#include "transports/net/net_registry.h"
#include "transports/ucx/ucx_internal.h"
#include "transports/ucx/ucx_net.h"

namespace tide {
namespace ucx {
namespace {

// ---- Memory registration ------------------------------------------------------------------

tideResult_t ucxRegMr(void* /*comm*/, void* data, size_t size, int type, void** mhandle) {
  *mhandle = nullptr;
  if (type != TIDE_NET_PTR_HOST) return fail(tideInvalidArgument, "regMr: only host memory");
  const MrCache::Entry* e = nullptr;
  Status s = global().mrs->acquire(data, size, &e);
  if (!s.ok()) return fail(s.code(), "regMr: %s", s.message().c_str());
  *mhandle = const_cast<MrCache::Entry*>(e);
  return tideSuccess;
}

tideResult_t ucxDeregMr(void* /*comm*/, void* mhandle) {
  global().mrs->release(static_cast<const MrCache::Entry*>(mhandle));
  return tideSuccess;
}

// ---- Data path ----------------------------------------------------------------------------

uint64_t makeTag(int tag, int pieces, int stripe, uint32_t seq) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(tag)) << 32) |
         (static_cast<uint64_t>(pieces - 1) << kPiecesShift) |
         (static_cast<uint64_t>(stripe) << kStripeShift) | seq;
}

int piecesOf(uint64_t senderTag) { return static_cast<int>((senderTag >> kPiecesShift) & 0xf) + 1; }

void setMemh(ucp_request_param_t* p, void* mhandle, const void* data, size_t size) {
  if (!mhandle || size == 0) return;
  auto* e = static_cast<const MrCache::Entry*>(mhandle);
  if (!e->contains(reinterpret_cast<uintptr_t>(data), size)) return;
  p->op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
  p->memh = static_cast<ucp_mem_h>(e->handle);
}

tideResult_t brokenComm(UcxComm* c, const char* what) {
  return fail(c->err, "%s: %s", what, c->errMsg.c_str());
}

// Striping (layout: ucx_internal.h). Pieces a message of `size` bytes takes.
int piecesFor(const UcxComm* c, size_t size) {
  if (c->nstreams == 1 || size <= c->unit) return 1;
  size_t b = (size + c->unit - 1) / c->unit;
  return static_cast<int>(std::min<size_t>(b, static_cast<size_t>(c->nstreams)));
}

// Bytes [*off, *off + *len) of a `size`-byte message that piece k holds.
void pieceRange(const UcxComm* c, size_t size, int k, size_t* off, size_t* len) {
  if (c->nstreams == 1) {
    *off = 0;
    *len = size;
    return;
  }
  *off = std::min(size, static_cast<size_t>(k) * c->unit);
  *len = k == c->nstreams - 1 ? size - *off : std::min(c->unit, size - *off);
}

tideResult_t ucxIsend(void* sendComm, const void* data, size_t size, int tag, void* mhandle,
                      void** request) {
  *request = nullptr;
  auto* c = static_cast<UcxComm*>(sendComm);
  if (c->err != tideSuccess) return brokenComm(c, "isend");
  auto req = std::make_unique<UcxRequest>();
  req->comm = c;
  req->n = 1;
  req->isSend = true;
  req->known[0] = true;
  req->sizes[0] = size;
  int pieces = piecesFor(c, size);
  req->pieces[0] = pieces;
  for (int k = 0; k < pieces; ++k) {
    ucp_request_param_t p{};
    size_t off = 0, count = 0;
    pieceRange(c, size, k, &off, &count);
    const char* buf = static_cast<const char*>(data) + off;
    setMemh(&p, mhandle, buf, count);
    ucs_status_ptr_t r =
        ucp_tag_send_nbx(c->eps[k], buf, count, makeTag(tag, pieces, k, c->seq), &p);
    if (UCS_PTR_IS_ERR(r)) {
      // Pieces already posted finish (or fail) on their own; the comm is broken.
      for (int j = 0; j < k; ++j) {
        if (req->ucx[0][j]) ucp_request_free(req->ucx[0][j]);
      }
      c->err = tideRemoteError;
      c->errMsg = std::string("send failed: ") + ucs_status_string(UCS_PTR_STATUS(r));
      return fail(tideRemoteError, "isend: ucp_tag_send_nbx: %s",
                  ucs_status_string(UCS_PTR_STATUS(r)));
    }
    req->ucx[0][k] = r;  // NULL: completed inline
    req->done[0][k] = r == nullptr;
    if (r == nullptr) ++req->got[0];
  }
  c->seq = nextSeq(c->seq);
  c->live.push_back(req.get());
  *request = req.release();
  return tideSuccess;
}

tideResult_t ucxIrecv(void* recvComm, int n, void** data, const size_t* sizes, const int* tags,
                      void** mhandles, void** request) {
  *request = nullptr;
  auto* c = static_cast<UcxComm*>(recvComm);
  if (n < 1 || n > kMaxRecvs) return fail(tideInvalidArgument, "irecv: n = %d", n);
  if (c->err != tideSuccess) return brokenComm(c, "irecv");
  auto req = std::make_unique<UcxRequest>();
  req->comm = c;
  req->n = n;
  for (int i = 0; i < n; ++i) {
    int pieces = piecesFor(c, sizes[i]);
    req->pieces[i] = pieces;  // at most; the sender's count arrives with its pieces
    req->known[i] = c->nstreams == 1;
    for (int k = 0; k < pieces; ++k) {
      ucp_request_param_t p{};
      // UCX 1.13 does not report the length of a receive that completes
      // inline, so always take a request.
      p.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
      size_t off = 0, count = 0;
      pieceRange(c, sizes[i], k, &off, &count);
      char* buf = static_cast<char*>(data[i]) + off;
      setMemh(&p, mhandles ? mhandles[i] : nullptr, buf, count);
      ucs_status_ptr_t r =
          ucp_tag_recv_nbx(c->worker, buf, count, makeTag(tags[i], 1, k, c->seq), ~kPiecesMask, &p);
      if (UCS_PTR_IS_ERR(r)) {
        // Earlier sub-receives are cancelled with the request.
        for (int a = 0; a <= i; ++a) {
          for (int b = 0; b < kMaxStreams; ++b) {
            if (!req->ucx[a][b]) continue;
            ucp_request_cancel(c->worker, req->ucx[a][b]);
            ucp_request_free(req->ucx[a][b]);
          }
        }
        return fail(tideSystemError, "irecv: ucp_tag_recv_nbx: %s",
                    ucs_status_string(UCS_PTR_STATUS(r)));
      }
      req->ucx[i][k] = r;
    }
    c->seq = nextSeq(c->seq);
  }
  c->live.push_back(req.get());
  *request = req.release();
  return tideSuccess;
}

void forget(UcxComm* c, UcxRequest* r) {
  for (size_t i = 0; i < c->live.size(); ++i) {
    if (c->live[i] == r) {
      c->live[i] = c->live.back();
      c->live.pop_back();
      break;
    }
  }
  delete r;
}

void drainEventFd(UcxComm* c) {
  uint64_t v;
  if (c->evfd >= 0 && c->armed) {
    while (read(c->evfd, &v, sizeof(v)) == sizeof(v)) {
    }
  }
}

// Whether every sub-request of `r` has finished (successfully or not), as far
// as UCX knows without progressing the worker.
bool settled(UcxRequest* r) {
  for (int i = 0; i < r->n; ++i) {
    if (!r->known[i]) return false;
    for (int k = 0; k < r->pieces[i]; ++k) {
      if (r->done[i][k] || !r->ucx[i][k]) continue;
      if (ucp_request_check_status(r->ucx[i][k]) == UCS_INPROGRESS) return false;
    }
  }
  return true;
}

tideResult_t ucxTest(void* request, int* done, size_t* sizes) {
  *done = 0;
  auto* r = static_cast<UcxRequest*>(request);
  UcxComm* c = r->comm;
  bool moved = false;
  // A request often completes inside the progress another request's test()
  // made; each progress costs UCX an epoll_wait per transport, so progress
  // only when something of this request is still outstanding.
  if (!settled(r)) {
    for (int i = 0; i < 64 && ucp_worker_progress(c->worker) != 0; ++i) moved = true;
  }
  bool all = true;
  tideResult_t bad = tideSuccess;
  const char* why = nullptr;
  for (int i = 0; i < r->n && bad == tideSuccess; ++i) {
    for (int k = 0; k < r->pieces[i]; ++k) {
      if (r->done[i][k] || !r->ucx[i][k]) continue;
      ucs_status_t st;
      ucp_tag_recv_info_t info{};
      if (r->isSend) {
        st = ucp_request_check_status(r->ucx[i][k]);
      } else {
        st = ucp_tag_recv_request_test(r->ucx[i][k], &info);
      }
      if (st == UCS_INPROGRESS) continue;
      ucp_request_free(r->ucx[i][k]);
      r->ucx[i][k] = nullptr;
      r->done[i][k] = true;
      ++r->got[i];
      moved = true;
      if (st != UCS_OK) {
        bad = st == UCS_ERR_MESSAGE_TRUNCATED ? tideInvalidUsage : tideRemoteError;
        why = ucs_status_string(st);
        break;
      }
      if (r->isSend) continue;
      r->sizes[i] += info.length;
      if (r->known[i]) continue;
      int sent = piecesOf(info.sender_tag);
      if (sent > r->pieces[i]) {
        bad = tideInvalidUsage;
        why = "more pieces than the receive holds";
        break;
      }
      // The pieces the sender did not use are never sent: cancel them.
      for (int j = sent; j < r->pieces[i]; ++j) {
        if (!r->ucx[i][j]) continue;
        ucp_request_cancel(c->worker, r->ucx[i][j]);
        ucp_request_free(r->ucx[i][j]);
        r->ucx[i][j] = nullptr;
      }
      r->pieces[i] = sent;
      r->known[i] = true;
    }
    if (!r->known[i] || r->got[i] < r->pieces[i]) all = false;
  }
  if (bad != tideSuccess && c->err == tideSuccess) {
    c->err = bad;
    c->errMsg = std::string(r->isSend ? "send" : "receive") + " failed: " + why;
    if (bad == tideInvalidUsage) c->errMsg += " (message larger than the receive)";
  }
  if (!all && !moved && c->err == tideSuccess && (c->idle % 16) == 0) {
    checkSide(c);
    if (c->peerGone && std::chrono::steady_clock::now() - c->peerGoneAt > kPeerGoneGrace) {
      c->err = tideRemoteError;
      c->errMsg = "peer closed its end or died (side channel or endpoint closed)";
    }
  }
  if (bad == tideSuccess && !all && c->err != tideSuccess) bad = c->err;
  if (bad != tideSuccess) {
    for (int i = 0; i < r->n; ++i) {
      for (int k = 0; k < kMaxStreams; ++k) {
        if (!r->ucx[i][k]) continue;
        ucp_request_cancel(c->worker, r->ucx[i][k]);
        ucp_request_free(r->ucx[i][k]);
        r->ucx[i][k] = nullptr;
      }
    }
    forget(c, r);
    return brokenComm(c, "test");
  }
  if (all) {
    if (sizes) {
      for (int i = 0; i < r->n; ++i) sizes[i] = r->sizes[i];
    }
    forget(c, r);
    *done = 1;
    c->idle = 0;
    return tideSuccess;
  }
  static thread_local unsigned idleCalls = 0;
  if (!moved && (++idleCalls & 63) == 0) sweepClosing();
  if (moved) {
    c->idle = 0;
  } else if (c->epfd >= 0 && ++c->idle >= kIdleBeforeArm) {
    // Idle: arm the worker so the poll fd wakes a sleeping caller.
    c->idle = 0;
    drainEventFd(c);
    ucs_status_t st = ucp_worker_arm(c->worker);
    c->armed = true;
    if (st == UCS_ERR_BUSY) {
      uint64_t one = 1;
      ssize_t w = write(c->evfd, &one, sizeof(one));
      (void)w;
    }
  }
  return tideSuccess;
}

tideResult_t ucxGetPollFd(void* comm, int* fd) {
  *fd = static_cast<UcxComm*>(comm)->epfd;
  return tideSuccess;
}

}  // namespace
}  // namespace ucx

const tideNet_v1_t kUcxNet = {
    "ucx",
    ucx::ucxInit,
    ucx::ucxDevices,
    ucx::ucxGetProperties,
    ucx::ucxListen,
    ucx::ucxConnect,
    ucx::ucxAccept,
    ucx::ucxRegMr,
    ucx::ucxDeregMr,
    ucx::ucxIsend,
    ucx::ucxIrecv,
    ucx::ucxTest,
    ucx::ucxGetPollFd,
    ucx::ucxCloseComm,
    ucx::ucxCloseComm,
    ucx::ucxCloseListen,
};

TIDE_ON_LOAD(registerNet(&kUcxNet));

}  // namespace tide
