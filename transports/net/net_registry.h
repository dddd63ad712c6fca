// Registry of built-in nets (include/tide/net.h) and the plugin loader.
//
// Built-in nets (transports/socket, transports/ucx, transports/ib) register
// their tideNet_v1_t from a static initializer:
//
//   TIDE_ON_LOAD(::tide::registerNet(&kSocketNet));
//
// The "net" transport (transports/net/net_transport.cc) and the exported
// tideNetGet() pick one with selectNet(). Registration order does not matter.
// Thread-safe after library load.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "tide/net.h"

namespace tide {

// Does not take ownership: `net` must outlive the library (a static).
// A second net with the same name replaces the first (with a warning).
void registerNet(const tideNet_v1_t* net);
// Names of the registered built-in nets, in registration order.
std::vector<std::string> registeredNetNames();

// Returns a ready (init()ed with netLogger) net:
//   name non-empty: the built-in of that name, else a plugin of that name or
//   path (TIDE_NET_PLUGIN rules: "X" -> libtide-net-X.so, '/' -> path).
//   name empty: TIDE_NET if set; else a plugin from TIDE_NET_PLUGIN if set;
//   else ib (or ucx when built) when /sys/class/infiniband has entries, else
//   socket.
// Errors: unknown name (tideInvalidArgument, listing what exists), plugin
// not loadable or without the tideNetPlugin_v1 symbol (tideSystemError),
// init() failure or zero devices (its code, with a clear message).
// Loaded plugins stay loaded for the life of the process. Thread-safe.
Status selectNet(const std::string& name, const tideNet_v1_t** out);

// The logger handed to every net's init(): forwards to core/log.h.
void netLogger(int level, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));

// Built-in nets may leave a human-readable reason for the error they are
// about to return (thread-local; the next netStatus() on this thread
// consumes it).
void setNetErrorDetail(const std::string& detail);
// Converts a net's tideResult_t into a Status with context ("socket: isend")
// and the detail left by setNetErrorDetail, if any.
Status netStatus(tideResult_t r, const char* netName, const char* what);

}  // namespace tide
