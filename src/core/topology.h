// Topology interface owned by the core. The topology/ folder registers a
// provider; the core asks it who this rank's node is.
#pragma once

#include <string>

#include "core/status.h"

namespace tide {

struct TopologyProvider {
  const char* name;
  // Printable identity of the node this process runs on. Ranks with equal
  // identities share memory. Honours TIDE_HOSTID.
  Status (*nodeIdentity)(std::string* out);
};

void registerTopologyProvider(const TopologyProvider* provider);
const TopologyProvider* topologyProvider();  // null when none registered

}  // namespace tide
