// The bootstrap root: a short-lived background thread that collects every
// rank's listening address and hands out the table.
#include <ifaddrs.h>
#include <net/if.h>

#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "core/bootstrap.h"
#include "core/config.h"
#include "core/log.h"

namespace tide {

namespace {

struct RootState {
  Socket listener;
  UniqueIdData id;
  int timeoutSec = 0;
};

void refuse(Socket& s, int32_t code) {
  s.sendAll(&code, sizeof(code), Deadline::after(1), nullptr).ok();
}

void serveRoot(std::unique_ptr<RootState> st) {
  Deadline deadline = Deadline::after(st->timeoutSec);
  int nranks = -1;
  std::vector<Socket> ranks;
  std::vector<WireAddr> table;
  int arrived = 0;
  while (nranks < 0 || arrived < nranks) {
    Socket s;
    Status rc = st->listener.accept(&s, deadline, nullptr);
    if (!rc.ok()) {
      TIDE_WARN("bootstrap root: giving up after %d of %d ranks arrived: %s", arrived, nranks,
                rc.message().c_str());
      return;
    }
    BootChallenge ch;
    if (!randomBytes(ch.nonce, sizeof(ch.nonce)).ok()) return;
    BootHello h;
    Deadline hs = Deadline::after(5);
    if (!s.sendAll(&ch, sizeof(ch), hs, nullptr).ok() ||
        !s.recvAll(&h, sizeof(h), hs, nullptr).ok()) {
      TIDE_INFO("bootstrap root: dropped a connection that did not complete the handshake");
      continue;
    }
    int32_t ctx[2] = {h.rank, h.nranks};
    Digest want = connectionProof(st->id.secret, "tide-bootstrap-root", ch.nonce, ctx, sizeof(ctx));
    if (h.magic != kBootMagic || h.version != kBootVersion ||
        (st->id.authenticated && !constantTimeEqual(want.data(), h.proof, want.size()))) {
      TIDE_WARN("bootstrap root: rejected a connection with a bad magic, version or proof");
      continue;
    }
    if (nranks < 0) {
      if (h.nranks <= 0 || h.nranks > (1 << 20)) {
        refuse(s, 3);
        continue;
      }
      nranks = h.nranks;
      ranks.resize(nranks);
      table.resize(nranks);
    }
    if (h.nranks != nranks) {
      refuse(s, 1);
      continue;
    }
    if (h.rank < 0 || h.rank >= nranks) {
      refuse(s, 3);
      continue;
    }
    if (ranks[h.rank].valid()) {
      refuse(s, 2);
      continue;
    }
    table[h.rank] = h.listen;
    ranks[h.rank] = std::move(s);
    ++arrived;
  }
  int32_t ok = 0;
  for (int r = 0; r < nranks; ++r) {
    Status s1 = ranks[r].sendAll(&ok, sizeof(ok), deadline, nullptr);
    Status s2 = s1.ok() ? ranks[r].sendAll(table.data(), table.size() * sizeof(WireAddr),
                                           deadline, nullptr)
                        : s1;
    if (!s2.ok()) TIDE_WARN("bootstrap root: rank %d went away: %s", r, s2.message().c_str());
  }
}

}  // namespace

Status startBootstrapRoot(UniqueIdData* data) {
  auto st = std::make_unique<RootState>();
  TIDE_TRY(Socket::listen(data->root, SOMAXCONN, &st->listener));
  TIDE_TRY(st->listener.localAddr(&data->root));
  st->id = *data;
  st->timeoutSec = static_cast<int>(knobInt(Knob::Timeout));
  TIDE_INFO("bootstrap root listening on %s", data->root.str().c_str());
  std::thread(serveRoot, std::move(st)).detach();
  return Status::Ok();
}

// Address for a root started by tideGetUniqueId: the first up, non-loopback
// IPv4 interface matching TIDE_SOCKET_IFNAME's prefix (if set), else loopback.
Status defaultRootAddress(SockAddr* out) {
  std::string want = knobString(Knob::SocketIfname);
  ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) == 0) {
    for (ifaddrs* i = ifs; i; i = i->ifa_next) {
      if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
      if (!(i->ifa_flags & IFF_UP)) continue;
      bool loop = (i->ifa_flags & IFF_LOOPBACK) != 0;
      if (want.empty() ? loop : strncmp(i->ifa_name, want.c_str(), want.size()) != 0) continue;
      memcpy(&out->ss, i->ifa_addr, sizeof(sockaddr_in));
      out->len = sizeof(sockaddr_in);
      out->setPort(0);
      freeifaddrs(ifs);
      return Status::Ok();
    }
    freeifaddrs(ifs);
  }
  return resolveAddress("127.0.0.1", 0, out);
}

}  // namespace tide
