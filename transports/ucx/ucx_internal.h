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
#include "transports/common/mr_cache.h"

namespace tide {
namespace ucx {

constexpr int kMaxRecvs = 8;
// Endpoints (each its own TCP connection over UCX's tcp) one comm stripes a
// message over; the tag layout below holds at most this many.
constexpr int kMaxStreams = 16;
// Data tag: user tag (32 bits) | sender's piece count - 1 (4) | stripe (4) |
// sequence (24). Receives mask out the piece count, which the receiver
// learns from any piece's sender tag.
constexpr int kSeqBits = 24;
constexpr uint32_t kSeqMask = (uint32_t{1} << kSeqBits) - 1;
constexpr int kStripeShift = kSeqBits;
constexpr int kPiecesShift = kSeqBits + 4;
constexpr uint64_t kPiecesMask = uint64_t{0xf} << kPiecesShift;
// Stripe layout of a message of S bytes over n streams with unit U (both
// agreed at set-up): piece k < n-1 is bytes [kU, (k+1)U), the last piece the
// rest; only the pieces that hold bytes are sent (at least one). Any receive
// at least as large as the message lays its pieces out the same way. (UCX
// 1.13 moves iov pieces far slower than contiguous ones, hence not cyclic.)
constexpr size_t kMinStripeUnit = 64 << 10;
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
  std::vector<ucp_ep_h> eps;       // one per stream; eps[0] carries the handshake's first hello
  int nstreams = 1;                // agreed with the peer at set-up
  size_t unit = 0;                 // stripe unit, agreed likewise
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
  // One hello each way per stream (every endpoint learns its peer's id).
  void* helloSend[ucx::kMaxStreams] = {};  // UCX requests; null when none or freed
  void* helloRecv[ucx::kMaxStreams] = {};
  void* flushReq = nullptr;            // worker flush ending the handshake
  int helloSends = 0, helloRecvs = 0;  // completed
  bool flushed = false;
  uint64_t helloOut = 0, helloIn[ucx::kMaxStreams] = {};
};

// One isend or irecv: message i (of n) is sent or received as pieces
// [i][0..pieces[i]) over streams 0..pieces[i]-1; a receive learns the
// sender's piece count from the first piece to complete and cancels the rest.
struct UcxRequest {
  UcxComm* comm = nullptr;
  int n = 0;
  bool isSend = false;
  int pieces[ucx::kMaxRecvs] = {};
  int got[ucx::kMaxRecvs] = {};     // pieces completed
  bool known[ucx::kMaxRecvs] = {};  // receive: sender's piece count learnt
  void* ucx[ucx::kMaxRecvs][ucx::kMaxStreams] = {};
  bool done[ucx::kMaxRecvs][ucx::kMaxStreams] = {};
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

// Next data sequence number after `seq` (24 bits; skips 0, the handshake's).
inline uint32_t nextSeq(uint32_t seq) { return ((seq + 1) & kSeqMask) == 0 ? 1 : seq + 1; }

// Streams a comm may use (TIDE_UCX_NSTREAMS, 1..kMaxStreams). The connector
// offers its value; the acceptor takes the smaller of that and its own.
int configuredStreams();

// Stripe unit a connector offers: TIDE_NET_CHUNKSIZE / streams (4 KiB
// aligned, at least kMinStripeUnit), so the net transport's chunks split evenly.
size_t configuredUnit(int streams);

// True when the endpoint's lanes use UCX's tcp transport (from ucp_ep_print_info).
bool epUsesTcp(ucp_ep_h ep);

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
