// Internal to the socket net (transports/socket): what socket_setup.cc
// (devices, listen/connect/accept) shares with socket_net.cc (comms, data).
#pragma once

#include <vector>

#include "tide/net.h"

namespace tide {
namespace socknet {

constexpr int kMaxSocks = 64;
constexpr int kMaxThreads = 16;

struct Comm;

// Logs (INFO), leaves the detail for netStatus(), returns `code`.
tideResult_t fail(tideResult_t code, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void closeFd(int& fd);
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

tideResult_t netInit(tideNetLogger_t logger);
tideResult_t netDevices(int* n);
tideResult_t netGetProperties(int dev, tideNetProperties_v1_t* p);
tideResult_t netListen(int dev, void* handle, void** listenComm);
tideResult_t netConnect(int dev, void* handle, void** sendComm);
tideResult_t netAccept(void* listenComm, void** recvComm);
tideResult_t netCloseListen(void* listenComm);

}  // namespace socknet
}  // namespace tide
