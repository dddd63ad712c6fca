// Internal to the socket net (transports/socket): what its files share (the
// file list is in socket_net.h): a comm and its data sockets, and the
// functions one file provides to another.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tide/net.h"
#include "transports/common/net_devices.h"
#include "transports/socket/socket_net.h"

namespace tide {
namespace socknet {

constexpr int kMaxSocks = 64;
constexpr int kMaxThreads = 16;
constexpr uint32_t kStripeMagic = 0x534f4344;
constexpr size_t kMaxRequests = 1024;  // per comm; more: "retry later"
constexpr size_t kHdr = kStripeHeaderBytes;

struct Comm;

struct Request {
  Comm* comm;
  bool send;
  uint32_t seq;
  int tag;
  uint8_t* buf;
  uint64_t size;     // send: bytes; recv: capacity
  int nstripes = 0;  // send
  std::atomic<int> stripesDone{0};
  std::atomic<uint64_t> total{UINT64_MAX};  // recv: set by the first stripe header
  std::atomic<uint64_t> received{0};
};

struct Stripe {
  Request* req;
  uint64_t offset;
  uint32_t len;
};

// One data socket. Queue under Comm::mu; the rest belongs to its owner (the
// helper thread that drives it, or the caller's thread without threads).
struct DataSock {
  int fd = -1;
  std::deque<Stripe> queue;  // send side
  bool active = false;       // send: cur is being written
  Stripe cur{};
  SocketStripeHeader hdr{};
  uint8_t wire[kHdr] = {};  // hdr as it travels (encodeStripeHeader)
  size_t done = 0;          // send: header + payload bytes written; recv: payload bytes read
  size_t hdrGot = 0;
  Request* rreq = nullptr;
  bool stalled = false;  // recv: header read, its receive not posted yet
  bool eof = false;      // recv: the peer closed this socket between stripes
};

struct Comm {
  bool send = false;
  std::vector<DataSock> socks;
  int nthreads = 0;
  std::vector<std::thread> threads;
  std::vector<int> wakeFds;  // one per thread
  int doneFd = -1;           // eventfd: a request advanced or the comm failed
  int roomFd = -1;  // no threads, one sending socket: epoll fd, readable when it is writable
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::set<Request*> live;              // every request not yet freed
  std::map<uint32_t, Request*> posted;  // recv: by sequence number
  uint32_t nextSeq = 0;
  size_t rotate = 0;
  std::atomic<int> err{0};
  std::string errMsg;
  std::atomic<size_t> eofs{0};  // sockets that reached end of stream

  // The first error sticks (logged, doneFd notified).
  void setError(tideResult_t code, const std::string& msg);
};

// ---- socket_comm.cc: comms, socket options, helper threads -------------------------

// Logs (INFO), leaves the detail for netStatus(), returns `code`.
tideResult_t fail(tideResult_t code, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void closeFd(int& fd);
// Signals / empties an eventfd (fd < 0: nothing).
void notify(int fd);
void drain(int fd);
// Helper threads per connection: TIDE_SOCKET_NTHREADS, or when it is -1 (the
// default) 1 on machines with at least 4 online CPUs and 0 below that (a
// helper thread then competes with the ranks for a core). Always 0 or 1 in
// the automatic case, so both ends open the same number of data sockets
// (0 and 1 thread both give TIDE_NSOCKS_PERTHREAD sockets) even when their
// machines differ.
int socketThreads();
// SO_SNDBUF/SO_RCVBUF from TIDE_SOCKET_BUFSIZE.
void setBuffers(int fd);
// Takes connected sockets (cleared from `fds`), configures them (no Nagle,
// keep-alive, TCP_USER_TIMEOUT) and starts the helper threads.
tideResult_t makeComm(bool send, std::vector<int>& fds, Comm** out);
void wakeHelpers(Comm& c);
// Stops and joins the helper threads (idempotent; not from a helper). After
// it no thread but the caller's touches a request or a user buffer.
void stopHelpers(Comm& c);
// Closes every fd of a comm and frees it with its requests.
void destroyComm(Comm* c);

// ---- socket_stream.cc: one data socket's state machine -----------------------------

// Moves data on one socket of `c` (sending or receiving as the comm does)
// until it would block; *moved when a byte moved. False when the comm failed.
bool stepSock(Comm& c, DataSock& s, bool* moved);

// ---- socket_devices.cc / socket_setup.cc: the net's entry points -------------------

// Device `dev` of init(); null when there is no such device.
const NetDevice* socketDevice(int dev);

tideResult_t netInit(tideNetLogger_t logger);
tideResult_t netDevices(int* n);
tideResult_t netGetProperties(int dev, tideNetProperties_v1_t* p);
tideResult_t netListen(int dev, void* handle, void** listenComm);
tideResult_t netConnect(int dev, void* handle, void** sendComm);
tideResult_t netAccept(void* listenComm, void** recvComm);
tideResult_t netCloseListen(void* listenComm);

}  // namespace socknet
}  // namespace tide
