// UCX net comms: closing. Endpoint close, cancellation of outstanding
// requests, and the list of workers whose flushing close is still under way
// (see ucx_internal.h for the files, ucx_net.h for the design).
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <vector>

#include "core/log.h"
#include "transports/ucx/ucx_internal.h"

namespace tide {
namespace ucx {
namespace {

// A healthy endpoint's flushing close completes only once the peer's worker
// answers, and the peer may itself be waiting in a close (each process
// closes its send comm, then its recv comm: two processes closing at once
// would wait on each other). So a close that does not finish at once parks
// the worker here; it is progressed by later net calls of any thread
// (sweepClosing) and destroyed when its close completes.
struct Closing {
  ucp_worker_h worker;
  std::vector<void*> reqs;  // the endpoints' close requests still under way
  std::chrono::steady_clock::time_point since;
};

// Frees the finished requests of `reqs`; true when none is left.
bool reapCloses(std::vector<void*>* reqs) {
  for (size_t i = 0; i < reqs->size();) {
    if (ucp_request_check_status((*reqs)[i]) == UCS_INPROGRESS) {
      ++i;
      continue;
    }
    ucp_request_free((*reqs)[i]);
    (*reqs)[i] = reqs->back();
    reqs->pop_back();
  }
  return reqs->empty();
}

std::mutex gClosingMu;
std::vector<Closing>* gClosing = new std::vector<Closing>;  // never destroyed (see Global)
std::atomic<int> gClosingCount{0};  // gClosing->size(), read without the lock
constexpr auto kCloseLinger = std::chrono::milliseconds(2);
constexpr auto kCloseGiveUp = std::chrono::seconds(30);

}  // namespace

// Progresses the workers parked by destroyComm; destroys those whose close
// finished. A worker whose close never finishes (peer vanished mid-close) is
// left alone after kCloseGiveUp: destroying it under UCX's feet is unsafe.
// Non-blocking: skips when another thread sweeps.
void sweepClosing() {
  if (gClosingCount.load(std::memory_order_relaxed) == 0) return;
  std::unique_lock<std::mutex> lock(gClosingMu, std::try_to_lock);
  if (!lock.owns_lock() || gClosing->empty()) return;
  auto now = std::chrono::steady_clock::now();
  for (size_t i = 0; i < gClosing->size();) {
    Closing& k = (*gClosing)[i];
    for (int j = 0; j < 64 && ucp_worker_progress(k.worker) != 0; ++j) {
    }
    bool finished = reapCloses(&k.reqs);
    if (!finished && now - k.since < kCloseGiveUp) {
      ++i;
      continue;
    }
    for (void* req : k.reqs) ucp_request_free(req);
    if (finished) {
      ucp_worker_destroy(k.worker);
    } else {
      TIDE_INFO("ucx net: endpoint close did not finish in %lld s; leaking its worker",
                static_cast<long long>(kCloseGiveUp.count()));
    }
    k = gClosing->back();
    gClosing->pop_back();
  }
  gClosingCount.store(static_cast<int>(gClosing->size()), std::memory_order_relaxed);
}

// Closes the endpoint and frees the comm. A healthy, idle comm flushes (its
// last sends reach the peer): done within kCloseLinger or parked (above).
// A busy or broken one is force-closed (bounded), which completes
// outstanding sends with an error; receives are cancelled.
void destroyComm(UcxComm* c) {
  sweepClosing();
  bool busy = !c->live.empty() || c->flushReq;
  for (int i = 0; i < kMaxStreams; ++i) {
    busy = busy || c->helloSend[i] || c->helloRecv[i];
    if (c->helloRecv[i]) ucp_request_cancel(c->worker, c->helloRecv[i]);
  }
  for (UcxRequest* r : c->live) {
    for (int i = 0; i < r->n; ++i) {
      for (int k = 0; k < kMaxStreams; ++k) {
        if (r->ucx[i][k] && !r->isSend) ucp_request_cancel(c->worker, r->ucx[i][k]);
      }
    }
  }
  bool leak = false;
  std::vector<void*> reqs;
  bool force = busy || c->err != tideSuccess || c->peerGone;
  for (ucp_ep_h ep : c->eps) {
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    ucs_status_ptr_t req = ucp_ep_close_nbx(ep, &p);
    if (UCS_PTR_IS_PTR(req)) reqs.push_back(req);
  }
  c->eps.clear();
  if (!reqs.empty()) {
    auto until =
        std::chrono::steady_clock::now() + (force ? std::chrono::milliseconds(2000) : kCloseLinger);
    while (!reapCloses(&reqs) && std::chrono::steady_clock::now() < until) {
      if (ucp_worker_progress(c->worker) == 0 && force) usleep(50);
    }
    if (!reqs.empty() && force) {
      // A forced close that does not finish: keep the worker rather than
      // destroy it under UCX's feet.
      for (void* req : reqs) ucp_request_free(req);
      reqs.clear();
      TIDE_INFO("ucx net: forced endpoint close did not finish; leaking its worker");
      leak = true;
    }
  }
  for (UcxRequest* r : c->live) {
    for (int i = 0; i < r->n; ++i) {
      for (int k = 0; k < kMaxStreams; ++k) {
        if (r->ucx[i][k]) ucp_request_free(r->ucx[i][k]);
      }
    }
    delete r;
  }
  c->live.clear();
  for (int i = 0; i < kMaxStreams; ++i) {
    if (c->helloSend[i]) ucp_request_free(c->helloSend[i]);
    if (c->helloRecv[i]) ucp_request_free(c->helloRecv[i]);
  }
  if (c->flushReq) ucp_request_free(c->flushReq);
  if (!reqs.empty()) {
    std::lock_guard<std::mutex> lock(gClosingMu);
    gClosing->push_back({c->worker, std::move(reqs), std::chrono::steady_clock::now()});
    gClosingCount.store(static_cast<int>(gClosing->size()), std::memory_order_relaxed);
  } else if (c->worker && !leak) {
    ucp_worker_destroy(c->worker);
  }
  if (c->epfd >= 0) close(c->epfd);
  if (c->evfd >= 0) close(c->evfd);
  delete c;
}

}  // namespace ucx
}  // namespace tide
