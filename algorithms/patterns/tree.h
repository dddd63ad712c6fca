// Pure rank arithmetic of the tree and recursive halving-doubling algorithms:
// the double binary tree (two complementary binary trees over positions
// 0..n-1, each carrying half of the data) and the Rabenseifner schedule for
// any rank count (extra ranks are folded into a power of two first). No data
// movement; unit-tested in tests/unit/test_patterns.cc.
#pragma once

#include <cstddef>

#include "algorithms/patterns/patterns.h"

namespace tide::pattern {

// ---- Binary trees ------------------------------------------------------------------

// One node of a tree over positions 0..n-1: its parent (-1 at the root) and up
// to two children (-1 where absent).
struct TreeNode {
  int parent = -1;
  int child[2] = {-1, -1};
  constexpr int numChildren() const { return (child[0] >= 0) + (child[1] >= 0); }
};

constexpr int lowBit(int v) { return v & -v; }

// In-order binary tree over 1..n (1-based): node v with lowest set bit 2^k
// has children v - 2^(k-1) and (the largest existing) v + 2^j, j < k; the root
// is the largest power of two <= n. Odd v are leaves, so every node has at
// most two children and the depth is floor(log2 n).
constexpr TreeNode inorderTree1(int v, int n) {
  TreeNode t;
  int root = 1;
  while (root * 2 <= n) root *= 2;
  if (v != root) {
    int p = v;
    do {
      const int b = lowBit(p);
      p = (p & (2 * b)) ? p - b : p + b;  // natural parent in the infinite tree
    } while (p > n);
    t.parent = p;
  }
  const int b = lowBit(v);
  if (b > 1) {
    t.child[0] = v - b / 2;
    for (int j = b / 2; j >= 1; j /= 2) {
      if (v + j <= n) {
        t.child[1] = v + j;
        break;
      }
    }
  }
  return t;
}

// Tree `which` (0 or 1) of the double binary tree at position pos (0-based).
// Tree 0 is the in-order tree; tree 1 is its mirror (n even) or its shift by
// one (n odd), so that the leaves of one tree are the inner nodes of the other
// (exactly for even n, all but one node for odd n).
constexpr TreeNode doubleTree(int pos, int n, int which) {
  auto toTree = [&](int p) {  // position -> 1-based node of tree 0
    if (which == 0) return p + 1;
    return (n % 2 == 0) ? n - p : mod(p - 1, n) + 1;
  };
  auto fromTree = [&](int v) {  // inverse of toTree; -1 stays -1
    if (v < 0) return -1;
    if (which == 0) return v - 1;
    return (n % 2 == 0) ? n - v : mod(v, n);
  };
  TreeNode t = inorderTree1(toTree(pos), n);
  return TreeNode{fromTree(t.parent), {fromTree(t.child[0]), fromTree(t.child[1])}};
}

// Height of the in-order tree over n nodes (edges on the longest root-leaf path).
constexpr int treeDepth(int n) {
  int d = 0;
  while ((2 << d) <= n) ++d;
  return d;
}

// ---- Recursive halving-doubling (Rabenseifner) ----------------------------------

// Ranks 0..n-1 folded onto p = largest power of two <= n: the first 2*rem
// ranks (rem = n - p) pair up, the even one of each pair hands its data to the
// odd one (fold) and sits out until the odd one hands the result back
// (unfold). Participants get new ranks 0..p-1: odd r < 2*rem -> r/2, r >= 2*rem
// -> r - rem. Data is split into p parts; new rank q owns part q after the
// reduce-scatter. For collectives with per-rank segments, part q covers the
// segments of realRank(q) (and of its folded partner): segBegin/segEnd.
struct Rhd {
  int rank;
  int n;
  constexpr int p() const {
    int v = 1;
    while (v * 2 <= n) v *= 2;
    return v;
  }
  constexpr int rem() const { return n - p(); }
  // Sits out the halving/doubling (hands its data to rank + 1).
  constexpr bool folded() const { return rank < 2 * rem() && rank % 2 == 0; }
  // Receives a folded partner's data (rank - 1) before, returns it after.
  constexpr bool absorbs() const { return rank < 2 * rem() && rank % 2 == 1; }
  constexpr int newRank() const {
    return folded() ? -1 : (rank < 2 * rem() ? rank / 2 : rank - rem());
  }
  constexpr int realRank(int q) const { return q < rem() ? 2 * q + 1 : q + rem(); }
  // Steps: halving uses distances p/2, p/4, ..., 1; doubling 1, 2, ..., p/2.
  constexpr int steps() const {
    int s = 0;
    while ((1 << s) < p()) ++s;
    return s;
  }
  constexpr int partner(int dist) const { return realRank(newRank() ^ dist); }
  // Parts this rank keeps (after) halving step with distance `dist`: a
  // window [keepLo, keepLo + dist); the partner keeps the other half of the
  // window [winLo, winLo + 2*dist) both held before.
  constexpr int winLo(int dist) const { return newRank() & ~(2 * dist - 1); }
  constexpr int keepLo(int dist) const { return newRank() & ~(dist - 1); }
  constexpr int sendLo(int dist) const { return (newRank() ^ dist) & ~(dist - 1); }
  // Per-rank segments covered by part q: [segBegin(q), segEnd(q)).
  constexpr int segBegin(int q) const { return q < rem() ? 2 * q : q + rem(); }
  constexpr int segEnd(int q) const { return q < rem() ? 2 * q + 2 : q + rem() + 1; }
};

}  // namespace tide::pattern
