// The UCX net (include/tide/net.h over UCP tag matching), registered as the
// built-in "ucx". Declared here for the unit tests. Files: ucx_internal.h.
//
// Design:
//  - One ucp_context per process (created by init(), features TAG + WAKEUP,
//    shared by all workers). One ucp_worker per comm (send or recv): calls on
//    one comm are serialized by the caller (net.h), so workers run in
//    UCS_THREAD_MODE_SERIALIZED without locks and comms used by different
//    threads never contend.
//  - Connection set-up goes through a small TCP side channel because UCX
//    worker addresses do not fit the 128-byte handle: listen() opens a
//    non-blocking TCP listener on the interface chosen by TIDE_SOCKET_IFNAME
//    (NCCL syntax; default: the first interface that is up and not loopback,
//    else loopback) and the handle holds its address and a random nonce.
//    connect() sends {nonce, streams offered, stripe unit, its worker's
//    address}; accept() answers with the agreed streams and unit and its recv
//    comm's worker address; both sides then create endpoints with
//    UCP_ERR_HANDLING_MODE_PEER (NONE where the transports lack it) and
//    exchange a synchronous tagged hello (sequence 0) over each, then flush
//    their workers, so UCX's wire-up (the peers' endpoint ids) is complete
//    before the comm is handed out (ucx_setup.cc says why). The side channel
//    stays open as a liveness signal.
//  - Messages: ucp_tag_send_nbx / ucp_tag_recv_nbx with tag = (user tag << 32)
//    | piece count | stripe | 24-bit per-comm sequence number (ucx_internal.h),
//    so the k-th send matches the k-th receive. A send larger than the
//    receive fails it (tideInvalidUsage).
//  - Striping (TIDE_UCX_NSTREAMS > 1, agreed at set-up with the stripe unit):
//    a comm has several endpoints (own TCP connections under tcp) on its one
//    worker; a message of more than one unit is sent as up to nstreams pieces,
//    piece k on endpoint k; the receiver posts one receive per piece its
//    buffer could hold, learns the sender's piece count from the first piece
//    to arrive and cancels the unused ones.
//  - Eager below TIDE_UCX_TCP_RNDV_THRESH when UCX_TLS is tcp (or tcp,self):
//    sets UCX_RNDV_THRESH unless the user did.
//  - Progress: test() calls ucp_worker_progress (no helper thread).
//    getPollFd() returns an epoll fd over the worker's event fd plus an
//    eventfd of ours; the worker is armed after a run of idle test() calls,
//    and when arming finds events pending our eventfd is signalled so a
//    poller never sleeps through them.
//  - Endpoint keepalive is off unless UCX_KEEPALIVE_INTERVAL is set: UCX
//    1.13 can crash in its keepalive progress when a peer closes while a
//    tcp lane still connects; the side channel notices dead peers instead.
//  - Peer failure: an endpoint error callback marks a send comm broken at
//    once; a recv comm after kPeerGoneGrace without progress (messages the
//    peer sent before closing are still received). Outstanding and later
//    requests then fail with tideRemoteError naming the UCX status.
//  - Close: busy or broken comms are force-closed; a healthy comm's flushing
//    close that does not finish within 2 ms parks its worker, which later
//    net calls progress and destroy (ucx_close.cc).
//  - UCX's tcp receive segment defaults to TIDE_UCX_TCP_SEG_SIZE (512 KiB).
//  - regMr: a process-wide MrCache (transports/common/mr_cache.h) of ucp_mem_map
//    registrations, bounded by TIDE_UCX_MR_CACHE_ENTRIES; the memory handle
//    is passed to the tag operations.
#pragma once

#include <cstdint>

#include "tide/net.h"

namespace tide {

extern const tideNet_v1_t kUcxNet;

// What listen() writes into the handle (the rest of the 128 bytes is the
// connector's state, see net.h).
struct UcxHandle {
  uint32_t magic;
  uint16_t family;  // AF_INET or AF_INET6
  uint16_t port;    // host order
  uint8_t addr[16];
  uint64_t nonce;
};
constexpr uint32_t kUcxHandleMagic = 0x55435831;  // "UCX1"
constexpr size_t kUcxStateOffset = 64;            // connector state pointer in the handle

}  // namespace tide
