// Pairwise-exchange AlltoAll: every transfer is posted at once, so each pair
// of ranks moves its block concurrently over its own pipe. And "direct"
// AllGather, ReduceScatter, Broadcast and All-Reduce for ranks of one node:
// every rank exchanges with every peer in one step instead of relaying round
// a ring. Over the shm transport's single-copy path each block is copied
// once, by its receiver, straight out of the sender's buffer, so relaying
// buys nothing and costs n-2 extra steps.
#include <algorithm>
#include <vector>

#include "algorithms/patterns/cost.h"
#include "algorithms/patterns/patterns.h"
#include "core/algorithm.h"
#include "core/registry.h"

namespace tide {

namespace {

Task pairwiseAlltoAll(ExecCtx& ctx) {
  const CollArgs a = ctx.args();
  const int n = ctx.nranks();
  const int r = ctx.rank();
  const size_t block = a.count * a.elemSize;
  const char* in = static_cast<const char*>(a.sendbuff);
  char* out = static_cast<char*>(a.recvbuff);
  if (n == 1 || block == 0) {
    ctx.copy(out + r * block, in + r * block, block);
    co_return;
  }
  if (in == out) {
    // In place (nccl-tests and NCCL programs pass one buffer): the blocks to
    // send are copied aside first, since received blocks overwrite them.
    char* copy = static_cast<char*>(ctx.scratch(block * static_cast<size_t>(n)));
    if (copy == nullptr) co_return;
    ctx.copy(copy, in, block * static_cast<size_t>(n));
    in = copy;
  } else {
    ctx.copy(out + r * block, in + r * block, block);
  }
  const pattern::Pairwise pw{r, n};
  std::vector<Pending> all;
  for (int s = 1; s < n; ++s) {
    int to = pw.sendPeer(s), from = pw.recvPeer(s);
    all.push_back(ctx.send(to, in + to * block, block));
    all.push_back(ctx.recv(from, out + from * block, block));
  }
  co_await ctx.waitAll(all);
}

// All transfers at once: each rank's intra-node blocks share its memory
// link, each node's outgoing inter-node blocks share its network link.
double predictPairwise(const CollArgs& a, const CommTopo& t, size_t /*chunkBytes*/) {
  const int n = std::max(t.nranks, 1);
  const double block = static_cast<double>(a.count) * static_cast<double>(a.elemSize);
  if (n == 1 || block == 0) return block / 1e4;
  double intraUs = 0, interUs = 0;
  for (int node = 0; node < std::max(t.nnodes, 1); ++node) {
    const double k = node < static_cast<int>(t.nodeRanks.size())
                         ? static_cast<double>(t.nodeRanks[node].size())
                         : static_cast<double>(n);
    if (k > 1) intraUs = std::max(intraUs, pattern::linkUs(t.intraNode, (k - 1) * block));
    if (n - k > 0) interUs = std::max(interUs, pattern::linkUs(t.interNode, k * (n - k) * block));
  }
  return std::max(intraUs, interUs);
}

// ---- Direct (one node) ----------------------------------------------------------------

// Sends `bytes` at `buf + p * stride` to every peer p (stride 0: the same
// buffer to all), appending the transfers to *ps.
void sendToAll(ExecCtx& ctx, const char* buf, size_t stride, size_t bytes,
               std::vector<Pending>* ps) {
  const int n = ctx.nranks(), r = ctx.rank();
  for (int s = 1; s < n; ++s) {
    const int p = (r + s) % n;
    ps->push_back(ctx.send(p, buf + static_cast<size_t>(p) * stride, bytes));
  }
}

Task directAllGather(ExecCtx& ctx) {
  const CollArgs a = ctx.args();
  const int n = ctx.nranks(), r = ctx.rank();
  const size_t seg = a.count * a.elemSize;
  char* out = static_cast<char*>(a.recvbuff);
  std::vector<Pending> all;
  if (n > 1 && seg > 0) {
    sendToAll(ctx, static_cast<const char*>(a.sendbuff), 0, seg, &all);
    for (int s = 1; s < n; ++s) {
      const int p = (r - s + n) % n;
      all.push_back(ctx.recv(p, out + static_cast<size_t>(p) * seg, seg));
    }
  }
  ctx.copy(out + static_cast<size_t>(r) * seg, a.sendbuff, seg);
  co_await ctx.waitAll(all);
}

// Reduces this rank's block of every peer's input into recvbuff, one peer
// after the other (each reduction reads the previous one's output).
Task directReduceScatter(ExecCtx& ctx) {
  const CollArgs a = ctx.args();
  const int n = ctx.nranks(), r = ctx.rank();
  const size_t seg = a.count * a.elemSize;
  const char* in = static_cast<const char*>(a.sendbuff);
  char* out = static_cast<char*>(a.recvbuff);
  const char* mine = in + static_cast<size_t>(r) * seg;
  if (n == 1 || seg == 0) {
    ctx.copy(out, mine, seg);
    co_return;
  }
  std::vector<Pending> sends;
  sendToAll(ctx, in, seg, seg, &sends);
  for (int s = 1; s < n; ++s) {
    const int p = (r - s + n) % n;
    Pending pr = ctx.recvReduce(p, out, s == 1 ? mine : out, seg);
    co_await ctx.wait(pr);
  }
  co_await ctx.waitAll(sends);
}

Task directBroadcast(ExecCtx& ctx) {
  const CollArgs a = ctx.args();
  const size_t bytes = a.count * a.elemSize;
  char* out = static_cast<char*>(a.recvbuff);
  std::vector<Pending> all;
  if (ctx.rank() == a.root) {
    if (ctx.nranks() > 1 && bytes > 0) {
      sendToAll(ctx, static_cast<const char*>(a.sendbuff), 0, bytes, &all);
    }
    ctx.copy(out, a.sendbuff, bytes);
  } else if (bytes > 0) {
    all.push_back(ctx.recv(a.root, out, bytes));
  }
  co_await ctx.waitAll(all);
}

// Reduce-scatter then all-gather, both direct; rank k owns block k.
Task directAllReduce(ExecCtx& ctx) {
  const CollArgs a = ctx.args();
  const int n = ctx.nranks(), r = ctx.rank();
  const size_t es = a.elemSize;
  const char* in = static_cast<const char*>(a.sendbuff);
  char* out = static_cast<char*>(a.recvbuff);
  if (n == 1 || a.count == 0) {
    ctx.copy(out, in, a.count * es);
    co_return;
  }
  auto off = [&](int k) { return pattern::partBegin(a.count, n, k) * es; };
  auto len = [&](int k) { return pattern::partLen(a.count, n, k) * es; };
  std::vector<Pending> sends;
  for (int s = 1; s < n; ++s) {
    const int p = (r + s) % n;
    sends.push_back(ctx.send(p, in + off(p), len(p)));
  }
  for (int s = 1; s < n; ++s) {
    const int p = (r - s + n) % n;
    Pending pr = ctx.recvReduce(p, out + off(r), s == 1 ? in + off(r) : out + off(r), len(r));
    co_await ctx.wait(pr);
  }
  for (int s = 1; s < n; ++s) {
    const int p = (r + s) % n;
    sends.push_back(ctx.send(p, out + off(r), len(r)));
  }
  std::vector<Pending> recvs;
  for (int s = 1; s < n; ++s) {
    const int p = (r - s + n) % n;
    recvs.push_back(ctx.recv(p, out + off(p), len(p)));
  }
  co_await ctx.waitAll(recvs);
  co_await ctx.waitAll(sends);
}

Task runDirect(ExecCtx& ctx) {
  switch (ctx.args().type) {
    case CollType::AllGather:
      return directAllGather(ctx);
    case CollType::ReduceScatter:
      return directReduceScatter(ctx);
    case CollType::Broadcast:
      return directBroadcast(ctx);
    case CollType::AllReduce:
      return directAllReduce(ctx);
    default:
      return Task();
  }
}

// Messages of at least this size go single-copy by default (TIDE_SHM_CMA_MIN);
// below it the FIFO's two copies make relaying and one-shot schemes as good,
// and the small-message algorithms (oneshot, rhd) are tuned for latency.
constexpr size_t kDirectMinMessage = 64u << 10;

bool supportsDirect(const CollArgs& a, int nranks) {
  if (nranks < 2) return true;
  const size_t bytes = a.count * a.elemSize;
  const size_t message = a.type == CollType::AllReduce ? bytes / nranks : bytes;
  return message >= kDirectMinMessage;
}

// One node only. Each rank's n-1 transfers share its memory link; issuing
// them costs a fraction of a latency each beyond the first.
double predictDirect(const CollArgs& a, const CommTopo& t, size_t /*chunkBytes*/) {
  const int n = std::max(t.nranks, 1);
  const double bytes = static_cast<double>(a.count) * static_cast<double>(a.elemSize);
  if (n == 1 || bytes == 0) return bytes / 1e4;
  if (t.nnodes > 1) return 1e30;
  const LinkCost& l = t.intraNode;
  const double issueUs = l.latencyUs * (1 + 0.5 * (n - 2));
  switch (a.type) {
    case CollType::AllGather:
      return issueUs + pattern::wireUs(l, (n - 1) * bytes);
    case CollType::ReduceScatter:
      return issueUs + (n - 2) * l.latencyUs + pattern::wireUs(l, (n - 1) * bytes) +
             pattern::reduceUs(t, (n - 1) * bytes);
    case CollType::Broadcast:
      return issueUs + pattern::wireUs(l, bytes);
    case CollType::AllReduce: {
      // Two phases, each one wait on all peers' transfers in flight at once;
      // a peer beyond the first adds a syscall and a handshake, not a round
      // trip. With fewer synchronisation points than rhd's 2 log2(n) steps it
      // wins when ranks share cores (4 ranks on 2 cores, quiet machine: direct
      // / rhd busbw 1.2-2x at 256 KiB-256 MiB, docs/performance.md).
      const double block = bytes / n;
      const double phaseUs = l.latencyUs * (1 + 0.25 * (n - 2));
      return 2 * phaseUs + 2 * pattern::wireUs(l, (n - 1) * block) +
             pattern::reduceUs(t, (n - 1) * block);
    }
    default:
      return 1e30;
  }
}

const AlgorithmInfo kDirect = {
    "direct",
    "One node: AllGather, ReduceScatter, Broadcast and All-Reduce (reduce-scatter + "
    "all-gather) with every rank exchanging with every peer in one step; each block is "
    "copied once with the shm transport's single-copy path.",
    collBit(CollType::AllGather) | collBit(CollType::ReduceScatter) | collBit(CollType::Broadcast) |
        collBit(CollType::AllReduce),
    supportsDirect,
    runDirect,
    predictDirect,
};

const AlgorithmInfo kPairwise = {
    "pairwise",
    "AlltoAll by pairwise exchange, all n-1 transfers in flight at once.",
    collBit(CollType::AlltoAll),
    nullptr,
    pairwiseAlltoAll,
    predictPairwise,
};

}  // namespace

TIDE_ON_LOAD(registerAlgorithm(&kPairwise); registerAlgorithm(&kDirect));

}  // namespace tide
