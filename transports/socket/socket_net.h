// The socket net (include/tide/net.h over TCP): pieces exposed for unit tests.
//
// A comm is TIDE_SOCKET_NTHREADS x TIDE_NSOCKS_PERTHREAD data sockets (with
// 0 threads: TIDE_NSOCKS_PERTHREAD sockets driven by the caller's test()).
// A message is cut into stripes of >= 64 KiB, spread round-robin over the
// sockets; each stripe travels as a SocketStripeHeader (little-endian wire
// form, below) plus its bytes, so every socket can be read independently and
// the receiver checks sequence, size and tag of every message. Helper
// threads sleep in poll() and report completions through an eventfd
// (getPollFd).
//
// Liveness: SO_KEEPALIVE and TCP_USER_TIMEOUT derived from TIDE_TIMEOUT, so a
// silent or partitioned peer with unacknowledged data fails the comm
// (tideRemoteError) after about TIDE_TIMEOUT seconds; a slow link that keeps
// acknowledging never does.
//
// Devices: the interfaces transports/common/net_devices.h finds for
// TIDE_SOCKET_IFNAME (and TIDE_SOCKET_FAMILY). Files: socket_devices.cc
// (init, devices, properties), socket_setup.cc (listen, connect, accept),
// socket_comm.cc (a comm's sockets, options and helper threads),
// socket_stream.cc (the per-socket send and receive state machines),
// socket_stripes.cc (stripe arithmetic, header wire form), socket_net.cc
// (isend, irecv, test, poll fd, close; the net's table). Shared
// declarations: socket_internal.h.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tide/net.h"

namespace tide {

// A stripe header in memory. On the wire it is kStripeHeaderBytes bytes, every
// field little-endian at a fixed offset, whatever the host's byte order:
//   0 magic (u32)  4 seq (u32)  8 total (u64)  16 offset (u64)  24 len (u32)
//   28 tag (i32, two's complement)
struct SocketStripeHeader {
  uint32_t magic;
  uint32_t seq;     // message number on this comm, 0, 1, 2, ...
  uint64_t total;   // bytes of the whole message
  uint64_t offset;  // of this stripe in the message
  uint32_t len;     // bytes of this stripe that follow
  int32_t tag;
};
constexpr size_t kStripeHeaderBytes = 32;
// Writes / reads the wire form (kStripeHeaderBytes bytes, no alignment needed).
void encodeStripeHeader(const SocketStripeHeader& h, uint8_t* out);
SocketStripeHeader decodeStripeHeader(const uint8_t* in);

// Stripes of a message of `total` bytes over `nsocks` sockets: count and
// size (the last one may be shorter). total 0: one empty stripe. No stripe
// exceeds 1 GiB (its length travels in 32 bits): larger messages get more
// stripes than sockets.
void socketStripes(uint64_t total, int nsocks, int* count, uint64_t* stripeBytes);

// The net itself (also registered as the built-in "socket").
extern const tideNet_v1_t kSocketNet;

}  // namespace tide
