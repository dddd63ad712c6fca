// Layout of tideUniqueId and the bootstrap root.
//
// A unique id carries: a magic, the root's address, the 16-byte job secret
// (random from the OS, or derived from TIDE_SECRET; all zeros with
// `authenticated == 0`), and whether rank 0's init must start the root
// (TIDE_COMM_ID / launcher mode) or one is already running.
#pragma once

#include <cstdint>

#include "core/auth.h"
#include "core/socket.h"
#include "core/status.h"
#include "tide/tide.h"

namespace tide {

constexpr uint64_t kUniqueIdMagic = 0x7469646555494431ull;  // "tideUID1"

struct UniqueIdData {
  SockAddr root;                      // bootstrap root address
  uint8_t secret[kSecretBytes] = {};  // job secret
  bool authenticated = false;         // false: secret unset (warned about)
  bool rank0StartsRoot = false;       // true: rank 0's init starts the root at `root`
  // Random for a communicator made from another (split, shrink), so its
  // hash, and the names of its shared-memory resources, differ from any
  // other communicator's of the job even when a bootstrap root's port is
  // reused while an earlier one still sets up (0: ids every rank derives
  // alike from the environment).
  uint64_t nonce = 0;
};

void encodeUniqueId(const UniqueIdData& data, tideUniqueId* id);
// tideInvalidArgument when the magic or address is wrong.
Status decodeUniqueId(const tideUniqueId& id, UniqueIdData* data);

// Starts a bootstrap root in a background thread, listening on data.root
// (port 0 picks one; the chosen port is written back). The root serves one
// communicator creation (any nranks the first rank announces) and exits when
// done, on error, or after TIDE_TIMEOUT without progress.
Status startBootstrapRoot(UniqueIdData* data);

// Address for a root started by tideGetUniqueId: the first up, non-loopback
// IPv4 interface (matching TIDE_SOCKET_IFNAME's prefix when set), else
// loopback. Port 0.
Status defaultRootAddress(SockAddr* out);

// The secret of this job from TIDE_SECRET; authenticated=false when unset.
void secretFromEnvironment(uint8_t secret[kSecretBytes], bool* authenticated);

}  // namespace tide
