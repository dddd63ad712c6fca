#include "pipeline/schedule.h"

#include <algorithm>
#include <map>
#include <stdexcept>

namespace tide_train::pipeline {

bool parse_schedule(const std::string& name, ScheduleKind* out) {
  if (name == "gpipe") {
    *out = ScheduleKind::kGpipe;
  } else if (name == "1f1b") {
    *out = ScheduleKind::k1f1b;
  } else if (name == "interleaved") {
    *out = ScheduleKind::kInterleaved;
  } else if (name == "zb") {
    *out = ScheduleKind::kZeroBubble;
  } else {
    return false;
  }
  return true;
}

const char* schedule_name(ScheduleKind k) {
  switch (k) {
    case ScheduleKind::kGpipe:
      return "gpipe";
    case ScheduleKind::k1f1b:
      return "1f1b";
    case ScheduleKind::kInterleaved:
      return "interleaved";
    case ScheduleKind::kZeroBubble:
      return "zb";
  }
  return "?";
}

double Costs::of(Op op, int stage) const {
  const double sc = scale(stage);
  switch (op) {
    case Op::kForward:
      return forward * sc;
    case Op::kBackward:
      return backward * sc;
    case Op::kBackwardInput:
      return backward_input * sc;
    case Op::kBackwardWeight:
      return backward_weight * sc;
    default:
      return 0;
  }
}

namespace {

struct Compute {
  Op op;
  int mb, stage;
};

using Orders = std::vector<std::vector<Compute>>;  // per rank

Orders gpipe(int p, int m) {
  Orders o(p);
  for (int r = 0; r < p; ++r) {
    for (int i = 0; i < m; ++i) o[r].push_back({Op::kForward, i, r});
    for (int i = 0; i < m; ++i) o[r].push_back({Op::kBackward, i, r});
  }
  return o;
}

Orders one_f_one_b(int p, int m) {
  Orders o(p);
  for (int r = 0; r < p; ++r) {
    const int warm = std::min(p - r - 1, m);
    for (int i = 0; i < warm; ++i) o[r].push_back({Op::kForward, i, r});
    for (int i = 0; i < m - warm; ++i) {
      o[r].push_back({Op::kForward, warm + i, r});
      o[r].push_back({Op::kBackward, i, r});
    }
    for (int i = m - warm; i < m; ++i) o[r].push_back({Op::kBackward, i, r});
  }
  return o;
}

// Megatron-LM's interleaved 1F1B: micro-batches go through the chunks in
// groups of p; warm-up (p - r - 1) * 2 + (v - 1) * p forward units.
Orders interleaved(int p, int m, int v) {
  Orders o(p);
  const int total = m * v;
  auto mb_of = [&](int k) { return (k / (p * v)) * p + k % p; };
  for (int r = 0; r < p; ++r) {
    auto fwd = [&](int k) { return Compute{Op::kForward, mb_of(k), ((k / p) % v) * p + r}; };
    auto bwd = [&](int k) {
      return Compute{Op::kBackward, mb_of(k), (v - 1 - (k / p) % v) * p + r};
    };
    const int warm = std::min((p - r - 1) * 2 + (v - 1) * p, total);
    for (int k = 0; k < warm; ++k) o[r].push_back(fwd(k));
    for (int k = 0; k < total - warm; ++k) {
      o[r].push_back(fwd(warm + k));
      o[r].push_back(bwd(k));
    }
    for (int k = total - warm; k < total; ++k) o[r].push_back(bwd(k));
  }
  return o;
}

// Zero bubble, ZB-H1's order (Qi et al. 2023): rank r runs p - r - 1
// warm-up forwards, then r (F, B) pairs whose weight passes wait, then
// (F, B, W) triples while forwards remain, then (B, W) pairs, then the r
// waiting weight passes: the short input-gradient passes keep the backward
// chain moving and the weight passes fill what 1f1b leaves idle. At most p
// micro-batches hold activations on any rank, as on 1f1b's rank 0.
Orders zero_bubble(int p, int m) {
  Orders o(p);
  for (int r = 0; r < p; ++r) {
    int f = 0, b = 0, w = 0;
    std::vector<Compute>& l = o[r];
    for (int k = 0; k < p - r - 1 && f < m; ++k) l.push_back({Op::kForward, f++, r});
    for (int k = 0; k < r && f < m; ++k) {
      l.push_back({Op::kForward, f++, r});
      l.push_back({Op::kBackwardInput, b++, r});
    }
    while (f < m) {
      l.push_back({Op::kForward, f++, r});
      l.push_back({Op::kBackwardInput, b++, r});
      l.push_back({Op::kBackwardWeight, w++, r});
    }
    while (b < m) {
      l.push_back({Op::kBackwardInput, b++, r});
      l.push_back({Op::kBackwardWeight, w++, r});
    }
    while (w < m) l.push_back({Op::kBackwardWeight, w++, r});
  }
  return o;
}

// The messages a compute action sends (after it) and needs (before it).
bool sends(const Compute& x, int stages, Message* msg) {
  if (x.op == Op::kForward && x.stage + 1 < stages) {
    *msg = {false, x.mb, x.stage};
    return true;
  }
  if ((x.op == Op::kBackward || x.op == Op::kBackwardInput) && x.stage > 0) {
    *msg = {true, x.mb, x.stage};
    return true;
  }
  return false;
}

bool needs(const Compute& x, int stages, Message* msg) {
  if (x.op == Op::kForward && x.stage > 0) {
    *msg = {false, x.mb, x.stage - 1};
    return true;
  }
  if ((x.op == Op::kBackward || x.op == Op::kBackwardInput) && x.stage + 1 < stages) {
    *msg = {true, x.mb, x.stage + 1};
    return true;
  }
  return false;
}

}  // namespace

Schedule make_schedule(ScheduleKind kind, int p, int m, int v, const Costs& costs) {
  if (p < 1 || m < 1 || v < 1) {
    throw std::invalid_argument(
        "pipeline: --pp, --micro-batches and --virtual-stages must be >= 1");
  }
  if (v > 1 && kind != ScheduleKind::kInterleaved) {
    throw std::invalid_argument(std::string("pipeline: --virtual-stages ") + std::to_string(v) +
                                " needs --schedule interleaved (not " + schedule_name(kind) + ")");
  }
  if (kind == ScheduleKind::kInterleaved && v > 1 && m % p != 0) {
    throw std::invalid_argument("pipeline: the interleaved schedule needs --micro-batches (" +
                                std::to_string(m) + ") to be a multiple of --pp (" +
                                std::to_string(p) + ")");
  }
  Schedule s;
  s.kind = kind;
  s.p = p;
  s.m = m;
  s.v = v;
  Orders orders;
  switch (kind) {
    case ScheduleKind::kGpipe:
      orders = gpipe(p, m);
      break;
    case ScheduleKind::k1f1b:
      orders = one_f_one_b(p, m);
      break;
    case ScheduleKind::kInterleaved:
      orders = v > 1 ? interleaved(p, m, v) : one_f_one_b(p, m);
      break;
    case ScheduleKind::kZeroBubble:
      orders = zero_bubble(p, m);
      break;
  }
  const int stages = s.stages();
  auto dest = [&](const Message& msg) {
    return s.rank_of(msg.grad ? msg.stage - 1 : msg.stage + 1);
  };
  // Timing pass with `costs` and instant messages: when each compute runs
  // and when each message is produced.
  auto cost = [&](const Compute& x) { return costs.of(x.op, x.stage); };

  auto key_of = [&](const Message& msg) {
    return (static_cast<int64_t>(msg.stage) * 2 + (msg.grad ? 1 : 0)) * (m + 1) + msg.mb;
  };
  std::map<int64_t, double> produced;  // message key -> time
  std::vector<std::vector<double>> finish(p);
  {
    std::vector<size_t> next(p, 0);
    std::vector<double> free_at(p, 0.0);
    size_t left = 0;
    for (int r = 0; r < p; ++r) left += orders[r].size();
    while (left > 0) {
      bool moved = false;
      for (int r = 0; r < p; ++r) {
        while (next[r] < orders[r].size()) {
          const Compute& x = orders[r][next[r]];
          double start = free_at[r];
          Message need;
          if (needs(x, stages, &need)) {
            auto it = produced.find(key_of(need));
            if (it == produced.end()) break;  // its producer has not run yet
            start = std::max(start, it->second);
          }
          free_at[r] = start + cost(x);
          finish[r].push_back(free_at[r]);
          Message msg;
          if (sends(x, stages, &msg)) produced[key_of(msg)] = free_at[r];
          ++next[r];
          --left;
          moved = true;
        }
      }
      if (!moved)
        throw std::logic_error("pipeline: the compute orders depend on each other in a cycle");
    }
  }
  // Every message gets a global index (production time, then stage, kind,
  // micro-batch: the same on both sides). Each rank handles its sends and
  // receives in increasing index, each on its own: then the lowest-index
  // blocked transfer always has both sides at it, so no schedule deadlocks
  // even when every send waits for its receive. Sends follow their compute;
  // a receive goes as late as its consumer and that order allow.
  struct Item {
    double t;
    int64_t key;
    bool operator<(const Item& o) const { return t < o.t || (t == o.t && key < o.key); }
  };
  s.rank.assign(p, {});
  for (int r = 0; r < p; ++r) {
    const std::vector<Compute>& ord = orders[r];
    const size_t n = ord.size();
    // gaps[g]: the comm actions before compute g (g = n: after the last).
    std::vector<std::vector<std::pair<Item, Action>>> gaps(n + 1);
    std::vector<std::pair<Item, size_t>> placed;  // index and gap of every comm action
    for (size_t k = 0; k < n; ++k) {
      Message msg;
      if (sends(ord[k], stages, &msg) && dest(msg) != r) {
        Action a;
        a.op = Op::kSend;
        a.peer = dest(msg);
        a.msg = msg;
        a.mb = msg.mb;
        a.stage = msg.stage;
        const Item it{finish[r][k], key_of(msg)};
        gaps[k + 1].push_back({it, a});
        placed.push_back({it, k + 1});
      }
    }
    std::vector<std::pair<Item, std::pair<size_t, Message>>> recvs;  // index, (consumer, msg)
    for (size_t k = 0; k < n; ++k) {
      Message need;
      if (needs(ord[k], stages, &need) && s.rank_of(need.stage) != r) {
        recvs.push_back({Item{produced.at(key_of(need)), key_of(need)}, {k, need}});
      }
    }
    std::sort(recvs.begin(), recvs.end(),
              [](const auto& a, const auto& b) { return b.first < a.first; });  // highest first
    for (const auto& [it, where] : recvs) {
      size_t gap = where.first;
      for (const auto& [other, g] : placed) {
        if (it < other) gap = std::min(gap, g);
      }
      Action a;
      a.op = Op::kRecv;
      a.peer = s.rank_of(where.second.stage);
      a.msg = where.second;
      a.mb = a.msg.mb;
      a.stage = a.msg.stage;
      gaps[gap].push_back({it, a});
      placed.push_back({it, gap});
    }
    std::vector<Action>& out = s.rank[r];
    int group = 0;
    for (size_t g = 0; g <= n; ++g) {
      std::sort(gaps[g].begin(), gaps[g].end(),
                [](const auto& a, const auto& b) { return a.first < b.first; });
      for (auto& [it, a] : gaps[g]) {
        a.group = ++group;
        out.push_back(a);
      }
      if (g < n) {
        Action c;
        c.op = ord[g].op;
        c.mb = ord[g].mb;
        c.stage = ord[g].stage;
        out.push_back(c);
      }
    }
  }
  return s;
}

}  // namespace tide_train::pipeline
