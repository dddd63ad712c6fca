// The one interface-name filter (TIDE_SOCKET_IFNAME / NCCL_SOCKET_IFNAME
// syntax), used by the bootstrap, tideCommInitFromEnv and every net:
// comma-separated name prefixes ("eth,ib"); a leading '^' excludes the listed
// names ("^docker,virbr"); a leading '=' (after any '^') makes the items exact
// names ("=eth0", "^=eth0"). Empty items are ignored; an empty filter (or one
// with no items) matches nothing, "^" alone everything. Pure.
#pragma once

#include <string>

namespace tide {

bool interfaceNameMatches(const std::string& filter, const std::string& name);

}  // namespace tide
