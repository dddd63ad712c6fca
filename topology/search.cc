// Ring search: exact branch-and-bound for small nodes, greedy + 2-opt above.
#include "topology/search.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

namespace tide::topo {

namespace {

// Lexicographic score, smaller is better: (-bottleneck in 0.1 GB/s steps,
// crossings, class sum).
using Score = std::tuple<long, int, int>;

Score edgeScore(const RingCost& c) {
  return {-std::lround(c.gbs * 10), c.crossSocket ? 1 : 0, static_cast<int>(c.type)};
}

Score extend(const Score& s, const RingCost& c) {
  Score e = edgeScore(c);
  return {std::max(std::get<0>(s), std::get<0>(e)), std::get<1>(s) + std::get<1>(e),
          std::get<2>(s) + std::get<2>(e)};
}

Score scoreOf(const std::vector<int>& order, const std::vector<RingCost>& cost, int n,
              bool closed) {
  Score s{std::numeric_limits<long>::min(), 0, 0};
  for (size_t i = 0; i + 1 < order.size(); ++i) s = extend(s, cost[order[i] * n + order[i + 1]]);
  if (closed && order.size() > 1) s = extend(s, cost[order.back() * n + order.front()]);
  return s;
}

class Exact {
 public:
  Exact(int n, const std::vector<RingCost>& cost, bool closed)
      : n_(n), cost_(cost), closed_(closed) {}

  std::vector<int> run(int start) {
    used_.assign(n_, false);
    cur_ = {start};
    used_[start] = true;
    have_ = false;
    dfs(Score{std::numeric_limits<long>::min(), 0, 0});
    return best_;
  }

 private:
  void dfs(const Score& s) {
    if (have_ && s >= bestScore_) return;
    if (static_cast<int>(cur_.size()) == n_) {
      Score f = closed_ && n_ > 1 ? extend(s, cost_[cur_.back() * n_ + cur_.front()]) : s;
      if (!have_ || f < bestScore_) {
        best_ = cur_;
        bestScore_ = f;
        have_ = true;
      }
      return;
    }
    for (int j = 0; j < n_; ++j) {
      if (used_[j]) continue;
      used_[j] = true;
      cur_.push_back(j);
      dfs(extend(s, cost_[cur_[cur_.size() - 2] * n_ + j]));
      cur_.pop_back();
      used_[j] = false;
    }
  }

  int n_;
  const std::vector<RingCost>& cost_;
  bool closed_;
  std::vector<bool> used_;
  std::vector<int> cur_, best_;
  Score bestScore_;
  bool have_ = false;
};

std::vector<int> greedy(int n, const std::vector<RingCost>& cost, int start, bool closed) {
  std::vector<int> order = {start};
  std::vector<bool> used(n, false);
  used[start] = true;
  while (static_cast<int>(order.size()) < n) {
    int best = -1;
    for (int j = 0; j < n; ++j) {
      if (used[j]) continue;
      if (best < 0 ||
          edgeScore(cost[order.back() * n + j]) < edgeScore(cost[order.back() * n + best]))
        best = j;
    }
    used[best] = true;
    order.push_back(best);
  }
  // 2-opt: reverse segments (never moving the start) while the score improves.
  Score cur = scoreOf(order, cost, n, closed);
  for (int pass = 0; pass < 8; ++pass) {
    bool improved = false;
    for (int i = 1; i + 1 < n; ++i) {
      for (int j = i + 1; j < n; ++j) {
        std::reverse(order.begin() + i, order.begin() + j + 1);
        Score s = scoreOf(order, cost, n, closed);
        if (s < cur) {
          cur = s;
          improved = true;
        } else {
          std::reverse(order.begin() + i, order.begin() + j + 1);
        }
      }
    }
    if (!improved) break;
  }
  return order;
}

}  // namespace

std::vector<int> searchRing(int n, const std::vector<RingCost>& cost, int start, bool closed) {
  if (n <= 0) return {};
  if (n <= 2) {
    std::vector<int> order = {start};
    if (n == 2) order.push_back(1 - start);
    return order;
  }
  if (n <= kExactLimit) return Exact(n, cost, closed).run(start);
  return greedy(n, cost, start, closed);
}

double ringBottleneck(const std::vector<int>& order, const std::vector<RingCost>& cost, int n,
                      bool closed) {
  return order.size() < 2 ? 0.0 : -std::get<0>(scoreOf(order, cost, n, closed)) / 10.0;
}

int ringCrossings(const std::vector<int>& order, const std::vector<RingCost>& cost, int n,
                  bool closed) {
  return std::get<1>(scoreOf(order, cost, n, closed));
}

}  // namespace tide::topo
