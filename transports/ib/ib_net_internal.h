// The verbs net ("ib", include/tide/net.h over RC queue pairs): shared
// declarations of ib_net.cc (init, devices, table), ib_conn.cc (listen,
// connect, accept, comm set-up and teardown) and ib_data.cc (registration,
// isend/irecv/test, poll fd). The protocol is described in ib_logic.h; the
// set-up wire formats in ib_wire.h.
//
// Set-up: listen() opens a TCP side channel on the interface TIDE_SOCKET_IFNAME
// picks (transports/common/net_devices.h, as for the socket net) and writes its
// address and a random nonce into the handle. The connector (the sending side)
// creates its QPs (INIT, receive WRs for CTS posted) and CTS FIFO and sends an
// IbConnInfo; the acceptor checks the nonce, creates its QPs, posts its receive
// WRs, moves them to RTR and RTS and answers with its own IbConnInfo; the
// connector moves its QPs to RTR and RTS and sends one "ready" byte, after
// which the acceptor returns the comm (so no CTS is written before the
// connector's QPs can take it). Both sides are non-blocking state machines.
//
// Liveness: the side-channel socket stays open for the comm's life. When it
// closes (the peer closed its comm or died), requests not finished after a
// 1 s grace fail with tideRemoteError; failed work completions (retry
// exceeded, flush, ...) fail the comm at once (ibCompletionError).
//
// Waiting: each comm has its own CQ with a completion channel. getPollFd()
// returns an epoll fd over that channel and the side channel. test() arms the
// CQ when it finds nothing to do, so a caller that sleeps in poll() wakes on
// the next completion (data, CTS grant, send acknowledgement) or peer close.
//
// Threading (net.h): calls on one comm are serialized by the caller; devices
// and their MR caches are shared by all comms and are thread-safe.
//
// UNVERIFIED ON HARDWARE (see docs/net_fabric.md).
#pragma once

#include <chrono>
#include <deque>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/status.h"
#include "tide/net.h"
#include "transports/common/mr_cache.h"
#include "transports/ib/ib_engine.h"
#include "transports/ib/ib_logic.h"
#include "transports/ib/ib_verbs.h"
#include "transports/ib/ib_wire.h"

namespace tide {
namespace ibnet {

constexpr int kMaxWrsPerMsg = 16;           // WRs per QP per message (ibWrBytes)
constexpr size_t kMaxRequests = 1024;       // live requests per comm; more: "retry later"
constexpr double kCloseGraceSeconds = 1.0;  // after the side channel closed
constexpr int kSetupSeconds = 30;           // an accepted side channel must finish by then
constexpr size_t kMaxMessage = size_t{1} << 30;

// One opened port: context, PD and the registration cache (lazily opened,
// lives until the process exits).
struct Device {
  int pid = 0;  // the process that opened it (a forked child reopens)
  IbDevice* dev = nullptr;
  std::unique_ptr<MrCache> cache;
};
// The device for net device `dev` (opens it on first use). Thread-safe.
Status getDevice(int dev, Device** out);
int numDevices();
const IbPortInfo& portInfo(int dev);

struct Comm;

// A memory registration handed out by regMr (or made for a request).
struct Mr {
  Device* dev = nullptr;
  const MrCache::Entry* entry = nullptr;  // host memory through the cache
  ibv_mr* direct = nullptr;               // device memory: registered directly
  bool device = false;                    // GPU memory (peer memory or dma-buf)
  uint32_t lkey = 0, rkey = 0;
};

struct Request {
  Comm* comm = nullptr;
  bool send = false;
  IbMsg msg;
  Mr mr;  // registration this request made (none: empty buffer or the caller's mhandle)
};

// IbPoster over the comm's QPs (inline data when it fits).
class VerbsPoster : public IbPoster {
 public:
  explicit VerbsPoster(Comm* c) : c_(c) {}
  Status write(int qp, uint64_t wrId, const void* local, uint32_t lkey, size_t len, uint64_t remote,
               uint32_t rkey, bool withImm, uint32_t imm, bool signaled) override;
  Status recv(int qp, uint64_t wrId) override;

 private:
  Comm* c_;
};

struct Comm {
  bool send = false;
  int devIndex = 0;
  Device* dev = nullptr;
  int nqps = 1;
  int sqDepth = 0, rqDepth = 0, wrsPerMsg = kMaxWrsPerMsg, inlineBytes = 0;
  IbCq cq;
  std::vector<ibv_qp*> qps;
  std::vector<uint32_t> psn;
  int sock = -1;     // side channel
  int epfd = -1;     // getPollFd
  std::string peer;  // for messages: "<address> (device:port, local QPN ...)"
  IbConnFsm fsm;
  // CTS memory: sender: the FIFO the receiver writes; receiver: staging
  // entries its grant writes are sent from.
  CtsEntry* cts = nullptr;
  ibv_mr* ctsMr = nullptr;
  std::unique_ptr<VerbsPoster> poster;
  std::unique_ptr<IbSender> sender;      // send comms
  std::unique_ptr<IbReceiver> receiver;  // receive comms
  std::set<Request*> live;
  // lkeys of device-memory registrations made by regMr on this comm: data
  // from them is never sent inline (the CPU cannot read GPU memory).
  std::vector<uint32_t> deviceLkeys;
  Status err;  // first failure; the comm is broken when !err.ok()
  bool peerClosed = false;
  std::chrono::steady_clock::time_point peerClosedAt;
  bool armed = false;
};

// Creates a comm's CQ, QPs (INIT), CTS memory and receive WRs on `dev`.
Status createComm(bool send, int dev, int nqps, Comm** out);
// RTR + RTS with the peer's connection info; fills the CTS peer fields.
Status connectComm(Comm* c, const IbConnInfo& peer);
// Our connection info for the peer.
void localInfo(const Comm& c, uint64_t nonce, IbConnInfo* out);
// Frees everything; outstanding requests are cancelled and freed.
void destroyComm(Comm* c);

// Records the message of a failing call for netStatus (setNetErrorDetail)
// and the log; returns its code.
tideResult_t fail(const Status& s);

// ---- Table entries (ib_conn.cc) ------------------------------------------------
tideResult_t netListen(int dev, void* handle, void** listenComm);
tideResult_t netConnect(int dev, void* handle, void** sendComm);
tideResult_t netAccept(void* listenComm, void** recvComm);
tideResult_t netCloseListen(void* listenComm);
tideResult_t netClose(void* comm);

// ---- Table entries (ib_data.cc) ------------------------------------------------
tideResult_t netRegMr(void* comm, void* data, size_t size, int type, void** mhandle);
tideResult_t netDeregMr(void* comm, void* mhandle);
tideResult_t netIsend(void* sendComm, const void* data, size_t size, int tag, void* mhandle,
                      void** request);
tideResult_t netIrecv(void* recvComm, int n, void** data, const size_t* sizes, const int* tags,
                      void** mhandles, void** request);
tideResult_t netTest(void* request, int* done, size_t* sizes);
tideResult_t netGetPollFd(void* comm, int* fd);
// Frees a request (releases its registration). Used by test and close.
void freeRequest(Request* r);

}  // namespace ibnet
}  // namespace tide
