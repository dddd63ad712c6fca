// The communicator object behind tideComm_t.
//
// Ownership: created by tideCommInitRank*/Split, freed by Destroy/Abort.
// Connections, the bootstrap and scratch belong to it.
// Thread-safety: the API functions of one communicator are called by one
// thread at a time (NCCL's rule), except abort/asyncError/lastError which use
// the atomic and mutex-protected fields below. Work on a communicator runs in
// issue order: each job takes a ticket per communicator at issue time and
// runs only after all lower tickets are done (core/issue/enqueue.cc).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/algorithm.h"
#include "core/lane.h"
#include "core/status.h"
#include "core/topology.h"
#include "core/transport.h"
#include "core/types.h"
#include "core/unique_id.h"

namespace tide {

// Defined in core/boot/bootstrap.h; every file that creates or frees a
// communicator includes it (the owning pointer needs the whole type there).
class Bootstrap;

namespace devstream {
// The communicator's CUDA-stream state (core/device/device_stream_state.h):
// made on its first device call, stopped and freed at teardown.
struct CommState;
struct CommStateDeleter {
  void operator()(CommState* st) const;  // core/device/device_stream_proxy.cc
};
}  // namespace devstream

// Per-collective algorithm/protocol choices parsed from TIDE_ALGO/TIDE_PROTO.
struct AlgoChoice {
  const AlgorithmInfo* forced[static_cast<int>(CollType::kCount)] = {};        // host rows
  const AlgorithmInfo* forcedDevice[static_cast<int>(CollType::kCount)] = {};  // device rows
};

// ---- Communicators alive in this process ----
// Every tideComm registers itself on construction and leaves on destruction;
// freeComm (api.cc) removes it first, before waiting for its users. Lets
// tideGroupEnd check the communicators of the operations it holds without
// touching freed memory (one may have been destroyed or aborted, possibly
// by another thread, while the group was open). Thread-safe.
void liveAdd(const tideComm* comm);
void liveRemove(const tideComm* comm);
// Adds one user (tideComm::users) to each of `comms` when all are alive, and
// returns true; otherwise changes nothing and returns false.
bool liveHold(const std::vector<tideComm*>& comms);

}  // namespace tide

struct tideComm {
  // Both in core/comm/comm.cc, where the bootstrap's type is complete.
  tideComm();
  ~tideComm();
  tideComm(const tideComm&) = delete;
  tideComm& operator=(const tideComm&) = delete;

  // ---- Identity (immutable after init) ----
  int rank = 0;
  int nranks = 1;
  uint64_t commHash = 0;  // printable id for logs
  std::string name;       // config commName or ""
  bool blocking = true;   // config blocking (split/shrink with a NULL config inherit it)
  // TIDE_CHECK for this communicator (core/exec/check.h): -1 not yet read, 0 off, 1 on.
  std::atomic<int> checkMode{-1};
  tide::UniqueIdData id;  // the id it was created from (split reuses the secret)
  std::vector<tide::PeerInfo> peers;
  std::vector<const char*> transportOf;  // per peer, for logs

  // ---- Connections ----
  std::unique_ptr<tide::Bootstrap> bootstrap;
  std::vector<std::unique_ptr<tide::Connection>> owned;
  std::vector<tide::Connection*> conns;  // [peer * kNumChannels + channel]
  tide::Doorbell privateBell;
  tide::Doorbell* bell = &privateBell;
  tide::CommTopo topo;  // immutable after init
  // Per-peer payload counters (tideCommGetTraffic); nranks entries.
  std::unique_ptr<tide::PeerTraffic[]> traffic;

  // ---- Tuning (read at init) ----
  size_t chunkBytes = 256 << 10;
  int timeoutSec = 0;
  tide::WaitTuning wait;
  tide::AlgoChoice algo;

  // ---- State ----
  std::atomic<bool> abortFlag{false};
  std::atomic<int> initState{tideInProgress};  // tideSuccess once usable, or an error
  std::thread initThread;                      // non-blocking init

  // Communicators a blocking split or shrink of this one is creating right
  // now: tideCommAbort of this one aborts them too, so a creation stuck in
  // the new communicator's bootstrap (a member that never joins, no
  // timeout) returns. Guarded by childMu; entries live while listed.
  std::mutex childMu;
  std::vector<tideComm*> creating;
  bool abortCalled = false;  // tideCommAbort ran (not a shrink's TIDE_SHRINK_ABORT); childMu

  std::mutex errMu;
  tide::Status asyncError;  // sticky communication error
  std::string lastError;    // detail of the last failing call on this comm

  // Issue-order execution (see enqueue.cc).
  std::mutex execMu;
  std::condition_variable execCv;
  uint64_t nextTicket = 0;  // execMu
  // Every ticket below it is done. Read without the lock; advanced by
  // finishTicket, which takes execMu only when a thread waits on execCv.
  std::atomic<uint64_t> doneTicket{0};
  std::atomic<int> ticketWaiters{0};  // threads in a doneTicket wait on execCv
  uint64_t opCount = 0;               // sequence numbers for error messages
  uint64_t collCount = 0;             // collectives issued: the sequence number in op tags
  // Tag of the operation being executed per channel (see SetupContext::opTag);
  // written and read only by the thread executing this communicator's work.
  uint32_t opTag[tide::kNumChannels] = {};
  // Small-collective lane (core/lane.h), or null; set at the end of creation,
  // destroyed first at teardown, when no call uses the communicator.
  std::unique_ptr<tide::Lane> lane;
  // API calls and queued jobs currently using the communicator; abort waits
  // for it to drop to zero before freeing anything.
  std::atomic<int> users{0};
  // Device (CUDA-stream) state, or null until the first device call
  // (core/device/device_stream_proxy.cc stateOf/takeState). Guarded by deviceMu.
  std::mutex deviceMu;
  std::unique_ptr<tide::devstream::CommState, tide::devstream::CommStateDeleter> device;

  // Marks `ticket` done (doneTicket = max(doneTicket, ticket + 1)) and wakes
  // the threads waiting for it. Thread-safe; locks only when one waits.
  void finishTicket(uint64_t ticket);
  // Waits (execMu held in `lock`) until doneTicket > ticket - 1, the abort
  // flag is set or `deadline` passes (time_point::max(): no deadline). True
  // when it had to wait at all.
  bool waitTicket(std::unique_lock<std::mutex>& lock, uint64_t ticket,
                  std::chrono::steady_clock::time_point deadline =
                      std::chrono::steady_clock::time_point::max());

  // Records a communication error (first one sticks).
  void setAsyncError(const tide::Status& s);
  tide::Status stickyError();
};

namespace tide {

// Creates a communicator (blocking part of init). Runs on the caller's thread
// or on comm->initThread for non-blocking init.
Status initCommunicator(tideComm* comm, const UniqueIdData& id, int nranks, int rank);
// Releases everything the communicator owns (not the object itself).
void teardownCommunicator(tideComm* comm);
// tideCommSplit's collective part.
Status splitCommunicator(tideComm* comm, int color, int key, tideComm** newcomm,
                         const tideConfig_t* config);
// Applies a config (after validation) and environment knobs to a new comm.
// With a NULL config and a parent (split, shrink), the new communicator
// inherits the parent's settings (blocking, timeout, name), as NCCL's do.
Status applyConfig(tideComm* comm, const tideConfig_t* config, bool* blocking,
                   const tideComm* parent = nullptr);
// Creates a configured communicator (initCommunicator): blocking, on this
// thread (on failure `c` is torn down and freed, *out stays null); or not,
// on c->initThread (*out = c at once; returns tideInProgress; a failure is
// recorded on c for tideCommGetAsyncError, its message prefixed by `fn`).
Status startInit(tideComm* c, const UniqueIdData& id, int nranks, int rank, bool blocking,
                 const char* fn, tideComm** out);
// A split's or shrink's new communicator of `parent` (its config, or the
// parent's settings when `config` is NULL; TIDE_ALGO's choices copied), then
// startInit.
Status startChild(tideComm* parent, const tideConfig_t* config, const UniqueIdData& id, int nranks,
                  int rank, const char* fn, tideComm** out);

}  // namespace tide
