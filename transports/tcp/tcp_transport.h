// The TCP transport: works between any two ranks that can reach each other's
// SetupContext::localAddress(); lowest priority (shm and self win where they
// apply). Registered from tcp_transport.cc; declared here for unit tests.
//
// Connection setup (connect(), collective over all ranks):
//   1. A rank with a higher-ranked peer listens on localAddress():0.
//   2. allGather of one fixed-size record per rank: its listen address or none.
//   3. For each peer p < me (ascending), for each channel: connect to p and
//      answer p's challenge. Then accept the connections of peers p > me.
//      Dependencies only point to lower ranks, so this cannot deadlock.
// Handshake per socket: the acceptor sends a random nonce; the connector
// sends a Hello {magic, version, ranks, channel, its own nonce, proof}, where
// proof = connectionProof(secret, "tide-tcp-data", acceptor nonce, Hello
// fields + resourcePrefix()); the acceptor checks it in constant time and that
// the (rank, channel) is expected and new, then answers with an Ack proving
// the secret over the connector's nonce. Anything else is closed and ignored;
// the acceptor keeps accepting until the deadline (timeoutSeconds()).
#pragma once

#include <memory>
#include <vector>

#include "core/transport.h"

namespace tide {

class TcpTransport final : public Transport {
 public:
  const char* name() const override { return "tcp"; }
  int priority() const override { return 1; }
  bool canConnect(const PeerInfo& me, const PeerInfo& peer) const override {
    return me.rank != peer.rank;
  }
  // Blocking, bounded by ctx.timeoutSeconds() and ctx.abortFlag().
  Status connect(SetupContext& ctx, const std::vector<int>& peers,
                 std::vector<std::unique_ptr<Connection>>* out) override;
};

}  // namespace tide
