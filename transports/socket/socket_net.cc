// The socket net: include/tide/net.h over TCP (design in socket_net.h). This
// file: the data path's entry points (isend, irecv, test, poll fd, close)
// and the net's table.
#include "transports/socket/socket_net.h"

#include <algorithm>
#include <mutex>

#include "core/registry.h"
#include "transports/net/net_registry.h"
#include "transports/socket/socket_internal.h"

namespace tide {
namespace socknet {
namespace {

// Caller-driven progress (no helper threads).
void progressInline(Comm& c) {
  if (c.nthreads > 0 || c.err.load(std::memory_order_acquire) != 0) return;
  bool moved = false;
  for (DataSock& s : c.socks) {
    if (!stepSock(c, s, &moved)) return;
  }
}

tideResult_t netRegMr(void*, void*, size_t, int type, void** mhandle) {
  static int dummy;
  if (type != TIDE_NET_PTR_HOST) return fail(tideInvalidArgument, "only host memory");
  *mhandle = &dummy;
  return tideSuccess;
}

tideResult_t netDeregMr(void*, void*) { return tideSuccess; }

tideResult_t commError(Comm& c) {
  std::lock_guard<std::mutex> g(c.mu);
  return fail(static_cast<tideResult_t>(c.err.load()), "%s", c.errMsg.c_str());
}

// Posts `r` (a new send or receive of `c`): under c.mu gives it the next
// sequence number, registers it and runs queue() to hand it to the sockets;
// then wakes the helper threads and progresses inline (a socket stalled on
// this message resumes right here). Sets *request. With kMaxRequests live
// requests already, frees r and leaves *request null: "retry later".
template <typename Queue>
tideResult_t postRequest(Comm& c, Request* r, void** request, Queue queue) {
  {
    std::lock_guard<std::mutex> g(c.mu);
    if (c.live.size() >= kMaxRequests) {
      delete r;
      return tideSuccess;
    }
    r->seq = c.nextSeq++;
    c.live.insert(r);
    queue();
  }
  if (c.nthreads > 0) wakeHelpers(c);
  progressInline(c);
  *request = r;
  return tideSuccess;
}

tideResult_t netIsend(void* sendComm, const void* data, size_t size, int tag, void*,
                      void** request) {
  auto* c = static_cast<Comm*>(sendComm);
  if (c == nullptr || !c->send || request == nullptr || (size > 0 && data == nullptr))
    return fail(tideInvalidArgument, "isend: bad arguments");
  *request = nullptr;
  if (c->err.load(std::memory_order_acquire) != 0) return commError(*c);
  auto* r = new Request;
  r->comm = c;
  r->send = true;
  r->tag = tag;
  r->buf = static_cast<uint8_t*>(const_cast<void*>(data));
  r->size = size;
  uint64_t per = 0;
  socketStripes(size, static_cast<int>(c->socks.size()), &r->nstripes, &per);
  return postRequest(*c, r, request, [&] {
    for (int i = 0; i < r->nstripes; ++i) {
      uint64_t off = per * i;
      uint32_t len = static_cast<uint32_t>(std::min<uint64_t>(per, size - off));
      c->socks[(c->rotate + i) % c->socks.size()].queue.push_back(Stripe{r, off, len});
    }
    c->rotate += r->nstripes;
  });
}

tideResult_t netIrecv(void* recvComm, int n, void** data, const size_t* sizes, const int* tags,
                      void**, void** request) {
  auto* c = static_cast<Comm*>(recvComm);
  if (c == nullptr || c->send || n != 1 || request == nullptr || data == nullptr ||
      sizes == nullptr || tags == nullptr || (sizes[0] > 0 && data[0] == nullptr))
    return fail(tideInvalidArgument, "irecv: bad arguments (n=%d; this net takes n=1)", n);
  *request = nullptr;
  if (c->err.load(std::memory_order_acquire) != 0) return commError(*c);
  auto* r = new Request;
  r->comm = c;
  r->send = false;
  r->tag = tags[0];
  r->buf = static_cast<uint8_t*>(data[0]);
  r->size = sizes[0];
  return postRequest(*c, r, request, [&] { c->posted[r->seq] = r; });
}

tideResult_t netTest(void* request, int* done, size_t* sizes) {
  auto* r = static_cast<Request*>(request);
  if (r == nullptr || done == nullptr) return fail(tideInvalidArgument, "test: null");
  Comm& c = *r->comm;
  progressInline(c);
  bool fin;
  uint64_t bytes;
  auto check = [&] {
    if (r->send) {
      fin = r->stripesDone.load(std::memory_order_acquire) == r->nstripes;
      bytes = r->size;
    } else {
      bytes = r->total.load(std::memory_order_acquire);
      fin = bytes != UINT64_MAX && r->received.load(std::memory_order_acquire) == bytes;
    }
  };
  check();
  if (!fin && c.nthreads > 0) {
    drain(c.doneFd);  // then look again: a completion after this re-arms the fd
    check();
  }
  *done = 0;
  if (!fin && c.err.load(std::memory_order_acquire) == 0) return tideSuccess;
  // The comm failed: helper threads of its other sockets may still be moving
  // a stripe of this request; stop them before it and its buffer go back.
  if (!fin) stopHelpers(c);
  {
    std::lock_guard<std::mutex> g(c.mu);
    c.live.erase(r);
    if (!r->send) c.posted.erase(r->seq);
  }
  delete r;
  if (!fin) return commError(c);
  *done = 1;
  if (sizes != nullptr) sizes[0] = bytes;
  return tideSuccess;
}

tideResult_t netGetPollFd(void* comm, int* fd) {
  auto* c = static_cast<Comm*>(comm);
  *fd = c->nthreads > 0                    ? c->doneFd
        : c->roomFd >= 0                   ? c->roomFd
        : !c->send && c->socks.size() == 1 ? c->socks[0].fd
                                           : -1;
  return tideSuccess;
}

tideResult_t netClose(void* comm) {
  if (comm != nullptr) destroyComm(static_cast<Comm*>(comm));
  return tideSuccess;
}

}  // namespace
}  // namespace socknet

using namespace socknet;  // NOLINT: the table below names this file's functions

const tideNet_v1_t kSocketNet = {
    "socket",     netInit,  netDevices, netGetProperties, netListen, netConnect,
    netAccept,    netRegMr, netDeregMr, netIsend,         netIrecv,  netTest,
    netGetPollFd, netClose, netClose,   netCloseListen,
};

TIDE_ON_LOAD(::tide::registerNet(&kSocketNet));

}  // namespace tide
