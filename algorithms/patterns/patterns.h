// Pure rank arithmetic for the algorithms: who talks to whom, which piece
// moves at which step. No data movement, no I/O: unit-tested on its own
// (tests/unit/test_patterns.cc).
#pragma once

#include <algorithm>
#include <cstddef>

namespace tide::pattern {

// x mod n for possibly negative x.
constexpr int mod(int x, int n) { return ((x % n) + n) % n; }

// Balanced split of `count` elements into n parts: the first count % n parts
// get one extra element.
constexpr size_t partBegin(size_t count, int n, int k) {
  size_t q = count / static_cast<size_t>(n);
  size_t r = count % static_cast<size_t>(n);
  return static_cast<size_t>(k) * q + std::min(static_cast<size_t>(k), r);
}
constexpr size_t partLen(size_t count, int n, int k) {
  return count / static_cast<size_t>(n) + (static_cast<size_t>(k) < count % static_cast<size_t>(n));
}

// Ring over ranks 0..n-1 in rank order.
//
// Reduce-scatter: at step s (0 <= s < n-1) rank r sends piece
// rsSend(s) and receives-and-reduces piece rsRecv(s); after n-1 steps it
// holds the complete piece rsOwned() = r+1 (mod n).
// All-gather (after reduce-scatter): at step s it sends agSend(s) and
// receives agRecv(s), starting from the piece it owns.
struct Ring {
  int rank;
  int n;
  constexpr int next() const { return mod(rank + 1, n); }
  constexpr int prev() const { return mod(rank - 1, n); }
  constexpr int rsSend(int s) const { return mod(rank - s, n); }
  constexpr int rsRecv(int s) const { return mod(rank - s - 1, n); }
  constexpr int rsOwned() const { return mod(rank + 1, n); }
  constexpr int agSend(int s) const { return mod(rank + 1 - s, n); }
  constexpr int agRecv(int s) const { return mod(rank - s, n); }
  // ReduceScatter variant whose owned piece is the rank's own: shift by one.
  constexpr int rsSelfSend(int s) const { return mod(rank - s - 1, n); }
  constexpr int rsSelfRecv(int s) const { return mod(rank - s - 2, n); }
  // AllGather of per-rank segments: send what arrived one step earlier.
  constexpr int gatherSend(int s) const { return mod(rank - s, n); }
  constexpr int gatherRecv(int s) const { return mod(rank - s - 1, n); }
};

// Chain rooted at `root`: positions 0 (root) .. n-1 in rank order starting
// at the root. Broadcast flows down the chain (0 -> 1 -> ...), Reduce up it.
struct Chain {
  int rank;
  int n;
  int root;
  constexpr int pos() const { return mod(rank - root, n); }
  constexpr bool first() const { return pos() == 0; }
  constexpr bool last() const { return pos() == n - 1; }
  constexpr int down() const { return mod(rank + 1, n); }  // towards the tail
  constexpr int up() const { return mod(rank - 1, n); }    // towards the root
};

// Pairwise exchange: at step s (1 <= s < n) send to sendPeer(s) and receive
// from recvPeer(s); every ordered pair meets exactly once.
struct Pairwise {
  int rank;
  int n;
  constexpr int sendPeer(int s) const { return mod(rank + s, n); }
  constexpr int recvPeer(int s) const { return mod(rank - s, n); }
};

}  // namespace tide::pattern
