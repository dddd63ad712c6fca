// Communicator creation, split and teardown.
#include "core/comm.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <unordered_set>

#include "core/auth.h"
#include "core/boot/bootstrap.h"
#include "core/comm/affinity.h"
#include "core/comm/probe.h"
#include "core/config.h"
#include "core/device/device_stream.h"
#include "core/issue/enqueue.h"
#include "core/log.h"
#include "core/registry.h"
#include "core/topology.h"

tideComm::tideComm() { tide::liveAdd(this); }

tideComm::~tideComm() { tide::liveRemove(this); }

void tideComm::setAsyncError(const tide::Status& s) {
  std::lock_guard<std::mutex> lock(errMu);
  if (asyncError.ok()) asyncError = s;
}

tide::Status tideComm::stickyError() {
  {
    std::lock_guard<std::mutex> lock(errMu);
    if (!asyncError.ok()) return asyncError;
  }
  // A device-side failure of the device All-Reduce engine sticks too.
  tide::Status e = tide::deviceEngineError(this);
  if (!e.ok()) setAsyncError(e);
  std::lock_guard<std::mutex> lock(errMu);
  return asyncError;
}

namespace tide {

namespace {

uint64_t hash64(const void* data, size_t len) {
  Digest d = sha256(data, len);
  uint64_t h;
  memcpy(&h, d.data(), sizeof(h));
  return h;
}

std::string hex32(uint64_t v) {
  char buf[16];
  snprintf(buf, sizeof(buf), "%08x", static_cast<unsigned>(v & 0xffffffffu));
  return buf;
}

// SetupContext over the communicator's bootstrap.
class CommSetup final : public SetupContext {
 public:
  explicit CommSetup(tideComm* c) : c_(c) {}
  int rank() const override { return c_->rank; }
  int nranks() const override { return c_->nranks; }
  const std::vector<PeerInfo>& peers() const override { return c_->peers; }
  Status allGather(const void* mine, size_t bytes, void* all) override {
    memcpy(static_cast<char*>(all) + static_cast<size_t>(c_->rank) * bytes, mine, bytes);
    return c_->bootstrap->allGather(all, bytes);
  }
  Status barrier() override { return c_->bootstrap->barrier(); }
  const uint8_t* secret() const override { return c_->id.secret; }
  std::string resourcePrefix() const override {
    std::string job = knobString(Knob::JobId);
    return "tide-" + (job.empty() ? std::string("p") : job) + "-" + hex32(c_->commHash);
  }
  uint64_t commHash() const override { return c_->commHash; }
  std::string localAddress() const override { return c_->bootstrap->localAddress(); }
  void installDoorbell(Doorbell* bell) override { c_->bell = bell; }
  Doorbell* doorbell() const override { return c_->bell; }
  const std::atomic<bool>& abortFlag() const override { return c_->abortFlag; }
  int timeoutSeconds() const override { return c_->timeoutSec; }
  const uint32_t* opTag(int channel) const override {
    return (channel >= 0 && channel < kNumChannels) ? &c_->opTag[channel] : nullptr;
  }

 private:
  tideComm* c_;
};

Status localPeerInfo(int rank, PeerInfo* info) {
  info->rank = rank;
  info->pid = getpid();
  std::string identity;
  const TopologyProvider* topo = topologyProvider();
  if (topo != nullptr) {
    TIDE_TRY(topo->nodeIdentity(&identity));
  } else {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    identity = knobIsSet(Knob::HostId) ? knobString(Knob::HostId) : host;
  }
  info->hostHash = hash64(identity.data(), identity.size());
  if (knobIsSet(Knob::P2pOneShotMax)) info->deviceOneShotMax = knobSize(Knob::P2pOneShotMax);
  snprintf(info->host, sizeof(info->host), "%s", identity.c_str());
  return Status::Ok();
}

// The facts of CommTopo every rank derives from the peers alike.
void setSharedFacts(tideComm* comm) {
  CommTopo& t = comm->topo;
  t.sameProcess = true;
  t.deviceOneShotMax = ~uint64_t{0};
  for (const PeerInfo& p : comm->peers) {
    t.sameProcess =
        t.sameProcess && p.pid == comm->peers[0].pid && p.hostHash == comm->peers[0].hostHash;
    t.deviceOneShotMax = std::min(t.deviceOneShotMax, p.deviceOneShotMax);
  }
}

Status buildTopologyFrom(tideComm* comm, const PeerInfo& me);

// Builds comm->topo (buildTopologyFrom) and its shared facts.
Status buildTopology(tideComm* comm, const PeerInfo& me) {
  Status s = buildTopologyFrom(comm, me);
  setSharedFacts(comm);
  return s;
}

// All-gathers the provider's node descriptions (variable length: sizes
// first) and builds comm->topo; falls back to the identity-only default.
Status buildTopologyFrom(tideComm* comm, const PeerInfo& me) {
  const TopologyProvider* topo = topologyProvider();
  defaultCommTopo(comm->peers, comm->rank, &comm->topo);
  if (topo == nullptr || topo->describeLocal == nullptr || topo->build == nullptr)
    return Status::Ok();
  std::string blob;
  TIDE_TRY(topo->describeLocal(me, &blob));
  const size_t n = static_cast<size_t>(comm->nranks);
  std::vector<uint64_t> sizes(n, 0);
  sizes[comm->rank] = blob.size();
  TIDE_TRY(comm->bootstrap->allGather(sizes.data(), sizeof(uint64_t)));
  uint64_t maxSize = *std::max_element(sizes.begin(), sizes.end());
  if (maxSize > (64u << 20))
    return internalError("topology description of %llu bytes",
                         static_cast<unsigned long long>(maxSize));
  std::vector<std::string> blobs(n);
  if (maxSize > 0) {
    std::vector<char> all(n * maxSize, 0);
    memcpy(all.data() + comm->rank * maxSize, blob.data(), blob.size());
    TIDE_TRY(comm->bootstrap->allGather(all.data(), maxSize));
    for (size_t r = 0; r < n; ++r) blobs[r].assign(all.data() + r * maxSize, sizes[r]);
  }
  CommTopo built;
  Status s = topo->build(blobs, comm->peers, comm->rank, &built);
  if (!s.ok()) {
    TIDE_WARN("topology provider %s failed, using node grouping only: %s", topo->name,
              s.message().c_str());
    return Status::Ok();
  }
  comm->topo = std::move(built);
  if (comm->rank == 0) TIDE_INFO("topology:\n%s", comm->topo.text.c_str());
  return Status::Ok();
}

}  // namespace

namespace {
std::mutex gLiveMu;
std::unordered_set<const tideComm*>& live() {
  static auto* set = new std::unordered_set<const tideComm*>();  // outlives static destructors
  return *set;
}
}  // namespace

void liveAdd(const tideComm* comm) {
  std::lock_guard<std::mutex> lock(gLiveMu);
  live().insert(comm);
}

void liveRemove(const tideComm* comm) {
  std::lock_guard<std::mutex> lock(gLiveMu);
  live().erase(comm);
}

bool liveHold(const std::vector<tideComm*>& comms) {
  std::lock_guard<std::mutex> lock(gLiveMu);
  for (const tideComm* c : comms) {
    if (live().count(c) == 0) return false;
  }
  for (tideComm* c : comms) c->users.fetch_add(1);
  return true;
}

Status initCommunicator(tideComm* comm, const UniqueIdData& id, int nranks, int rank) {
  // A non-blocking creator sets them before starting this thread, so that
  // tideCommUserRank/Count answer at once: no second (racing) write then.
  if (comm->rank != rank) comm->rank = rank;
  if (comm->nranks != nranks) comm->nranks = nranks;
  comm->id = id;
  tideUniqueId raw;
  encodeUniqueId(id, &raw);
  comm->commHash = hash64(raw.internal, sizeof(raw.internal));
  setLogRank(rank);

  if (id.rank0StartsRoot && rank == 0) {
    UniqueIdData rootId = id;
    TIDE_TRY(startBootstrapRoot(&rootId));
  }
  TIDE_TRY(
      Bootstrap::create(id, rank, nranks, comm->timeoutSec, &comm->abortFlag, &comm->bootstrap));

  // Who is where.
  comm->peers.assign(nranks, PeerInfo{});
  PeerInfo me;
  TIDE_TRY(localPeerInfo(rank, &me));
  comm->peers[rank] = me;
  TIDE_TRY(comm->bootstrap->allGather(comm->peers.data(), sizeof(PeerInfo)));

  // Waiting: poll (yielding) longer when every local rank has a CPU.
  int local = 0;
  for (const PeerInfo& p : comm->peers) local += (p.hostHash == me.hostHash);
  bool oversubscribed = local > allowedCpus();
  pinToLocalCpu(comm->peers, rank);
  if (comm->wait.spinUs < 0) comm->wait.spinUs = 20;
  if (comm->wait.yieldUs < 0) comm->wait.yieldUs = oversubscribed ? 500 : 2000;

  TIDE_TRY(buildTopology(comm, me));
  comm->traffic = std::make_unique<PeerTraffic[]>(static_cast<size_t>(nranks));

  // Pick a transport per peer: the highest-priority one that can connect.
  const auto& transports = registeredTransports();
  std::vector<std::vector<int>> peersOf(transports.size());
  comm->transportOf.assign(nranks, "none");
  for (int p = 0; p < nranks; ++p) {
    size_t t = 0;
    while (t < transports.size() && !transports[t]->canConnect(me, comm->peers[p])) ++t;
    if (t == transports.size())
      return internalError("no transport can connect rank %d to rank %d", rank, p);
    peersOf[t].push_back(p);
    comm->transportOf[p] = transports[t]->name();
  }
  comm->conns.assign(static_cast<size_t>(nranks) * kNumChannels, nullptr);
  CommSetup setup(comm);
  for (size_t t = 0; t < transports.size(); ++t) {
    std::vector<std::unique_ptr<Connection>> out;
    Status s = transports[t]->connect(setup, peersOf[t], &out);
    if (!s.ok()) {
      s.addFrame(__FILE__, __LINE__);
      return makeStatus(s.code(), "transport %s: %s", transports[t]->name(), s.message().c_str());
    }
    if (out.size() != peersOf[t].size() * kNumChannels)
      return internalError("transport %s built %zu connections for %zu peers",
                           transports[t]->name(), out.size(), peersOf[t].size());
    for (size_t i = 0; i < out.size(); ++i) {
      int peer = peersOf[t][i / kNumChannels];
      comm->conns[peer * kNumChannels + i % kNumChannels] = out[i].get();
      comm->owned.push_back(std::move(out[i]));
    }
  }
  TIDE_TRY(comm->bootstrap->barrier());
  TIDE_TRY(calibrateLinks(comm));
  if (LaneFactory makeLane = laneFactory()) {
    LaneParams lp;
    lp.abortFlag = &comm->abortFlag;
    lp.timeoutSec = comm->timeoutSec;
    lp.spinUs = comm->wait.spinUs;
    lp.yieldUs = comm->wait.yieldUs;
    lp.oversubscribed = oversubscribed;
    lp.traffic = comm->traffic.get();
    std::unique_ptr<Lane> lane;
    TIDE_TRY(makeLane(setup, lp, &lane));
    attachLane(comm, std::move(lane));
  }
  if (logLevel() >= LogLevel::Info) {
    std::string summary;
    for (int p = 0; p < nranks; ++p) {
      summary += " " + std::to_string(p) + ":" + comm->transportOf[p];
    }
    TIDE_INFO("comm %08x rank %d/%d on %s ready; transports%s",
              static_cast<unsigned>(comm->commHash), rank, nranks, me.host, summary.c_str());
  }
  return Status::Ok();
}

void teardownCommunicator(tideComm* comm) {
  stopDeviceStreams(comm);  // its proxy thread uses the connections
  detachLane(comm);
  comm->bell = &comm->privateBell;  // the shm doorbell dies with the connections
  comm->owned.clear();
  comm->conns.clear();
  comm->bootstrap.reset();
}

Status applyConfig(tideComm* comm, const tideConfig_t* config, bool* blocking,
                   const tideComm* parent) {
  *blocking = true;
  comm->timeoutSec = static_cast<int>(knobInt(Knob::Timeout));
  comm->chunkBytes = knobSize(Knob::ChunkSize);
  comm->wait.spinUs = static_cast<int>(knobInt(Knob::SpinUs));
  comm->wait.yieldUs = static_cast<int>(knobInt(Knob::YieldUs));
  if (config == nullptr && parent != nullptr) {
    *blocking = parent->blocking;
    comm->timeoutSec = parent->timeoutSec;
    comm->name = parent->name;
  }
  if (config != nullptr) {
    if (config->magic != TIDE_CONFIG_MAGIC)
      return invalidArgument("config was not initialised with TIDE_CONFIG_INITIALIZER");
    if (config->size < offsetof(tideConfig_t, reserved))
      return invalidArgument("config size %zu is too small", config->size);
    if (config->blocking != TIDE_CONFIG_UNDEF_INT) *blocking = config->blocking != 0;
    if (config->timeoutSeconds != TIDE_CONFIG_UNDEF_INT)
      comm->timeoutSec = config->timeoutSeconds < 0 ? 0 : config->timeoutSeconds;
    if (config->commName) comm->name = config->commName;
  }
  comm->blocking = *blocking;
  return Status::Ok();
}

Status startChild(tideComm* parent, const tideConfig_t* config, const UniqueIdData& id, int nranks,
                  int rank, const char* fn, tideComm** out) {
  *out = nullptr;
  auto* c = new tideComm();
  bool blocking = true;
  Status s = applyConfig(c, config, &blocking, parent);
  if (!s.ok()) {
    delete c;
    return s;
  }
  c->algo = parent->algo;
  if (!blocking) {
    s = startInit(c, id, nranks, rank, false, fn, out);
    setLogRank(parent->rank);
    return s;
  }
  // Blocking: listed as being created, so that an abort of the parent
  // reaches the new communicator's bootstrap (whatever the timeout).
  {
    std::lock_guard<std::mutex> lock(parent->childMu);
    parent->creating.push_back(c);
    if (parent->abortCalled) c->abortFlag.store(true);
  }
  s = initCommunicator(c, id, nranks, rank);
  bool aborted;
  {
    std::lock_guard<std::mutex> lock(parent->childMu);
    parent->creating.erase(std::find(parent->creating.begin(), parent->creating.end(), c));
    aborted = parent->abortCalled;
  }
  setLogRank(parent->rank);
  if (!s.ok()) {
    if (aborted) {
      s = remoteError("%s: the parent communicator was aborted while this one was created (%s)", fn,
                      s.message().c_str());
    }
    teardownCommunicator(c);
    delete c;
    return s;
  }
  c->initState = tideSuccess;
  *out = c;
  return Status::Ok();
}

Status startInit(tideComm* c, const UniqueIdData& id, int nranks, int rank, bool blocking,
                 const char* fn, tideComm** out) {
  *out = nullptr;
  if (!blocking) {
    c->rank = rank;  // answered by tideCommUserRank/Count while init runs
    c->nranks = nranks;
    c->initThread = std::thread([c, id, nranks, rank, fn] {
      Status st = initCommunicator(c, id, nranks, rank);
      if (!st.ok()) {
        c->setAsyncError(st);
        std::lock_guard<std::mutex> lock(c->errMu);
        c->lastError = std::string(fn) + ": " + st.message();
      }
      c->initState = st.ok() ? tideSuccess : st.code();
    });
    *out = c;
    return Status(tideInProgress, "");
  }
  Status s = initCommunicator(c, id, nranks, rank);
  if (!s.ok()) {
    teardownCommunicator(c);
    delete c;
    return s;
  }
  c->initState = tideSuccess;
  *out = c;
  return Status::Ok();
}

Status splitCommunicator(tideComm* comm, int color, int key, tideComm** newcomm,
                         const tideConfig_t* config) {
  *newcomm = nullptr;
  if (color < 0 && color != TIDE_SPLIT_NOCOLOR)
    return invalidArgument("color %d is negative (only TIDE_SPLIT_NOCOLOR may be)", color);
  struct Entry {
    int32_t color, key;
  };
  std::vector<Entry> all(comm->nranks);
  all[comm->rank] = {color, key};
  TIDE_TRY(comm->bootstrap->allGather(all.data(), sizeof(Entry)));
  std::vector<int> members;
  for (int r = 0; r < comm->nranks; ++r) {
    if (color != TIDE_SPLIT_NOCOLOR && all[r].color == color) members.push_back(r);
  }
  std::stable_sort(members.begin(), members.end(), [&](int a, int b) {
    return all[a].key != all[b].key ? all[a].key < all[b].key : a < b;
  });
  bool leader = !members.empty() && members.front() == comm->rank;
  std::vector<tideUniqueId> ids(comm->nranks);
  if (leader) {
    UniqueIdData nid;
    TIDE_TRY(resolveAddress(comm->bootstrap->localAddress(), 0, &nid.root));
    memcpy(nid.secret, comm->id.secret, kSecretBytes);
    nid.authenticated = comm->id.authenticated;
    TIDE_TRY(randomBytes(&nid.nonce, sizeof(nid.nonce)));
    TIDE_TRY(startBootstrapRoot(&nid));
    encodeUniqueId(nid, &ids[comm->rank]);
  }
  TIDE_TRY(comm->bootstrap->allGather(ids.data(), sizeof(tideUniqueId)));
  if (color == TIDE_SPLIT_NOCOLOR) return Status::Ok();
  int newRank =
      static_cast<int>(std::find(members.begin(), members.end(), comm->rank) - members.begin());
  UniqueIdData nid;
  TIDE_TRY(decodeUniqueId(ids[members.front()], &nid));
  return startChild(comm, config, nid, static_cast<int>(members.size()), newRank, "tideCommSplit",
                    newcomm);
}

}  // namespace tide

void tideComm::finishTicket(uint64_t ticket) {
  uint64_t cur = doneTicket.load();
  while (cur < ticket + 1 && !doneTicket.compare_exchange_weak(cur, ticket + 1)) {
  }
  // Pairs with waitTicket: a waiter counts itself before it reads doneTicket,
  // so it either sees the new value or is seen here (both seq_cst).
  if (ticketWaiters.load() > 0) {
    { std::lock_guard<std::mutex> lock(execMu); }
    execCv.notify_all();
  }
}

bool tideComm::waitTicket(std::unique_lock<std::mutex>& lock, uint64_t ticket,
                          std::chrono::steady_clock::time_point deadline) {
  if (doneTicket.load() >= ticket || abortFlag.load()) return false;
  ticketWaiters.fetch_add(1);
  while (doneTicket.load() < ticket && !abortFlag.load() &&
         std::chrono::steady_clock::now() < deadline) {
    execCv.wait_for(lock, std::chrono::milliseconds(100));
  }
  ticketWaiters.fetch_sub(1);
  return true;
}
