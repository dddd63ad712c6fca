// The rank arithmetic of the algorithms, simulated without any data movement.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "algorithms/patterns/patterns.h"

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

}  // namespace
}  // namespace tide::pattern
