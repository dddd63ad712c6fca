// Node identity: host name plus network namespace, or TIDE_HOSTID.
//
// Ranks in different network namespaces of one machine are different nodes
// (they reach each other only over the network), so the namespace's inode
// is part of the identity.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "core/config.h"
#include "core/topology.h"
#include "topology/provider.h"

namespace tide::topo {

Status nodeIdentity(std::string* out) {
  if (knobIsSet(Knob::HostId)) {
    *out = knobString(Knob::HostId);
    return Status::Ok();
  }
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  struct stat st {};
  char ns[40] = "";
  if (stat("/proc/self/ns/net", &st) == 0) {
    snprintf(ns, sizeof(ns), "/netns:%lu", static_cast<unsigned long>(st.st_ino));
  }
  *out = std::string(host) + ns;
  return Status::Ok();
}

}  // namespace tide::topo
