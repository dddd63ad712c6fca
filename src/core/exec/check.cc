// TIDE_CHECK fingerprint exchange and comparison (see check.h).
#include "core/exec/check.h"

#include <cstring>
#include <map>
#include <mutex>
#include <unordered_map>

#include "core/algorithm.h"
#include "core/boot/bootstrap.h"
#include "core/comm.h"
#include "core/config.h"
#include "core/exec/job.h"
#include "core/log.h"
#include "core/op.h"
#include "core/types.h"

namespace tide {

namespace {

constexpr uint32_t kCheckMagic = 0x7469636bu;  // "tick"

struct CheckState {
  bool enabled = false;
  uint64_t seq = 0;  // collective jobs checked so far on this communicator
};

std::mutex gMu;
std::unordered_map<const tideComm*, CheckState> gStates;

// Fixed-size header exchanged first; the op lists follow once every rank
// agrees on their length.
struct Header {
  uint32_t magic = kCheckMagic;
  uint32_t nOps = 0;
  uint64_t seq = 0;
};

bool rooted(int32_t coll) {
  return coll == static_cast<int32_t>(CollType::Broadcast) ||
         coll == static_cast<int32_t>(CollType::Reduce);
}

bool reducing(int32_t coll) {
  return coll == static_cast<int32_t>(CollType::AllReduce) ||
         coll == static_cast<int32_t>(CollType::Reduce) ||
         coll == static_cast<int32_t>(CollType::ReduceScatter);
}

OpPrint printOf(const OpDesc& d) {
  OpPrint p;
  const CollArgs& a = d.args;
  p.coll = static_cast<int32_t>(a.type);
  p.dtype = static_cast<int32_t>(a.dtype);
  p.count = a.count;
  if (reducing(p.coll)) {
    bool avg = d.preScale != 0 || d.postDiv != 0;
    p.op = avg ? static_cast<int32_t>(tideAvg) : static_cast<int32_t>(a.op);
  }
  if (rooted(p.coll)) p.root = a.root;
  return p;
}

// "rank 0,1: 1024; rank 2: 2048" for the values vals[r] (already formatted).
std::string groupByValue(const std::vector<std::string>& vals) {
  std::map<std::string, std::string> ranks;  // value -> "0,1"
  std::vector<std::string> order;
  for (size_t r = 0; r < vals.size(); ++r) {
    auto it = ranks.find(vals[r]);
    if (it == ranks.end()) {
      ranks[vals[r]] = std::to_string(r);
      order.push_back(vals[r]);
    } else {
      it->second += "," + std::to_string(r);
    }
  }
  std::string out;
  for (const std::string& v : order) {
    if (!out.empty()) out += "; ";
    const std::string& rs = ranks[v];
    out += rs.find(',') == std::string::npos ? "rank " : "ranks ";
    out.append(rs).append(": ").append(v);
  }
  return out;
}

std::string valueText(const char* field, const OpPrint& p) {
  if (strcmp(field, "collective") == 0) return collName(static_cast<CollType>(p.coll));
  if (strcmp(field, "datatype") == 0) return dtypeName(static_cast<tideDataType_t>(p.dtype));
  if (strcmp(field, "count") == 0) return std::to_string(p.count);
  if (strcmp(field, "op") == 0)
    return p.op < 0 ? std::string("none") : opName(static_cast<tideRedOp_t>(p.op));
  return p.root < 0 ? std::string("none") : std::to_string(p.root);
}

int32_t fieldValue(const char* field, const OpPrint& p, uint64_t* wide) {
  *wide = 0;
  if (strcmp(field, "collective") == 0) return p.coll;
  if (strcmp(field, "datatype") == 0) return p.dtype;
  if (strcmp(field, "count") == 0) {
    *wide = p.count;
    return 0;
  }
  if (strcmp(field, "op") == 0) return p.op;
  return p.root;
}

}  // namespace

Status compareOpPrints(const std::vector<std::vector<OpPrint>>& prints,
                       const std::vector<uint64_t>& seqs) {
  const size_t n = prints.size();
  if (n == 0) return Status::Ok();
  auto differs = [&](auto get) {
    for (size_t r = 1; r < n; ++r) {
      if (get(r) != get(0)) return true;
    }
    return false;
  };
  std::vector<std::string> vals(n);
  if (differs([&](size_t r) { return prints[r].size(); })) {
    for (size_t r = 0; r < n; ++r) vals[r] = std::to_string(prints[r].size());
    return invalidUsage(
        "TIDE_CHECK: ranks launch different numbers of collectives together "
        "(field: collectives in the group): %s",
        groupByValue(vals).c_str());
  }
  if (differs([&](size_t r) { return seqs[r]; })) {
    for (size_t r = 0; r < n; ++r) vals[r] = std::to_string(seqs[r]);
    return invalidUsage(
        "TIDE_CHECK: ranks are at different collective calls (field: sequence): "
        "%s",
        groupByValue(vals).c_str());
  }
  static const char* const kFields[] = {"collective", "datatype", "count", "op", "root"};
  for (size_t i = 0; i < prints[0].size(); ++i) {
    for (const char* field : kFields) {
      bool diff = false;
      uint64_t w0;
      int32_t v0 = fieldValue(field, prints[0][i], &w0);
      for (size_t r = 1; r < n && !diff; ++r) {
        uint64_t w;
        int32_t v = fieldValue(field, prints[r][i], &w);
        diff = v != v0 || w != w0;
      }
      if (!diff) continue;
      for (size_t r = 0; r < n; ++r) vals[r] = valueText(field, prints[r][i]);
      std::string calls;
      for (size_t r = 0; r < n; ++r) {
        std::string c = collName(static_cast<CollType>(prints[r][i].coll));
        if (calls.find(c) == std::string::npos) calls += (calls.empty() ? "" : "/") + c;
      }
      return invalidUsage("TIDE_CHECK: mismatched %s call #%llu%s (field: %s): %s", calls.c_str(),
                          static_cast<unsigned long long>(seqs[0]),
                          prints[0].size() > 1
                              ? (" (operation " + std::to_string(i) + " of the group)").c_str()
                              : "",
                          field, groupByValue(vals).c_str());
    }
  }
  return Status::Ok();
}

void checkForget(const tideComm* comm) {
  std::lock_guard<std::mutex> lock(gMu);
  gStates.erase(comm);
}

namespace {

Status checkComm(tideComm* comm, const std::vector<OpPrint>& mine, uint64_t seq) {
  const int n = comm->nranks;
  if (n <= 1) return Status::Ok();
  if (!comm->bootstrap) return internalError("TIDE_CHECK: communicator has no bootstrap");
  std::vector<Header> heads(n);
  heads[comm->rank].nOps = static_cast<uint32_t>(mine.size());
  heads[comm->rank].seq = seq;
  TIDE_TRY(comm->bootstrap->allGather(heads.data(), sizeof(Header)));
  std::vector<std::vector<OpPrint>> prints(n);
  std::vector<uint64_t> seqs(n);
  bool sameLength = true;
  for (int r = 0; r < n; ++r) {
    if (heads[r].magic != kCheckMagic)
      return remoteError("TIDE_CHECK: rank %d sent a malformed fingerprint", r);
    sameLength &= heads[r].nOps == heads[0].nOps;
    seqs[r] = heads[r].seq;
    prints[r].resize(heads[r].nOps);  // only sizes matter until lengths agree
  }
  if (sameLength) {
    const size_t k = mine.size();
    std::vector<OpPrint> all(k * n);
    memcpy(all.data() + k * comm->rank, mine.data(), k * sizeof(OpPrint));
    TIDE_TRY(comm->bootstrap->allGather(all.data(), k * sizeof(OpPrint)));
    for (int r = 0; r < n; ++r) prints[r].assign(all.begin() + k * r, all.begin() + k * (r + 1));
  }
  return compareOpPrints(prints, seqs);
}

}  // namespace

Status checkJob(Job& job) {
  for (auto& [comm, ticket] : job.tickets) {
    // Known off (the usual case): no lock, no allocation per job.
    if (comm->checkMode.load(std::memory_order_relaxed) == 0) continue;
    std::vector<OpPrint> mine;
    for (const OpDesc& op : job.ops) {
      if (op.comm == comm && op.chained()) mine.push_back(printOf(op));
    }
    if (mine.empty()) continue;  // send/recv only
    uint64_t seq;
    {
      std::lock_guard<std::mutex> lock(gMu);
      auto it = gStates.find(comm);
      if (it == gStates.end()) {
        it = gStates.emplace(comm, CheckState{}).first;
        it->second.enabled = knobBool(Knob::Check);
        comm->checkMode.store(it->second.enabled ? 1 : 0, std::memory_order_relaxed);
      }
      if (!it->second.enabled) continue;
      seq = it->second.seq++;
    }
    Status s = checkComm(comm, mine, seq);
    if (s.ok()) continue;
    if (s.code() != tideInvalidUsage) {
      // The ring is now in an unknown state: like a data-path failure.
      s = makeStatus(s.code(), "TIDE_CHECK exchange failed on comm %08x rank %d/%d: %s",
                     static_cast<unsigned>(comm->commHash), comm->rank, comm->nranks,
                     s.message().c_str());
      comm->setAsyncError(s);
    }
    return s;
  }
  return Status::Ok();
}

namespace {

constexpr uint32_t kRootMagic = 0x746f6f72u;  // "root"

// The root confirmation (see runCollective).
struct RootNote {
  uint32_t magic;
  uint32_t tag;  // the sender's operation tag
  int32_t root;  // the sender's idea of the root
  int32_t from;
};
static_assert(sizeof(RootNote) == 16);

bool rootCheckEnabled() {
  static const bool on = knobBool(Knob::CheckRoot);  // process-wide, read once
  return on;
}

Task confirmRoot(ExecCtx& ctx, const OpDesc& op) {
  const int n = ctx.nranks();
  const int me = ctx.rank();
  const int root = ctx.args().root;
  const int c = (root + n - 1) % n;
  // Scratch, not the frame: a cancelled task's frame is freed at once, the
  // context's scratch only with the context.
  auto* note = static_cast<RootNote*>(ctx.scratch(sizeof(RootNote)));
  if (note == nullptr) co_return;
  Pending p;
  if (me == c) {
    *note = RootNote{kRootMagic, op.tag, root, me};
    p = ctx.send(root, note, sizeof(RootNote));
  } else if (me == root) {
    *note = RootNote{0, 0, -1, -1};
    p = ctx.recv(c, note, sizeof(RootNote));
  }
  co_await op.algo->run(ctx);
  co_await ctx.wait(p);
  if (me != root || !ctx.error().ok()) co_return;
  const char* what = collName(op.args.type);
  const auto seq = static_cast<unsigned long long>(op.seq);
  if (note->magic != kRootMagic) {
    ctx.setError(invalidUsage(
        "mismatched %s #%llu (field: root, or another): rank %d sent this root (rank %d) data "
        "where its root confirmation was due: ranks disagree on the root or the call",
        what, seq, c, me));
  } else if (note->root != root || note->from != c) {
    ctx.setError(invalidUsage(
        "mismatched %s #%llu (field: root): rank %d uses root %d, this rank (%d) uses root %d",
        what, seq, c, note->root, me, root));
  } else if (note->tag != op.tag) {
    ctx.setError(invalidUsage(
        "mismatched %s #%llu (field: root, or count/datatype/op/sequence): rank %d confirmed "
        "operation tag %08x, this root has %08x",
        what, seq, c, static_cast<unsigned>(note->tag), static_cast<unsigned>(op.tag)));
  }
}

}  // namespace

Task runCollective(ExecCtx& ctx, const OpDesc& op) {
  const CollType t = op.args.type;
  if ((t != CollType::Broadcast && t != CollType::Reduce) || ctx.nranks() < 2 ||
      !rootCheckEnabled()) {
    return op.algo->run(ctx);
  }
  return confirmRoot(ctx, op);
}

uint32_t opTagOf(uint64_t collSeq, int coll, uint64_t count, int dtype, int op, int root) {
  // The fields packed into four 64-bit words, each folded into the state by
  // a bijective step (xor, multiply by an odd constant, xorshift): for fixed
  // other fields, different values of one field give different 64-bit states,
  // so only the final fold to 32 bits can collide. A few cycles per word
  // instead of a multiply per byte; 0 is reserved for "unchecked".
  constexpr uint64_t kMul = 0x9e3779b97f4a7c15ull;
  auto step = [](uint64_t h, uint64_t w) {
    h = (h ^ w) * kMul;
    return h ^ (h >> 29);
  };
  auto pair = [](int lo, int hi) {
    return static_cast<uint64_t>(static_cast<uint32_t>(lo)) |
           static_cast<uint64_t>(static_cast<uint32_t>(hi)) << 32;
  };
  uint64_t h = 0x243f6a8885a308d3ull;
  h = step(h, collSeq);
  h = step(h, count);
  h = step(h, pair(coll, dtype));
  h = step(h, pair(op, root));
  h *= 0xbf58476d1ce4e5b9ull;
  const uint32_t t = static_cast<uint32_t>(h ^ (h >> 32));
  return t == 0 ? 1u : t;
}

}  // namespace tide
