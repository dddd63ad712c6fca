#include "pipeline/simulate.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>
#include <tuple>
#include <utility>

namespace tide_train::pipeline {
namespace {

bool is_comm(Op op) { return op == Op::kSend || op == Op::kRecv; }

const char* op_letter(Op op) {
  switch (op) {
    case Op::kForward:
      return "F";
    case Op::kBackward:
      return "B";
    case Op::kBackwardInput:
      return "B";
    case Op::kBackwardWeight:
      return "W";
    case Op::kSend:
      return "send";
    case Op::kRecv:
      return "recv";
  }
  return "?";
}

std::string describe(const Action& a) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "%s %s (mb %d, stage %d) %s rank %d", op_letter(a.op),
                a.msg.grad ? "gradient" : "activation", a.msg.mb, a.msg.stage,
                a.op == Op::kSend ? "to" : "from", a.peer);
  return buf;
}

// Static check: the k-th message rank r sends to q is the k-th q receives
// from r (Tide matches a pair's sends and receives in issue order).
bool check_order(const Schedule& s, std::string* problem) {
  const int p = s.p;
  std::vector<std::vector<std::vector<Message>>> sent(p, std::vector<std::vector<Message>>(p)),
      recv(p, std::vector<std::vector<Message>>(p));
  for (int r = 0; r < p; ++r) {
    for (const Action& a : s.rank[r]) {
      if (a.op == Op::kSend) sent[r][a.peer].push_back(a.msg);
      if (a.op == Op::kRecv) recv[a.peer][r].push_back(a.msg);
    }
  }
  for (int r = 0; r < p; ++r) {
    for (int q = 0; q < p; ++q) {
      if (sent[r][q] != recv[r][q]) {
        *problem = "rank " + std::to_string(q) + " receives from rank " + std::to_string(r) +
                   " in another order (or another set) than rank " + std::to_string(r) + " sends";
        return false;
      }
    }
  }
  return true;
}

}  // namespace

namespace {

// One replay. rendezvous: a send waits for its receive (the deadlock proof);
// otherwise sends complete when posted and a receive when its send was
// posted (the timing: no communication cost).
SimResult replay(const Schedule& s, const Costs& costs, bool rendezvous) {
  SimResult res;
  const int p = s.p;
  res.busy.assign(p, 0.0);
  res.peak_activations.assign(p, 0);
  res.timeline.assign(p, {});
  if (!check_order(s, &res.problem)) {
    res.ok = false;
    return res;
  }
  std::vector<size_t> pc(p, 0);
  std::vector<double> t(p, 0.0);
  std::vector<bool> posted(p, false);
  std::vector<int> held(p, 0);
  // matched[r][i]: action i of rank r (a send or receive) met its partner,
  // at time match_t[r][i].
  std::vector<std::vector<bool>> matched(p);
  std::vector<std::vector<double>> match_t(p);
  for (int r = 0; r < p; ++r) {
    matched[r].assign(s.rank[r].size(), false);
    match_t[r].assign(s.rank[r].size(), 0.0);
  }
  auto group_end = [&](int r, size_t i) {
    const int g = s.rank[r][i].group;
    while (i < s.rank[r].size() && is_comm(s.rank[r][i].op) && s.rank[r][i].group == g) ++i;
    return i;
  };
  // The partner of rank r's comm action i in q's posted group, or npos.
  auto partner = [&](int r, size_t i) -> size_t {
    const Action& a = s.rank[r][i];
    const int q = a.peer;
    if (!posted[q]) return std::string::npos;
    for (size_t j = pc[q]; j < group_end(q, pc[q]); ++j) {
      const Action& b = s.rank[q][j];
      if (b.peer == r && b.msg == a.msg && b.op != a.op && !matched[q][j]) return j;
    }
    return std::string::npos;
  };
  // Eager sends: when each was posted; a receive finds its send's time
  // through send_of (receive (rank, index) -> its send's (rank, index)).
  std::map<std::pair<int, size_t>, double> sent_at;
  std::map<std::pair<int, size_t>, std::pair<int, size_t>> send_of;
  if (!rendezvous) {
    std::map<std::tuple<int, int, bool, int, int>, std::pair<int, size_t>> sends;
    for (int r = 0; r < p; ++r) {
      for (size_t i = 0; i < s.rank[r].size(); ++i) {
        const Action& a = s.rank[r][i];
        if (a.op == Op::kSend) sends[{r, a.peer, a.msg.grad, a.msg.mb, a.msg.stage}] = {r, i};
      }
    }
    for (int r = 0; r < p; ++r) {
      for (size_t i = 0; i < s.rank[r].size(); ++i) {
        const Action& a = s.rank[r][i];
        if (a.op != Op::kRecv) continue;
        auto it = sends.find({a.peer, r, a.msg.grad, a.msg.mb, a.msg.stage});
        if (it != sends.end()) send_of[{r, i}] = it->second;
      }
    }
  }
  auto eager_send = [&](int r, size_t i, double* when) {
    auto it = send_of.find({r, i});
    if (it == send_of.end()) return false;
    auto at = sent_at.find(it->second);
    if (at == sent_at.end()) return false;
    *when = at->second;
    return true;
  };
  size_t done_ranks = 0;
  while (done_ranks < static_cast<size_t>(p)) {
    bool progress = false;
    done_ranks = 0;
    for (int r = 0; r < p; ++r) {
      if (pc[r] >= s.rank[r].size()) {
        ++done_ranks;
        continue;
      }
      const Action& a = s.rank[r][pc[r]];
      if (!is_comm(a.op)) {
        const double c = costs.of(a.op, a.stage);
        res.timeline[r].push_back({t[r], t[r] + c, a.op, a.mb, a.stage});
        t[r] += c;
        res.busy[r] += c;
        if (a.op == Op::kForward) {
          res.peak_activations[r] = std::max(res.peak_activations[r], ++held[r]);
        } else if (a.op == Op::kBackward || a.op == Op::kBackwardWeight) {
          --held[r];
        }
        ++pc[r];
        progress = true;
        continue;
      }
      if (!posted[r]) {
        posted[r] = true;
        progress = true;
      }
      const size_t end = group_end(r, pc[r]);
      bool all = true;
      double when = t[r];
      for (size_t i = pc[r]; i < end; ++i) {
        if (!rendezvous && s.rank[r][i].op == Op::kSend && !matched[r][i]) {
          matched[r][i] = true;  // eager: the data is sent; its receive may come later
          match_t[r][i] = t[r];
          sent_at[{r, i}] = t[r];
          progress = true;
        }
        if (!matched[r][i]) {
          double when_sent = 0;
          if (!rendezvous && eager_send(r, i, &when_sent)) {
            matched[r][i] = true;
            match_t[r][i] = std::max(t[r], when_sent);
            progress = true;
          }
          const size_t j = rendezvous ? partner(r, i) : std::string::npos;
          if (j != std::string::npos) {
            const int q = s.rank[r][i].peer;
            matched[r][i] = matched[q][j] = true;
            match_t[r][i] = match_t[q][j] = std::max(t[r], t[q]);
            progress = true;
          }
        }
        all = all && matched[r][i];
        if (matched[r][i]) when = std::max(when, match_t[r][i]);
      }
      if (all) {
        t[r] = when;
        pc[r] = end;
        posted[r] = false;
        progress = true;
      }
    }
    if (!progress && done_ranks < static_cast<size_t>(p)) {
      res.ok = false;
      std::ostringstream why;
      why << "deadlock:";
      for (int r = 0; r < p; ++r) {
        if (pc[r] >= s.rank[r].size()) continue;
        why << " rank " << r << " waits in " << describe(s.rank[r][pc[r]]) << ";";
      }
      res.problem = why.str();
      return res;
    }
  }
  res.wall = *std::max_element(t.begin(), t.end());
  double idle = 0;
  for (int r = 0; r < p; ++r) idle += res.wall > 0 ? (res.wall - res.busy[r]) / res.wall : 0;
  res.bubble = idle / p;
  return res;
}

}  // namespace

SimResult simulate(const Schedule& s, const Costs& costs) {
  SimResult proof = replay(s, costs, true);
  if (!proof.ok) return proof;
  return replay(s, costs, false);
}

double formula_bubble(ScheduleKind kind, int p, int m, int v) {
  if (kind == ScheduleKind::kInterleaved) {
    return static_cast<double>(p - 1) / (static_cast<double>(v) * m + p - 1);
  }
  return static_cast<double>(p - 1) / (m + p - 1);
}

std::string timeline_json(const Schedule& s, const SimResult& r) {
  std::ostringstream o;
  o << "{\"schedule\":\"" << schedule_name(s.kind) << "\",\"p\":" << s.p << ",\"m\":" << s.m
    << ",\"v\":" << s.v << ",\"bubble\":" << r.bubble << ",\"ranks\":[";
  for (size_t q = 0; q < r.timeline.size(); ++q) {
    o << (q ? "," : "") << "[";
    for (size_t i = 0; i < r.timeline[q].size(); ++i) {
      const Span& sp = r.timeline[q][i];
      o << (i ? "," : "") << "{\"start\":" << sp.start << ",\"end\":" << sp.end << ",\"op\":\""
        << (sp.op == Op::kBackwardInput ? "BI" : op_letter(sp.op)) << "\",\"mb\":" << sp.mb
        << ",\"stage\":" << sp.stage << "}";
    }
    o << "]";
  }
  o << "]}";
  return o.str();
}

}  // namespace tide_train::pipeline
