// The rank arithmetic of the algorithms, simulated without any data movement.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "algorithms/patterns/patterns.h"
#include "algorithms/patterns/tree.h"

namespace tide::pattern {
namespace {

TEST(Patterns, PartitionCoversEverythingOnce) {
  for (size_t count : {0ul, 1ul, 7ul, 8ul, 4097ul}) {
    for (int n : {1, 2, 3, 8}) {
      size_t next = 0;
      for (int k = 0; k < n; ++k) {
        EXPECT_EQ(partBegin(count, n, k), next);
        next += partLen(count, n, k);
      }
      EXPECT_EQ(next, count);
    }
  }
}

// Simulates ring reduce-scatter + all-gather with sets of contributions.
TEST(Patterns, RingAllReduceSchedule) {
  for (int n : {2, 3, 4, 5, 8}) {
    // have[r][piece] = set of ranks whose contribution rank r holds for piece
    std::vector<std::vector<std::set<int>>> have(n, std::vector<std::set<int>>(n));
    for (int r = 0; r < n; ++r)
      for (int p = 0; p < n; ++p) have[r][p] = {r};
    for (int s = 0; s < n - 1; ++s) {
      auto before = have;
      for (int r = 0; r < n; ++r) {
        Ring ring{r, n};
        int sp = ring.rsSend(s);
        Ring dst{ring.next(), n};
        ASSERT_EQ(dst.rsRecv(s), sp) << "receiver expects the piece the sender sends";
        for (int c : before[r][sp]) have[ring.next()][sp].insert(c);
      }
    }
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(have[r][(Ring{r, n}).rsOwned()].size(), static_cast<size_t>(n));
    }
    // All-gather: every rank ends with every complete piece.
    std::vector<std::set<int>> complete(n);
    for (int r = 0; r < n; ++r) complete[r] = {Ring{r, n}.rsOwned()};
    for (int s = 0; s < n - 1; ++s) {
      auto before = complete;
      for (int r = 0; r < n; ++r) {
        Ring ring{r, n};
        ASSERT_TRUE(before[r].count(ring.agSend(s)));
        ASSERT_EQ((Ring{ring.next(), n}).agRecv(s), ring.agSend(s));
        complete[ring.next()].insert(ring.agSend(s));
      }
    }
    for (int r = 0; r < n; ++r) EXPECT_EQ(complete[r].size(), static_cast<size_t>(n));
  }
}

TEST(Patterns, RingReduceScatterEndsWithOwnPiece) {
  for (int n : {2, 3, 4, 7}) {
    std::vector<std::vector<std::set<int>>> have(n, std::vector<std::set<int>>(n));
    for (int r = 0; r < n; ++r)
      for (int p = 0; p < n; ++p) have[r][p] = {r};
    for (int s = 0; s < n - 1; ++s) {
      auto before = have;
      for (int r = 0; r < n; ++r) {
        Ring ring{r, n};
        ASSERT_EQ((Ring{ring.next(), n}).rsSelfRecv(s), ring.rsSelfSend(s));
        for (int c : before[r][ring.rsSelfSend(s)]) have[ring.next()][ring.rsSelfSend(s)].insert(c);
      }
    }
    for (int r = 0; r < n; ++r) EXPECT_EQ(have[r][r].size(), static_cast<size_t>(n));
  }
}

TEST(Patterns, ChainAndPairwise) {
  for (int n : {1, 2, 5}) {
    for (int root = 0; root < n; ++root) {
      int firsts = 0, lasts = 0;
      for (int r = 0; r < n; ++r) {
        Chain c{r, n, root};
        firsts += c.first();
        lasts += c.last();
        if (!c.last()) {
          EXPECT_EQ((Chain{c.down(), n, root}).pos(), c.pos() + 1);
        }
      }
      EXPECT_EQ(firsts, 1);
      EXPECT_EQ(lasts, 1);
    }
    for (int r = 0; r < n; ++r) {
      std::set<int> to, from;
      for (int s = 1; s < n; ++s) {
        Pairwise pw{r, n};
        to.insert(pw.sendPeer(s));
        from.insert(pw.recvPeer(s));
        EXPECT_EQ((Pairwise{pw.sendPeer(s), n}).recvPeer(s), r);
      }
      EXPECT_EQ(to.size(), static_cast<size_t>(n - 1));
      EXPECT_FALSE(to.count(r));
    }
  }
}

// Both trees of the double binary tree are spanning trees (one root, parent
// and child links agree, no cycles, every node reachable) with at most two
// children, depth <= treeDepth(n); for even n the leaves of one are exactly
// the inner nodes of the other.
TEST(Patterns, DoubleBinaryTree) {
  for (int n = 1; n <= 70; ++n) {
    std::vector<int> inner(n, 0);
    for (int which = 0; which < 2; ++which) {
      int roots = 0;
      for (int p = 0; p < n; ++p) {
        TreeNode t = doubleTree(p, n, which);
        if (t.parent < 0) {
          ++roots;
        } else {
          ASSERT_GE(t.parent, 0);
          ASSERT_LT(t.parent, n);
          TreeNode up = doubleTree(t.parent, n, which);
          EXPECT_TRUE(up.child[0] == p || up.child[1] == p) << n << " " << which << " " << p;
        }
        if (t.child[1] >= 0) {
          EXPECT_GE(t.child[0], 0);
        }
        for (int c : t.child) {
          if (c < 0) continue;
          ASSERT_LT(c, n);
          EXPECT_EQ(doubleTree(c, n, which).parent, p);
        }
        inner[p] += t.numChildren() > 0;
        // Depth: walking up reaches the root within treeDepth(n) steps.
        int d = 0, q = p;
        while (doubleTree(q, n, which).parent >= 0 && d <= n) {
          q = doubleTree(q, n, which).parent;
          ++d;
        }
        EXPECT_LE(d, treeDepth(n)) << n << " " << which << " " << p;
      }
      EXPECT_EQ(roots, 1) << n << " " << which;
    }
    if (n % 2 == 0 && n > 2) {
      for (int p = 0; p < n; ++p) {
        EXPECT_EQ(inner[p], 1) << "n=" << n << " p=" << p;
      }
    }
  }
}

// Simulates Rabenseifner All-Reduce with sets of contributions per part,
// for every rank count: after fold + halving each participant owns its part
// complete; after doubling + unfold every rank has every part complete.
TEST(Patterns, RhdAllReduceSchedule) {
  for (int n = 1; n <= 33; ++n) {
    const Rhd R0{0, n};
    const int p = R0.p();
    // have[r][q] = contributions rank r holds for part q
    std::vector<std::vector<std::set<int>>> have(n, std::vector<std::set<int>>(p));
    for (int r = 0; r < n; ++r)
      for (int q = 0; q < p; ++q) have[r][q] = {r};
    int folded = 0;
    for (int r = 0; r < n; ++r) {
      Rhd R{r, n};
      folded += R.folded();
      if (R.folded()) {
        ASSERT_TRUE((Rhd{r + 1, n}).absorbs());
        for (int q = 0; q < p; ++q) have[r + 1][q].insert(r);
      } else {
        ASSERT_EQ(R.realRank(R.newRank()), r);
      }
    }
    EXPECT_EQ(folded, n - p);
    for (int d = p / 2; d >= 1; d /= 2) {
      auto before = have;
      for (int r = 0; r < n; ++r) {
        Rhd R{r, n};
        if (R.folded()) continue;
        const int peer = R.partner(d);
        Rhd P{peer, n};
        ASSERT_EQ(P.partner(d), r);
        ASSERT_EQ(P.sendLo(d), R.keepLo(d));  // the peer sends what this rank keeps
        for (int q = R.keepLo(d); q < R.keepLo(d) + d; ++q)
          for (int c : before[peer][q]) have[r][q].insert(c);
      }
    }
    for (int r = 0; r < n; ++r) {
      Rhd R{r, n};
      if (!R.folded()) {
        EXPECT_EQ(have[r][R.newRank()].size(), static_cast<size_t>(n));
      }
    }
    // Doubling: windows of complete parts grow to everything.
    std::vector<std::set<int>> complete(n);
    for (int r = 0; r < n; ++r)
      if (!(Rhd{r, n}).folded()) complete[r] = {(Rhd{r, n}).newRank()};
    for (int d = 1; d < p; d *= 2) {
      auto before = complete;
      for (int r = 0; r < n; ++r) {
        Rhd R{r, n};
        if (R.folded()) continue;
        for (int q = R.sendLo(d); q < R.sendLo(d) + d; ++q) {
          ASSERT_TRUE(before[R.partner(d)].count(q)) << n << " " << r << " " << d;
          complete[r].insert(q);
        }
      }
    }
    for (int r = 0; r < n; ++r) {
      if ((Rhd{r, n}).folded()) complete[r] = complete[r + 1];
      EXPECT_EQ(complete[r].size(), static_cast<size_t>(p));
    }
    // Segments: parts cover the n per-rank segments in order, each once.
    int next = 0;
    for (int q = 0; q < p; ++q) {
      EXPECT_EQ(R0.segBegin(q), next);
      next = R0.segEnd(q);
      Rhd owner{R0.realRank(q), n};
      EXPECT_EQ(owner.segEnd(q) - 1, R0.realRank(q));  // the owner's own segment is last
    }
    EXPECT_EQ(next, n);
  }
}

}  // namespace
}  // namespace tide::pattern
