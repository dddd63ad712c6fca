// tideCommShrink (see shrink.h).
#include "core/comm/shrink.h"

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "core/boot/bootstrap.h"
#include "core/comm.h"
#include "core/log.h"

namespace tide {

Status validateExcludeList(const int* excludeRanks, int nExclude, int nranks) {
  if (nExclude < 0) return invalidArgument("nExclude %d is negative", nExclude);
  if (nExclude > 0 && excludeRanks == nullptr)
    return invalidArgument("excludeRanks is NULL with nExclude %d", nExclude);
  if (nExclude >= nranks)
    return invalidArgument("nExclude %d leaves no rank of %d", nExclude, nranks);
  std::vector<bool> seen(static_cast<size_t>(nranks), false);
  for (int i = 0; i < nExclude; ++i) {
    int r = excludeRanks[i];
    if (r < 0 || r >= nranks)
      return invalidArgument("excludeRanks[%d] = %d not in [0, %d)", i, r, nranks);
    if (seen[r]) return invalidArgument("rank %d is listed twice in excludeRanks", r);
    seen[r] = true;
  }
  return Status::Ok();
}

namespace {

// Waits (bounded) until only the shrink call itself uses `comm`.
Status abortPending(tideComm* comm) {
  comm->abortFlag.store(true);
  comm->bell->ring();
  comm->execCv.notify_all();
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (comm->users.load() > 1) {
    if (std::chrono::steady_clock::now() > until)
      return internalError("pending work on comm %08x did not stop within 10 s of the abort",
                           static_cast<unsigned>(comm->commHash));
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  return Status::Ok();
}

}  // namespace

Status shrinkCommunicator(tideComm* comm, const int* excludeRanks, int nExclude, tideComm** newcomm,
                          const tideConfig_t* config, int flags) {
  *newcomm = nullptr;
  if (flags & ~TIDE_SHRINK_ABORT) return invalidArgument("unknown shrink flags 0x%x", flags);
  if (comm->initState.load() != tideSuccess) return invalidUsage("communicator is not initialized");
  TIDE_TRY(validateExcludeList(excludeRanks, nExclude, comm->nranks));
  if (flags & TIDE_SHRINK_ABORT) {
    TIDE_TRY(abortPending(comm));
    // Nothing can use the data connections any more (the abort flag fails
    // every new call): close them now, so peers still blocked on this rank
    // see it leave instead of waiting for their timeout. The bootstrap stays.
    comm->bell = &comm->privateBell;
    comm->owned.clear();
    comm->conns.assign(comm->conns.size(), nullptr);
  } else {
    std::lock_guard<std::mutex> lock(comm->execMu);
    if (comm->doneTicket.load() < comm->nextTicket)
      return invalidUsage(
          "communicator has %llu pending operation(s); wait for them or pass "
          "TIDE_SHRINK_ABORT",
          static_cast<unsigned long long>(comm->nextTicket - comm->doneTicket.load()));
  }
  std::vector<bool> excluded(static_cast<size_t>(comm->nranks), false);
  for (int i = 0; i < nExclude; ++i) excluded[excludeRanks[i]] = true;
  if (excluded[comm->rank]) return Status::Ok();
  std::vector<int> survivors;
  for (int r = 0; r < comm->nranks; ++r) {
    if (!excluded[r]) survivors.push_back(r);
  }
  const int leader = survivors.front();
  int newRank = 0;
  while (survivors[newRank] != comm->rank) ++newRank;

  UniqueIdData nid;
  memcpy(nid.secret, comm->id.secret, kSecretBytes);
  nid.authenticated = comm->id.authenticated;
  nid.rank0StartsRoot = false;
  if (comm->nranks > 1) {
    if (!comm->bootstrap) return invalidUsage("communicator has no bootstrap");
    nid.root = comm->bootstrap->rankAddress(leader);
    if (!nid.root.valid())
      return internalError("no bootstrap address for rank %d of comm %08x", leader,
                           static_cast<unsigned>(comm->commHash));
    if (leader == comm->rank) TIDE_TRY(comm->bootstrap->startRootOnListener(nid));
  } else {
    TIDE_TRY(resolveAddress("127.0.0.1", 0, &nid.root));
    TIDE_TRY(startBootstrapRoot(&nid));
  }
  TIDE_INFO("shrink of comm %08x: rank %d becomes %d of %zu (leader: old rank %d)",
            static_cast<unsigned>(comm->commHash), comm->rank, newRank, survivors.size(), leader);

  return startChild(comm, config, nid, static_cast<int>(survivors.size()), newRank,
                    "tideCommShrink", newcomm);
}

}  // namespace tide
