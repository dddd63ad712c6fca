// Double binary tree All-Reduce ("tree"): two complementary binary trees
// over the ring order (patterns/tree.h), each reducing half of the buffer up
// to its root and broadcasting the result back down, pipelined in chunks.
// Latency grows with log2(n) instead of n; each rank sends and receives about
// twice the buffer.
//
// Message order: a pipe between two ranks may carry up-messages of one tree
// and down-messages of the other. Both sides order such messages by a key
// (up of chunk s: 2s; down of chunk j: 2(j+L)+1, i.e. L chunks later; ties by
// tree), post them in that order, and never wait for a message while a
// message with a smaller key that they could post is unposted. Every message
// depends only on messages with smaller keys (or on the same message one tree
// level away), so the schedule cannot deadlock.
#include "algorithms/patterns/tree.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "algorithms/patterns/cost.h"
#include "algorithms/patterns/patterns.h"
#include "core/algorithm.h"
#include "core/registry.h"

namespace tide {

namespace {

constexpr int kScratchWindow = 4;  // second-child chunks received ahead, per tree

struct Msg {
  long key;
  int tree;
  int chunk;
  bool down;
  bool operator<(const Msg& o) const { return key != o.key ? key < o.key : tree < o.tree; }
};

// One direction to one peer: the messages in key order and how far they got.
struct Stream {
  int peer;
  std::vector<Msg> msgs;
  size_t posted = 0;   // msgs[0, posted) are posted
  size_t settled = 0;  // receives: msgs[0, settled) are complete
  std::vector<Pending> pend;
};

struct TreeSide {
  int parent = -1;  // ranks, -1 when absent
  int child[2] = {-1, -1};
  size_t begin = 0;  // elements of the buffer this tree carries
  size_t len = 0;
  int chunks = 0;
  int reduced = 0;  // chunks whose up-data is complete here
  std::vector<Pending> upRecv[2];
  std::vector<char> upPosted[2];
  std::vector<Pending> downRecv;
  std::vector<char> downPosted;
  char* scratch[kScratchWindow] = {};
};

Stream& streamTo(std::vector<Stream>& v, int peer) {
  for (Stream& s : v)
    if (s.peer == peer) return s;
  v.push_back(Stream{peer, {}, 0, 0, {}});
  return v.back();
}

long upKey(int s) { return 2L * s; }
long downKey(int j, int lag) { return 2L * (j + lag) + 1; }

Task treeAllReduce(ExecCtx& ctx) {
  const CollArgs a = ctx.args();
  const int n = ctx.nranks();
  const size_t es = a.elemSize;
  const char* in = static_cast<const char*>(a.sendbuff);
  char* out = static_cast<char*>(a.recvbuff);
  if (n == 1 || a.count == 0) {
    ctx.copy(out, in, a.count * es);
    co_return;
  }
  const std::vector<int> order = pattern::ringOrder(ctx.topo(), n);
  const int pos = pattern::positionOf(order, ctx.rank());
  const int lag = 2 * pattern::treeDepth(n) + 2;
  const size_t ce = ctx.chunkElems();
  auto rankAt = [&](int p) { return p < 0 ? -1 : order[p]; };

  TreeSide tr[2];
  std::vector<Stream> sendQ, recvQ;
  for (int t = 0; t < 2; ++t) {
    const pattern::TreeNode node = pattern::doubleTree(pos, n, t);
    TreeSide& s = tr[t];
    s.parent = rankAt(node.parent);
    s.child[0] = rankAt(node.child[0]);
    s.child[1] = rankAt(node.child[1]);
    s.begin = pattern::partBegin(a.count, 2, t);
    s.len = pattern::partLen(a.count, 2, t);
    s.chunks = static_cast<int>((s.len + ce - 1) / ce);
    for (int k = 0; k < 2; ++k) {
      s.upRecv[k].resize(s.chunks);
      s.upPosted[k].assign(s.chunks, 0);
    }
    s.downRecv.resize(s.chunks);
    s.downPosted.assign(s.chunks, 0);
    if (s.child[1] >= 0 && s.chunks > 0) {
      for (char*& w : s.scratch) {
        w = static_cast<char*>(ctx.scratch(std::min(ce, s.len) * es));
        if (w == nullptr) co_return;
      }
    }
    if (s.child[0] < 0) s.reduced = s.chunks;  // a leaf's up-data is its input
    for (int c = 0; c < s.chunks; ++c) {
      if (s.parent >= 0) {
        streamTo(sendQ, s.parent).msgs.push_back(Msg{upKey(c), t, c, false});
        streamTo(recvQ, s.parent).msgs.push_back(Msg{downKey(c, lag), t, c, true});
      }
      for (int k = 0; k < 2; ++k) {
        if (s.child[k] < 0) continue;
        streamTo(recvQ, s.child[k]).msgs.push_back(Msg{upKey(c), t, c, false});
        streamTo(sendQ, s.child[k]).msgs.push_back(Msg{downKey(c, lag), t, c, true});
      }
    }
  }
  for (Stream& q : sendQ) std::sort(q.msgs.begin(), q.msgs.end());
  for (Stream& q : recvQ) {
    std::sort(q.msgs.begin(), q.msgs.end());
    q.pend.resize(q.msgs.size());
  }
  auto chunkOff = [&](const TreeSide& s, int c) { return (s.begin + c * ce) * es; };
  auto chunkLen = [&](const TreeSide& s, int c) {
    return std::min(ce, s.len - static_cast<size_t>(c) * ce) * es;
  };

  std::vector<Pending> sends;
  for (;;) {
    bool moved = true;
    while (moved) {
      moved = false;
      // Post receives in key order (second-child chunks within the window).
      for (Stream& q : recvQ) {
        while (q.posted < q.msgs.size()) {
          const Msg& m = q.msgs[q.posted];
          TreeSide& s = tr[m.tree];
          const size_t off = chunkOff(s, m.chunk), len = chunkLen(s, m.chunk);
          Pending p;
          if (m.down) {
            p = ctx.recv(q.peer, out + off, len);
            s.downRecv[m.chunk] = p;
            s.downPosted[m.chunk] = 1;
          } else if (q.peer == s.child[0]) {
            p = ctx.recvReduce(q.peer, out + off, in + off, len);
            s.upRecv[0][m.chunk] = p;
            s.upPosted[0][m.chunk] = 1;
          } else {
            if (m.chunk >= s.reduced + kScratchWindow) break;
            p = ctx.recv(q.peer, s.scratch[m.chunk % kScratchWindow], len);
            s.upRecv[1][m.chunk] = p;
            s.upPosted[1][m.chunk] = 1;
          }
          q.pend[q.posted++] = p;
          moved = true;
        }
        while (q.settled < q.posted && q.pend[q.settled].done()) ++q.settled;
      }
      // Complete up-data: both children's chunks arrived.
      for (TreeSide& s : tr) {
        while (s.reduced < s.chunks) {
          const int c = s.reduced;
          bool ready = true;
          for (int k = 0; k < 2; ++k) {
            if (s.child[k] >= 0 && !(s.upPosted[k][c] && s.upRecv[k][c].done())) ready = false;
          }
          if (!ready) break;
          if (s.child[1] >= 0) {
            char* dst = out + chunkOff(s, c);
            ctx.reduce(dst, dst, s.scratch[c % kScratchWindow], chunkLen(s, c) / es);
          }
          ++s.reduced;
          moved = true;
        }
      }
      // Post sends in key order once their data is there.
      for (Stream& q : sendQ) {
        while (q.posted < q.msgs.size()) {
          const Msg& m = q.msgs[q.posted];
          const TreeSide& s = tr[m.tree];
          const size_t off = chunkOff(s, m.chunk), len = chunkLen(s, m.chunk);
          bool ready;
          const char* src = out;
          if (!m.down) {
            ready = m.chunk < s.reduced;
            if (s.child[0] < 0) src = in;
          } else if (s.parent < 0) {
            ready = m.chunk < s.reduced;
          } else {
            ready = s.downPosted[m.chunk] && s.downRecv[m.chunk].done();
          }
          if (!ready) break;
          sends.push_back(ctx.send(q.peer, src + off, len));
          ++q.posted;
          moved = true;
        }
      }
    }
    // Done when everything is posted and every receive has completed.
    bool finished = tr[0].reduced == tr[0].chunks && tr[1].reduced == tr[1].chunks;
    for (const Stream& q : sendQ) finished = finished && q.posted == q.msgs.size();
    for (const Stream& q : recvQ) finished = finished && q.settled == q.msgs.size();
    if (finished) break;
    // Wait for the pending receive with the smallest key.
    const Stream* best = nullptr;
    for (const Stream& q : recvQ) {
      if (q.settled < q.posted &&
          (best == nullptr || q.msgs[q.settled] < best->msgs[best->settled]))
        best = &q;
    }
    if (best == nullptr) {
      ctx.setError(internalError("tree all-reduce: schedule stalled at rank %d", ctx.rank()));
      co_return;
    }
    co_await ctx.wait(best->pend[best->settled]);
  }
  co_await ctx.waitAll(sends);
}

// ---- Cost model --------------------------------------------------------------------

// Pipeline fill (2 * depth chunk hops) plus the busiest rank's or node's
// bytes at link bandwidth, plus the reductions of the busiest rank.
double predictTree(const CollArgs& a, const CommTopo& t, size_t chunkBytes) {
  const int n = std::max(t.nranks, 1);
  const double es = static_cast<double>(a.elemSize);
  const double bytes = static_cast<double>(a.count) * es;
  if (n == 1 || bytes == 0) return bytes / 1e4;
  if (a.type != CollType::AllReduce) return 1e30;
  const std::vector<int> order = pattern::ringOrder(t, n);
  const double half = bytes / 2;
  const double chunk = std::min(half, std::max(1.0, std::floor(chunkBytes / es)) * es);
  std::vector<double> sent(n, 0.0), recvd(n, 0.0), red(n, 0.0);
  std::vector<double> egress(std::max(t.nnodes, 1), 0.0);
  bool inter = false, intra = false;
  for (int p = 0; p < n; ++p) {
    for (int tr = 0; tr < 2; ++tr) {
      const pattern::TreeNode node = pattern::doubleTree(p, n, tr);
      if (node.parent < 0) continue;
      // One edge: half the buffer up and half down.
      const int r = order[p], q = order[node.parent];
      sent[r] += half;
      recvd[r] += half;
      sent[q] += half;
      recvd[q] += half;
      red[q] += half;
      const int nr = pattern::nodeOfRank(t, r), nq = pattern::nodeOfRank(t, q);
      if (nr != nq) {
        inter = true;
        if (nr < static_cast<int>(egress.size())) egress[nr] += half;
        if (nq < static_cast<int>(egress.size())) egress[nq] += half;
      } else {
        intra = true;
      }
    }
  }
  double wire = 0;
  for (int r = 0; r < n; ++r) {
    if (intra) wire = std::max(wire, pattern::wireUs(t.intraNode, std::max(sent[r], recvd[r])));
  }
  if (inter)
    wire = std::max(wire,
                    pattern::wireUs(t.interNode, *std::max_element(egress.begin(), egress.end())));
  const LinkCost& hop = inter ? t.interNode : t.intraNode;
  const double fill = 2.0 * std::max(1, pattern::treeDepth(n)) * pattern::linkUs(hop, chunk);
  return fill + wire + pattern::reduceUs(t, *std::max_element(red.begin(), red.end()));
}

Task runTree(ExecCtx& ctx) {
  if (ctx.args().type == CollType::AllReduce) return treeAllReduce(ctx);
  return Task();
}

const AlgorithmInfo kTree = {
    "tree",
    "Double binary tree All-Reduce: two complementary trees each reduce and broadcast half "
    "the buffer, pipelined in chunks. 2*log2(n) hops of latency.",
    collBit(CollType::AllReduce),
    nullptr,
    runTree,
    predictTree,
};

}  // namespace

TIDE_ON_LOAD(registerAlgorithm(&kTree));

}  // namespace tide
