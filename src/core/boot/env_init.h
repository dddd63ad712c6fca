// tideCommInitFromEnv: rank, size and meeting point from a launcher's
// environment (tiderun, torchrun, Open MPI / PMIx, Slurm).
//
// The parsing is a pure function of an environment lookup so it can be tested
// without setenv; initFromEnvironment() runs it on the process environment and
// then meets the other ranks (master address, PMIx or a rendezvous file).
#pragma once

#include <functional>
#include <string>

#include "core/socket.h"
#include "core/status.h"
#include "tide/tide.h"

namespace tide {

// Returns the value of an environment variable, or nullptr when it is unset.
// Must stay valid until the next call.
using EnvLookup = std::function<const char*(const char* name)>;

// EnvLookup over the process environment (getenv).
EnvLookup processEnvironment();

enum class Launcher { None, Tiderun, Torchrun, OpenMpi, Slurm };
const char* launcherName(Launcher l);

// How the ranks of a job find the bootstrap root.
enum class MeetingPoint {
  Private,  // one rank: a private root on 127.0.0.1, port chosen by the OS
  Master,   // a root at masterAddr:masterPort, started by rank 0
  Pmix,     // rank 0 publishes the unique id through PMIx
  File,     // rank 0 writes the unique id to rdzvFile, the others wait for it
};
const char* meetingPointName(MeetingPoint m);

struct LaunchInfo {
  Launcher launcher = Launcher::None;
  int rank = 0;
  int size = 1;        // -1: unknown yet (PMIx-only launch: asked from PMIx)
  int localRank = -1;  // -1: unknown
  int localSize = -1;  // -1: unknown
  MeetingPoint meet = MeetingPoint::Private;
  std::string masterAddr;       // Master
  int masterPort = -1;          // Master
  std::string rdzvFile;         // File
  bool removeRdzvFile = false;  // File: rank 0 removes it once init is done
  int timeoutSeconds = 600;     // TIDE_TIMEOUT; <= 0: no deadline

  // True when the job may span several nodes (local size unknown or smaller
  // than the world size).
  bool multiNode() const { return size < 0 || localSize < 0 || localSize < size; }
};

// Decides rank, size and meeting point. `pmixAvailable`: the library was
// built with PMIx (the environment must also name a PMIx namespace).
// tideInvalidArgument with a message naming the variable for malformed or
// inconsistent values, tideInvalidUsage when no meeting point can be found.
Status parseLaunchEnvironment(const EnvLookup& env, bool pmixAvailable, LaunchInfo* out);

// The per-job file used by single-node MPI/Slurm jobs when neither PMIx nor
// TIDE_RDZV_FILE is available: /tmp/tide-rdzv-<uid>-<job>; "" when the
// environment names no job.
std::string defaultRendezvousFile(const EnvLookup& env);

// Policy for an unauthenticated bootstrap: fine on one node, a warning (once
// per process) across nodes, tideInvalidUsage when TIDE_REQUIRE_AUTH is set.
Status checkAuthPolicy(bool authenticated, bool multiNode, bool requireAuth);

// Rendezvous-file exchange. Write: to path + ".tmp.<pid>" (mode 0600), then
// rename() onto path. Read: polls until the file exists (spin-free: sleeps
// 1-50 ms between tries), refuses files owned by another user or writable by
// others; tideTimeout when the deadline passes.
Status writeRendezvousFile(const std::string& path, const tideUniqueId& id);
Status readRendezvousFile(const std::string& path, Deadline deadline, tideUniqueId* id);

// Implemented in pmix_rdzv.cc, which is built (and called) only with PMIx.
// Initializes PMIx, fills *rank/*size from it, and exchanges the unique id:
// on rank 0 `makeId` builds it and it is published; the others receive it.
// Bounded by timeoutSeconds (<= 0: none). Finalizes PMIx before returning.
Status pmixExchangeUniqueId(const std::function<Status(tideUniqueId*)>& makeId, int timeoutSeconds,
                            int* rank, int* size, tideUniqueId* id);

// tideCommInitFromEnv's logic: blocks until every rank of the job has joined
// (or the bootstrap times out).
Status initFromEnvironment(tideComm_t* comm);

}  // namespace tide
