// Bootstrap: how the ranks of a communicator find each other.
//
// Each rank connects to the root named in the unique id, proves the job
// secret (challenge-response, core/auth.h) and announces its own listening
// address; once all nranks have arrived the root sends everyone the address
// table and exits. Ranks then form a ring of authenticated TCP connections
// (connect to rank+1, accept from rank-1) used for the setup collectives
// (allGather, barrier) of communicator creation.
//
// Not thread-safe: one thread uses a Bootstrap at a time. Every wait is
// bounded by the timeout and polls the abort flag.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "core/socket.h"
#include "core/status.h"
#include "core/unique_id.h"

namespace tide {

// Fixed-size portable form of a socket address.
struct WireAddr {
  uint16_t family = 0;
  uint16_t port = 0;
  uint8_t addr[16] = {};
};

class Bootstrap {
 public:
  static Status create(const UniqueIdData& id, int rank, int nranks, int timeoutSec,
                       const std::atomic<bool>* abortFlag, std::unique_ptr<Bootstrap>* out);

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  // `all` holds nranks blocks of `bytes`; block rank() is this rank's input.
  Status allGather(void* all, size_t bytes);
  Status barrier();
  // The address this rank used to reach the root (text, no port), or the
  // TIDE_SOCKET_IFNAME interface's address when that knob is set.
  const std::string& localAddress() const { return localAddress_; }
  // Bootstrap listening address of rank r (from the root's table); invalid
  // when r is out of range.
  SockAddr rankAddress(int r) const;
  // Shrink: turns this rank's listening socket (its address is
  // rankAddress(rank())) into the bootstrap root of a new communicator with
  // `id`'s secret, so survivors that know the old table can reach it without
  // any other exchange. Connections already queued on it are served. Once per
  // Bootstrap (the listener moves into the root): tideInvalidUsage after.
  Status startRootOnListener(const UniqueIdData& id);

 private:
  Bootstrap() = default;
  // One ring step: sends `bytes` to next while receiving `bytes` from prev,
  // as frames of `type` (kGather or kBarrier).
  Status exchange(const void* sbuf, void* rbuf, size_t bytes, uint8_t type);
  Status allGatherTyped(void* all, size_t bytes, uint8_t type);

  int rank_ = 0;
  int nranks_ = 1;
  int timeoutSec_ = 0;
  const std::atomic<bool>* abort_ = nullptr;
  std::string localAddress_;
  Socket listener_;              // kept open for shrink (see startRootOnListener)
  std::vector<WireAddr> table_;  // every rank's listening address
  Socket next_;                  // to rank + 1
  Socket prev_;                  // from rank - 1
};

// ---- Wire format shared by the root and the ranks --------------------------------

WireAddr toWire(const SockAddr& a);
SockAddr fromWire(const WireAddr& w);

// When TIDE_SOCKET_IFNAME (syntax: core/if_filter.h) is set, replaces *addr
// with the first address of an up interface it selects (of `family` when
// there is one; no link-local v6); tideInvalidArgument when none matches.
// Leaves *addr alone when unset.
Status interfaceAddress(int family, SockAddr* addr);

// Starts a bootstrap root (as startBootstrapRoot) on an already listening
// socket instead of binding a new one; `id.root` is not used.
Status startBootstrapRootOn(Socket listener, const UniqueIdData& id);

// Bootstrap protocol version, carried in every frame header
// (core/boot/bootstrap_frame.h). 2: typed frames; 1: fixed structs, no header.
constexpr uint16_t kBootVersion = 2;

}  // namespace tide
