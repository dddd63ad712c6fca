// tideCommInitFromEnv: launcher detection, meeting point and rendezvous.
#include "core/boot/env_init.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "core/auth.h"
#include "core/config.h"
#include "core/if_addrs.h"
#include "core/if_filter.h"
#include "core/log.h"
#include "core/unique_id.h"
#include "tide_build_config.h"

namespace tide {

// pmix_rdzv.cc is linked only in PMIx builds; a weak reference lets this file
// ask at run time whether it is there.
Status pmixExchangeUniqueId(const std::function<Status(tideUniqueId*)>& makeId, int timeoutSeconds,
                            int* rank, int* size, tideUniqueId* id) __attribute__((weak));

namespace {

bool pmixLinked() { return TIDE_HAVE_PMIX && pmixExchangeUniqueId != nullptr; }

// Value of `name`, or nullptr when it is unset or empty.
const char* lookup(const EnvLookup& env, const char* name) {
  if (name == nullptr) return nullptr;
  const char* v = env(name);
  return (v != nullptr && v[0] != '\0') ? v : nullptr;
}

// Parses a whole decimal integer (surrounding blanks allowed).
bool parseInt(const char* text, long min, long max, int* out) {
  while (*text == ' ' || *text == '\t') ++text;
  errno = 0;
  char* end = nullptr;
  long v = std::strtol(text, &end, 10);
  if (end == text || errno != 0) return false;
  while (*end == ' ' || *end == '\t' || *end == '\n') ++end;
  if (*end != '\0' || v < min || v > max) return false;
  *out = static_cast<int>(v);
  return true;
}

// Reads an optional integer variable. *out is left alone when it is unset.
Status intVar(const EnvLookup& env, const char* name, long min, long max, int* out,
              bool* present = nullptr) {
  const char* v = lookup(env, name);
  if (present != nullptr) *present = v != nullptr;
  if (v == nullptr) return Status::Ok();
  if (!parseInt(v, min, max, out)) {
    return invalidArgument("%s='%s' is not an integer in [%ld, %ld]", name, v, min, max);
  }
  return Status::Ok();
}

constexpr long kMaxRanks = 1L << 30;

// One launcher's variable names. A launcher is chosen when its rank variable
// is set; `size == nullptr` means the size is only known from PMIx.
struct LauncherVars {
  Launcher launcher;
  const char* rank;
  const char* size;
  const char* localRank;
  const char* localSize;
};

// Slurm's local size: everything on one node, or a uniform "N(xM)" layout.
int slurmLocalSize(const EnvLookup& env, int size) {
  int nodes = 0;
  const char* n = lookup(env, "SLURM_STEP_NUM_NODES");
  if (n == nullptr) n = lookup(env, "SLURM_NNODES");
  if (n != nullptr && parseInt(n, 1, kMaxRanks, &nodes) && nodes == 1) return size;
  const char* t = lookup(env, "SLURM_STEP_TASKS_PER_NODE");
  if (t == nullptr) return -1;
  // "4" (one node) or "4(x3)" (three nodes of four); "4,2(x2)" is not uniform.
  std::string s(t);
  if (s.find(',') != std::string::npos) return -1;
  int per = 0;
  if (!parseInt(s.substr(0, s.find('(')).c_str(), 1, kMaxRanks, &per)) return -1;
  return per <= size ? per : -1;
}

Status findRanks(const EnvLookup& env, bool pmixUsable, LaunchInfo* out) {
  static const LauncherVars kLaunchers[] = {
      {Launcher::Tiderun, "TIDE_RANK", "TIDE_WORLD_SIZE", "TIDE_LOCAL_RANK",
       "TIDE_LOCAL_WORLD_SIZE"},
      {Launcher::Torchrun, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
      {Launcher::OpenMpi, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
       "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
      {Launcher::OpenMpi, "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
      {Launcher::Slurm, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", nullptr},
      // A PMIx launcher that sets nothing else: the size comes from PMIx.
      {Launcher::OpenMpi, "PMIX_RANK", nullptr, nullptr, nullptr},
  };
  for (const LauncherVars& l : kLaunchers) {
    if (lookup(env, l.rank) == nullptr) continue;
    if (l.size == nullptr && !pmixUsable) continue;
    out->launcher = l.launcher;
    TIDE_TRY(intVar(env, l.rank, 0, kMaxRanks - 1, &out->rank));
    out->size = -1;
    if (l.size != nullptr) {
      const char* sizeName = l.size;
      if (l.launcher == Launcher::Slurm && lookup(env, sizeName) == nullptr) {
        sizeName = "SLURM_NPROCS";
      }
      bool present = false;
      TIDE_TRY(intVar(env, sizeName, 1, kMaxRanks, &out->size, &present));
      if (!present) {
        return invalidArgument("%s is set but %s is not: cannot tell the world size", l.rank,
                               l.size);
      }
      if (out->rank >= out->size) {
        return invalidArgument("%s=%d is not smaller than %s=%d", l.rank, out->rank, sizeName,
                               out->size);
      }
    }
    out->localRank = -1;
    out->localSize = -1;
    TIDE_TRY(intVar(env, l.localRank, 0, kMaxRanks - 1, &out->localRank));
    if (l.localSize != nullptr) {
      TIDE_TRY(intVar(env, l.localSize, 1, kMaxRanks, &out->localSize));
    } else if (l.launcher == Launcher::Slurm) {
      out->localSize = slurmLocalSize(env, out->size);
    }
    if (out->localSize > 0 && out->size > 0 && out->localSize > out->size) {
      return invalidArgument("%s=%d is larger than the world size %d", l.localSize, out->localSize,
                             out->size);
    }
    if (out->localSize > 0 && out->localRank >= out->localSize) {
      return invalidArgument("%s=%d is not smaller than the local size %d", l.localRank,
                             out->localRank, out->localSize);
    }
    return Status::Ok();
  }
  // No launcher: a communicator of one rank.
  out->launcher = Launcher::None;
  out->rank = 0;
  out->size = 1;
  out->localRank = 0;
  out->localSize = 1;
  return Status::Ok();
}

Status findMeetingPoint(const EnvLookup& env, bool pmixUsable, LaunchInfo* out) {
  if (out->size == 1) {
    out->meet = MeetingPoint::Private;
    return Status::Ok();
  }
  if (out->size < 0) {  // only PMIx knows the size (findRanks checked it is usable)
    out->meet = MeetingPoint::Pmix;
    return Status::Ok();
  }
  int tidePort = -1;
  bool havePort = false;
  TIDE_TRY(intVar(env, "TIDE_MASTER_PORT", 1, 65535, &tidePort, &havePort));
  if (const char* addr = lookup(env, "TIDE_MASTER_ADDR")) {
    if (!havePort) return invalidArgument("TIDE_MASTER_ADDR is set but TIDE_MASTER_PORT is not");
    out->meet = MeetingPoint::Master;
    out->masterAddr = addr;
    out->masterPort = tidePort;
  } else if (const char* maddr = lookup(env, "MASTER_ADDR")) {
    int port = tidePort;
    if (!havePort) {
      // torchrun's TCPStore owns MASTER_PORT; the bootstrap root takes the next one.
      bool present = false;
      TIDE_TRY(intVar(env, "MASTER_PORT", 1, 65534, &port, &present));
      if (!present) {
        return invalidArgument(
            "MASTER_ADDR is set but neither MASTER_PORT nor TIDE_MASTER_PORT is");
      }
      ++port;
    }
    out->meet = MeetingPoint::Master;
    out->masterAddr = maddr;
    out->masterPort = port;
  } else if (out->launcher == Launcher::Tiderun || out->launcher == Launcher::Torchrun) {
    if (const char* file = lookup(env, "TIDE_RDZV_FILE")) {
      out->meet = MeetingPoint::File;
      out->rdzvFile = file;
      out->removeRdzvFile = true;
    } else {
      return invalidUsage(
          "%s environment without a meeting point: set MASTER_ADDR and "
          "MASTER_PORT (or TIDE_MASTER_ADDR and TIDE_MASTER_PORT)",
          launcherName(out->launcher));
    }
  } else if (pmixUsable) {
    out->meet = MeetingPoint::Pmix;
  } else if (const char* file = lookup(env, "TIDE_RDZV_FILE")) {
    out->meet = MeetingPoint::File;
    out->rdzvFile = file;
    out->removeRdzvFile = true;
  } else if (!out->multiNode() && !defaultRendezvousFile(env).empty()) {
    out->meet = MeetingPoint::File;
    out->rdzvFile = defaultRendezvousFile(env);
    out->removeRdzvFile = true;
  } else {
    return invalidUsage(
        "%s job of %d ranks%s without a meeting point: set TIDE_RDZV_FILE to a path on a "
        "file system every rank sees, or MASTER_ADDR/MASTER_PORT (rank 0's node)%s",
        launcherName(out->launcher), out->size, out->multiNode() ? " that may span nodes" : "",
        pmixLinked() ? "" : ", or rebuild Tide with PMIx");
  }
  return Status::Ok();
}

std::atomic<bool> gWarnedUnauthenticated{false};

// Keeps letters, digits, '.', '-' and '_' of a job name.
std::string sanitize(const std::string& s) {
  std::string r;
  for (char c : s) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '-' || c == '_';
    r += ok ? c : '_';
  }
  return r;
}

// An address of this node that other nodes can reach (for a root that must
// serve several nodes): TIDE_SOCKET_IFNAME, else the first non-loopback,
// non-container interface; IPv4 preferred. Port 0.
Status advertiseAddress(SockAddr* out) {
  std::string filter = knobString(Knob::SocketIfname);
  bool userFilter = !filter.empty();
  if (!userFilter) filter = "^lo,docker,virbr,veth";
  std::vector<NetInterface> ifs;
  TIDE_TRY(listInterfaces(&ifs));
  SockAddr v4, v6;
  for (const NetInterface& i : ifs) {
    if (!i.up()) continue;
    if (!userFilter && i.loopback()) continue;
    if (!interfaceNameMatches(filter, i.name)) continue;
    if (i.family == AF_INET6) {
      if (i.linkLocal6() || v6.valid()) continue;
      v6 = i.addr;
    } else if (!v4.valid()) {
      v4 = i.addr;
    }
  }
  if (v4.valid()) {
    *out = v4;
  } else if (v6.valid()) {
    *out = v6;
  } else {
    if (userFilter) {
      return invalidArgument("no interface matches TIDE_SOCKET_IFNAME=%s", filter.c_str());
    }
    TIDE_WARN("no non-loopback interface found; the bootstrap root listens on 127.0.0.1");
    return resolveAddress("127.0.0.1", 0, out);
  }
  out->setPort(0);
  return Status::Ok();
}

// Starts a root on `bind` (port 0: any) and encodes its id. The secret is
// TIDE_SECRET, or a random one: the id itself carries it to the other ranks.
Status makeRootId(const SockAddr& bind, tideUniqueId* id) {
  UniqueIdData d;
  d.root = bind;
  bool fromEnv = false;
  secretFromEnvironment(d.secret, &fromEnv);
  if (!fromEnv) TIDE_TRY(randomBytes(d.secret, kSecretBytes));
  d.authenticated = true;
  d.rank0StartsRoot = false;
  TIDE_TRY(startBootstrapRoot(&d));
  encodeUniqueId(d, id);
  return Status::Ok();
}

bool isLoopback(const SockAddr& a) {
  if (a.family() == AF_INET) {
    auto* in = reinterpret_cast<const sockaddr_in*>(&a.ss);
    return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
  }
  auto* in6 = reinterpret_cast<const sockaddr_in6*>(&a.ss);
  return IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
}

// Master address: rank 0 starts the root there; everyone uses the same id.
Status masterId(const LaunchInfo& info, tideUniqueId* id) {
  UniqueIdData d;
  TIDE_TRY(resolveAddress(info.masterAddr, info.masterPort, &d.root));
  secretFromEnvironment(d.secret, &d.authenticated);
  TIDE_TRY(checkAuthPolicy(d.authenticated, info.multiNode(), knobBool(Knob::RequireAuth)));
  d.rank0StartsRoot = false;
  if (info.rank == 0) {
    // A name that resolves to loopback here (Debian's 127.0.1.1 host entry)
    // may be a real address elsewhere: listen on every address then. Also
    // fall back to that when the address is not local (NAT, aliases).
    Status s = invalidUsage("it is a loopback address and the job may span nodes");
    UniqueIdData root = d;
    if (!(isLoopback(d.root) && info.multiNode())) s = startBootstrapRoot(&root);
    if (!s.ok()) {
      TIDE_INFO("bootstrap root not started on %s (%s); listening on every address instead",
                d.root.str().c_str(), s.message().c_str());
      root = d;
      TIDE_TRY(resolveAddress(d.root.family() == AF_INET6 ? "::" : "0.0.0.0", info.masterPort,
                              &root.root));
      Status w = startBootstrapRoot(&root);
      if (!w.ok()) {
        return makeStatus(w.code(), "rank 0 cannot start the bootstrap root on %s:%d: %s",
                          info.masterAddr.c_str(), info.masterPort, w.message().c_str());
      }
    }
  }
  encodeUniqueId(d, id);
  return Status::Ok();
}

}  // namespace

EnvLookup processEnvironment() {
  return [](const char* name) -> const char* { return std::getenv(name); };
}

const char* launcherName(Launcher l) {
  switch (l) {
    case Launcher::None:
      return "no launcher";
    case Launcher::Tiderun:
      return "tiderun";
    case Launcher::Torchrun:
      return "torchrun";
    case Launcher::OpenMpi:
      return "mpirun";
    case Launcher::Slurm:
      return "Slurm";
  }
  return "?";
}

const char* meetingPointName(MeetingPoint m) {
  switch (m) {
    case MeetingPoint::Private:
      return "private root";
    case MeetingPoint::Master:
      return "master address";
    case MeetingPoint::Pmix:
      return "PMIx";
    case MeetingPoint::File:
      return "rendezvous file";
  }
  return "?";
}

Status parseLaunchEnvironment(const EnvLookup& env, bool pmixAvailable, LaunchInfo* out) {
  *out = LaunchInfo();
  bool pmixUsable = pmixAvailable && lookup(env, "PMIX_NAMESPACE") != nullptr;
  TIDE_TRY(findRanks(env, pmixUsable, out));
  int timeout = 600;
  if (const char* t = lookup(env, "TIDE_TIMEOUT")) {
    if (!parseInt(t, -1, 1L << 30, &timeout)) timeout = 600;  // config warns about junk
  }
  out->timeoutSeconds = timeout;
  return findMeetingPoint(env, pmixUsable, out);
}

std::string defaultRendezvousFile(const EnvLookup& env) {
  std::string job;
  if (const char* ns = lookup(env, "PMIX_NAMESPACE")) {
    job = ns;
  } else if (const char* j = lookup(env, "OMPI_MCA_orte_ess_jobid")) {
    job = j;
  } else if (const char* j2 = lookup(env, "OMPI_MCA_ess_base_jobid")) {
    job = j2;
  } else if (const char* sj = lookup(env, "SLURM_JOB_ID")) {
    const char* step = lookup(env, "SLURM_STEP_ID");
    if (step == nullptr) step = lookup(env, "SLURM_STEPID");
    job = std::string(sj) + "." + (step != nullptr ? step : "x");
  }
  if (job.empty()) return "";
  return "/tmp/tide-rdzv-" + std::to_string(geteuid()) + "-" + sanitize(job);
}

Status checkAuthPolicy(bool authenticated, bool multiNode, bool requireAuth) {
  if (authenticated || !multiNode) return Status::Ok();
  if (requireAuth) {
    return invalidUsage(
        "bootstrap is unauthenticated and TIDE_REQUIRE_AUTH is set: "
        "set TIDE_SECRET to the same value on every rank");
  }
  if (!gWarnedUnauthenticated.exchange(true)) {
    TIDE_WARN("bootstrap is unauthenticated: set TIDE_SECRET");
  }
  return Status::Ok();
}

Status writeRendezvousFile(const std::string& path, const tideUniqueId& id) {
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return errnoError(errno, "cannot create rendezvous file %s", tmp.c_str());
  const char* p = id.internal;
  size_t left = sizeof(id.internal);
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      return errnoError(err, "cannot write rendezvous file %s", tmp.c_str());
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  ::fsync(fd);  // other nodes may read it through a network file system
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return errnoError(err, "cannot rename %s to %s", tmp.c_str(), path.c_str());
  }
  return Status::Ok();
}

Status readRendezvousFile(const std::string& path, Deadline deadline, tideUniqueId* id) {
  int sleepUs = 1000;
  for (;;) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd >= 0) {
      struct stat st {};
      if (::fstat(fd, &st) != 0) {
        int err = errno;
        ::close(fd);
        return errnoError(err, "fstat %s", path.c_str());
      }
      if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 022) != 0) {
        ::close(fd);
        return invalidUsage(
            "refusing rendezvous file %s: not a regular file of this user "
            "with mode 0600",
            path.c_str());
      }
      ssize_t n = ::pread(fd, id->internal, sizeof(id->internal), 0);
      ::close(fd);
      if (n == static_cast<ssize_t>(sizeof(id->internal))) {
        UniqueIdData d;
        Status s = decodeUniqueId(*id, &d);
        if (!s.ok()) {
          return invalidArgument("rendezvous file %s holds no Tide unique id: %s", path.c_str(),
                                 s.message().c_str());
        }
        return Status::Ok();
      }
      // Shorter: a writer that does not rename; wait for the rest.
    } else if (errno != ENOENT) {
      return errnoError(errno, "cannot open rendezvous file %s", path.c_str());
    }
    if (deadline.expired()) {
      return timeoutError("rank 0 did not write the rendezvous file %s in time (TIDE_TIMEOUT)",
                          path.c_str());
    }
    std::this_thread::sleep_for(std::chrono::microseconds(sleepUs));
    sleepUs = std::min(sleepUs * 2, 50000);
  }
}

Status initFromEnvironment(tideComm_t* comm) {
  if (comm == nullptr) return invalidArgument("tideCommInitFromEnv: comm is NULL");
  *comm = nullptr;
  LaunchInfo info;
  TIDE_TRY(parseLaunchEnvironment(processEnvironment(), pmixLinked(), &info));
  TIDE_INFO("init from environment: %s, rank %d of %d (local %d of %d), meeting via %s",
            launcherName(info.launcher), info.rank, info.size, info.localRank, info.localSize,
            meetingPointName(info.meet));
  Deadline deadline = Deadline::after(info.timeoutSeconds);
  // Where rank 0's root listens when it picks the address itself.
  auto ownRoot = [&info](tideUniqueId* id) -> Status {
    SockAddr bind;
    if (info.multiNode()) {
      TIDE_TRY(advertiseAddress(&bind));
    } else {
      TIDE_TRY(resolveAddress("127.0.0.1", 0, &bind));
    }
    return makeRootId(bind, id);
  };
  tideUniqueId id{};
  switch (info.meet) {
    case MeetingPoint::Private: {
      SockAddr lo;
      TIDE_TRY(resolveAddress("127.0.0.1", 0, &lo));
      TIDE_TRY(makeRootId(lo, &id));
      break;
    }
    case MeetingPoint::Master:
      TIDE_TRY(masterId(info, &id));
      break;
    case MeetingPoint::Pmix:
      if (!pmixLinked()) return internalError("PMIx meeting point chosen without PMIx");
      TIDE_TRY(pmixExchangeUniqueId(ownRoot, info.timeoutSeconds, &info.rank, &info.size, &id));
      break;
    case MeetingPoint::File:
      if (info.rank == 0) {
        TIDE_TRY(ownRoot(&id));
        TIDE_TRY(writeRendezvousFile(info.rdzvFile, id));
      } else {
        TIDE_TRY(readRendezvousFile(info.rdzvFile, deadline, &id));
      }
      break;
  }
  tideResult_t r = tideCommInitRank(comm, info.size, id, info.rank);
  // Every rank has read the file once rank 0's init returns (or it failed).
  if (info.meet == MeetingPoint::File && info.rank == 0 && info.removeRdzvFile) {
    ::unlink(info.rdzvFile.c_str());
  }
  if (r != tideSuccess) {
    return makeStatus(r, "tideCommInitRank (rank %d of %d, %s, via %s) failed: %s", info.rank,
                      info.size, launcherName(info.launcher), meetingPointName(info.meet),
                      tideGetLastError(nullptr));
  }
  return Status::Ok();
}

}  // namespace tide
