// Internals shared by the UCX net's files (design and contracts: ucx_net.h):
//   ucx_context.cc  the process-wide UCP context: init, devices, getProperties
//   ucx_setup.cc    comms: workers, endpoints, the TCP side channel, the
//                   set-up handshake, listen/connect/accept
//   ucx_close.cc    closing comms (and parking workers whose close lingers)
//   ucx_data.cc     memory registration and the data path (isend, irecv,
//                   test, getPollFd) and the net's table
#pragma once

#include <ucp/api/ucp.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/socket.h"
#include "tide/net.h"
#include "transports/ib/mr_cache.h"

namespace tide {
namespace ucx {

constexpr int kMaxRecvs = 8;
constexpr int kIdleBeforeArm = 32;  // idle test() calls before the worker is armed
// After the side channel closes, data the peer flushed before closing may
// still be in flight: requests fail only when this much time passed.
constexpr auto kPeerGoneGrace = std::chrono::milliseconds(1000);
// Tag of the set-up handshake message (sequence number 0, which data
// messages never use: their sequence skips 0 when it wraps).
constexpr uint64_t kHelloTag = uint64_t{0x48454c4f} << 32;

// ---- Process-wide state (ucx_context.cc) ---------------------------------------------

struct Global {
  std::mutex mu;
  bool inited = false;
  tideResult_t initResult = tideSuccess;
  ucp_context_h ctx = nullptr;
  bool wakeup = false;
  std::unique_ptr<MrCache> mrs;
  std::string ifname;  // side-channel interface
  SockAddr ifaddr;     // its address (port 0)
  std::string devName;
};

// The one instance; never destroyed (comms may outlive static destructors).
Global& global();

// Logs "ucx net: <message>" as a WARN line and returns `code`.
tideResult_t fail(tideResult_t code, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace ucx

// ---- Comms (ucx_setup.cc creates and destroys them) -----------------------------------

struct UcxRequest;

struct UcxComm {
  bool isSend = false;
  ucp_worker_h worker = nullptr;
  ucp_ep_h ep = nullptr;
  tideResult_t err = tideSuccess;  // sticky; set by the endpoint error callback
  std::string errMsg;
  uint32_t seq = 1;  // next data message's sequence number (never 0)
  int epfd = -1;
  int evfd = -1;
  int idle = 0;
  bool armed = false;
  std::vector<UcxRequest*> live;  // outstanding requests, cancelled at close
  // The side-channel socket stays open as a liveness signal: the kernel
  // closes it when the peer process dies, which UCX's shared-memory
  // transports (no peer-failure support in 1.13) would never report.
  Socket side;
  bool peerMode = false;  // UCP_ERR_HANDLING_MODE_PEER accepted by the transports
  std::chrono::steady_clock::time_point peerGoneAt{};
  bool peerGone = false;
  // Set-up handshake (ucx_setup.cc): one small tagged message each way over
  // the endpoints, so every lane is connected before the comm is handed out.
  void* helloSend = nullptr;  // UCX requests; null when none or freed
  void* helloRecv = nullptr;
  void* flushReq = nullptr;  // worker flush ending the handshake
  bool helloSent = false, helloGot = false, flushed = false;
  uint64_t helloOut = 0, helloIn = 0;
};

struct UcxRequest {
  UcxComm* comm = nullptr;
  int n = 0;
  bool isSend = false;
  void* ucx[ucx::kMaxRecvs] = {};
  bool done[ucx::kMaxRecvs] = {};
  size_t sizes[ucx::kMaxRecvs] = {};
};

namespace ucx {

// Peeks at the side channel; marks the peer gone when it closed (ucx_setup.cc).
void checkSide(UcxComm* c);

// Progresses workers whose endpoint close is still under way, destroys
// those done (ucx_close.cc). Non-blocking; any thread.
void sweepClosing();

// Closes the comm's endpoint (cancelling or failing outstanding requests)
// and frees the comm; bounded (ucx_close.cc). The caller owns `c`.
void destroyComm(UcxComm* c);

// Next data sequence number after `seq` (skips 0, the handshake's).
inline uint32_t nextSeq(uint32_t seq) { return seq + 1 == 0 ? 1 : seq + 1; }

// The net's functions (include/tide/net.h), by file.
tideResult_t ucxInit(tideNetLogger_t logger);
tideResult_t ucxDevices(int* ndev);
tideResult_t ucxGetProperties(int dev, tideNetProperties_v1_t* props);
tideResult_t ucxListen(int dev, void* handle, void** listenComm);
tideResult_t ucxConnect(int dev, void* handle, void** sendComm);
tideResult_t ucxAccept(void* listenComm, void** recvComm);
tideResult_t ucxCloseListen(void* listenComm);
tideResult_t ucxCloseComm(void* comm);

}  // namespace ucx
}  // namespace tide
