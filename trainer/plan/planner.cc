// The layout planner's enumeration and cost model (plan/planner.h).
#include "plan/planner.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "io/error.h"
#include "pipeline/simulate.h"
#include "tide/tide.h"

namespace tide_train::plan {
namespace {

using pipeline::ScheduleKind;

std::vector<int> divisors(int n) {
  std::vector<int> d;
  for (int k = 1; k <= n; ++k)
    if (n % k == 0) d.push_back(k);
  return d;
}

// Where a group's members sit: n members, world ranks `stride` apart, R
// ranks per node: (nodes, members per node) for tideTopoPredictTime.
std::pair<int, int> geometry(int n, int stride, int R) {
  if (static_cast<long>(n) * stride <= R) return {1, n};
  if (stride >= R) return {n, 1};
  const int per = std::max(1, R / stride);
  return {std::max(1, n / per), per};
}

class Pricer {
 public:
  explicit Pricer(const Machine& m) : m_(m) {}
  // Seconds of one `coll` of `bytes` over a group of n members `stride` apart.
  double time(tideCollective_t coll, double bytes, int n, int stride) const {
    if (n <= 1 || bytes <= 0) return 0.0;
    const auto [nodes, per] = geometry(n, stride, m_.world / m_.nodes);
    double us = 0;
    const tideResult_t r =
        tideTopoPredictTime(m_.topo_file.empty() ? nullptr : m_.topo_file.c_str(), nodes, per, coll,
                            static_cast<size_t>(bytes), &us);
    if (r != tideSuccess)
      throw Error("tideTopoPredictTime(" + (m_.topo_file.empty() ? "this node" : m_.topo_file) +
                  ", " + std::to_string(nodes) + " x " + std::to_string(per) +
                  "): " + tideGetErrorString(r));
    return us * 1e-6;
  }

 private:
  Machine m_;
};

// Parameters of one block and of the rest (embeddings, final LayerNorm) on
// one tensor-parallel rank.
double block_params(const ModelConfig& m, int T) {
  const double C = m.n_embd;
  return 12.0 * C * C / T + 7.0 * C / T + 6.0 * C;
}
double wte_params(const ModelConfig& m, int T) {
  const double rows = std::ceil(static_cast<double>(m.vocab_size) / T);
  return rows * m.n_embd;
}

// The stage partition minimising the slowest stage: S contiguous runs of
// at least one block; the last stage also carries `last_extra`.
std::vector<int> balance(int L, int S, double per_layer, double last_extra) {
  // best[s][l]: the least possible max cost of stages 0..s-1 holding l blocks.
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(S + 1, std::vector<double>(L + 1, inf));
  std::vector<std::vector<int>> cut(S + 1, std::vector<int>(L + 1, 0));
  best[0][0] = 0;
  for (int s = 1; s <= S; ++s) {
    for (int l = s; l <= L - (S - s); ++l) {
      for (int k = 1; k <= l - (s - 1); ++k) {
        const double c = k * per_layer + (s == S ? last_extra : 0.0);
        // Ties: the more even split (the smaller largest run).
        const double v = std::max(best[s - 1][l - k], c) + 1e-12 * k * k;
        if (v < best[s][l]) {
          best[s][l] = v;
          cut[s][l] = k;
        }
      }
    }
  }
  std::vector<int> out(S);
  for (int s = S, l = L; s >= 1; --s) {
    out[s - 1] = cut[s][l];
    l -= cut[s][l];
  }
  return out;
}

void price(const Job& job, const Machine& mc, const Pricer& pr, Profile* prof, Candidate* c) {
  const ModelConfig& m = job.model;
  const int D = c->dp, T = c->tp, P = c->pp, M = c->micro_batches, V = c->virtual_stages;
  const int S = P * V, R = mc.world / mc.nodes, b = job.batch / (D * M);
  const ProfileEntry& e = prof->at(T, b);
  // Ranks sharing cores: a message's receiver may sleep while another
  // rank holds its CPU; every hand-off on the critical path waits for it.
  const double share = std::max(1.0, static_cast<double>(R) / std::max(1, mc.cores_per_node));
  const double wake = share > 1.0 ? prof->wake_latency() : 0.0;
  // A collective's ranks poll (spin, then yield) before they sleep, so a
  // collective's hand-off waits less than a sleeper's wake-up: a third of
  // it, the fraction fitted on the 8-rank runs of docs/trainer.md.
  constexpr double kPollingShare = 0.3;
  const double cwake = wake * kPollingShare;
  // Hand-offs of a collective over n ranks: one for what the library's
  // small-collective lane takes on one node (every rank publishes, then
  // reads: TIDE_LANE_MAX_BYTES, 64 KiB by default), a ring's 2(n-1) steps
  // otherwise.
  auto syncs = [&](double bytes, int n) {
    if (n <= 1) return 0.0;
    return bytes <= 65536.0 && n <= R ? 1.0 : 2.0 * (n - 1);
  };
  const double act = 4.0 * b * m.block_size * m.n_embd;  // one boundary activation, bytes
  // Tensor parallel: 2 All-Reduces of the activation forward and 2 backward
  // per block; the embedding's and the head's input gradient, one each.
  const double ar = T > 1 ? pr.time(tideCollAllReduce, act, T, 1) + syncs(act, T) * cwake : 0.0;
  const double tp_block_f = 2 * ar, tp_block_b = 2 * ar, tp_ends = 2 * ar;
  const double per_layer = e.block.f + e.block.b + tp_block_f + tp_block_b;
  const double ends = e.ends.f + e.ends.b + tp_ends;
  c->stage_layers = S > 1 ? balance(m.n_layer, S, per_layer, ends) : std::vector<int>{m.n_layer};
  // A message wakes two threads: the receiving channel's stream thread,
  // then the compute thread waiting for it.
  const double p2p = P > 1 ? pr.time(tideCollSendRecv, act, 2, D * T) + 2 * wake : 0.0;

  // Per-stage action costs (seconds) on the critical path, and the CPU
  // work alone (no waits) for the throughput bound.
  std::vector<double> F(S), B(S), BI(S), BW(S), work(S);
  for (int s = 0; s < S; ++s) {
    const double n = c->stage_layers[s];
    const bool last = s == S - 1;
    F[s] =
        n * (e.block.f + tp_block_f) + (last ? e.ends.f + tp_ends / 2 : 0) + (s < S - 1 ? p2p : 0);
    BI[s] =
        n * (e.block.bi + tp_block_b) + (last ? e.ends.bi + tp_ends / 2 : 0) + (s > 0 ? p2p : 0);
    BW[s] = n * e.block.bw + (last ? e.ends.bw : 0);
    B[s] = BI[s] + BW[s];
    work[s] = M * (n * (e.block.f + e.block.b) + (last ? e.ends.f + e.ends.b : 0));
  }
  c->tp_comm = M * (m.n_layer * (tp_block_f + tp_block_b) + tp_ends);
  double wall = 0, bubble = 0;
  std::vector<int> peak(P, 1);
  if (P == 1) {
    wall = M * (F[0] + B[0]);
  } else {
    pipeline::Costs k;
    double mf = 0, mb = 0, mbi = 0, mbw = 0;
    for (int s = 0; s < S; ++s) {
      mf += F[s] / S;
      mb += B[s] / S;
      mbi += BI[s] / S;
      mbw += BW[s] / S;
    }
    k.forward = mf;
    k.backward = mb;
    k.backward_input = mbi;
    k.backward_weight = mbw;
    for (int s = 0; s < S; ++s) k.stage_scale.push_back((F[s] + B[s]) / (mf + mb));
    const pipeline::SimResult sim =
        pipeline::simulate(pipeline::make_schedule(c->schedule, P, M, V, k), k);
    if (!sim.ok) throw Error("planner: schedule " + c->layout() + ": " + sim.problem);
    wall = sim.wall;
    bubble = sim.bubble;
    peak = sim.peak_activations;
  }
  c->bubble = bubble;
  // The throughput bound: a node's ranks' CPU work over its cores (every
  // pipeline rank has D x T copies spread evenly over the nodes).
  double all_work = 0;
  for (double w : work) all_work += w;
  const double node_work =
      all_work * D * T / (static_cast<double>(mc.nodes) * std::max(1, mc.cores_per_node));
  c->pipeline = std::max(wall, node_work);
  c->core_share = wall > 0 ? c->pipeline / wall : 1.0;

  // The fullest rank's parameters: the last stage's rank (its blocks, the
  // head's wte, the final LayerNorm), or the first's if it holds more.
  double most_blocks = 0, first_blocks = 0;
  for (int r = 0; r < P; ++r) {
    double n = 0;
    for (int s = r; s < S; s += P) n += c->stage_layers[s];
    if (r == 0) first_blocks = n;
    if (r == (S - 1) % P) most_blocks = n;
  }
  const double wte = wte_params(m, T), bp = block_params(m, T);
  const double last_rank = most_blocks * bp + wte + 2.0 * m.n_embd +
                           (P == 1 ? static_cast<double>(m.block_size) * m.n_embd : 0.0);
  const double first_rank = first_blocks * bp + wte + static_cast<double>(m.block_size) * m.n_embd;
  const double params = std::max(last_rank, first_rank);

  // After the phase every rank of the node communicates (and steps) at
  // once: on one node a collective is CPU work, time-shared like the rest;
  // across nodes the link sets its time.
  const double grad_bytes = 4.0 * params;
  const auto cpu_share = [&](int n, int stride) {
    return geometry(n, stride, R).first == 1 ? share : 1.0;
  };
  const double dp = D > 1 ? pr.time(tideCollAllReduce, grad_bytes, D, T) * cpu_share(D, T) +
                                syncs(grad_bytes, D) * cwake
                          : 0.0;
  if (P > 1 || D == 1) {
    c->dp_exposed = dp;
  } else {
    const double buckets = std::max(1.0, std::ceil(grad_bytes / (job.bucket_mb * 1048576.0)));
    c->dp_exposed = std::max(dp / buckets, dp - B[0]);
  }
  const double tied = P > 1 ? pr.time(tideCollSendRecv, 4.0 * wte, 2, (P - 1) * D * T) *
                                      cpu_share(2, (P - 1) * D * T) +
                                  2 * wake
                            : 0.0;
  // The loss and norm All-Reduces and the pipeline's barrier.
  const double small = (3 + (P > 1 ? 1 : 0)) *
                       (pr.time(tideCollAllReduce, 16, mc.world, 1) + syncs(16, mc.world) * cwake);
  c->other = tied + small;
  c->optimizer = e.optim_per_param * params * share;
  c->step = c->pipeline + c->dp_exposed + c->other + c->optimizer;

  double act_most = 0;
  for (int r = 0; r < P; ++r) {
    double stage_act = 0;
    for (int s = r; s < S; s += P)
      stage_act =
          std::max(stage_act, c->stage_layers[s] * e.act_block + (s == S - 1 ? e.act_ends : 0.0));
    act_most = std::max(act_most, peak[r] * stage_act);
  }
  c->mem_bytes = 16.0 * params + act_most;
}

}  // namespace

std::string Candidate::layout() const {
  return "dp " + std::to_string(dp) + " x tp " + std::to_string(tp) + " x pp " + std::to_string(pp);
}

std::string Candidate::flags() const {
  std::string f = "--dp " + std::to_string(dp) + " --tp " + std::to_string(tp) + " --pp " +
                  std::to_string(pp) + " --micro-batches " + std::to_string(micro_batches);
  if (pp > 1) {
    f += std::string(" --schedule ") + pipeline::schedule_name(schedule);
    if (virtual_stages > 1) f += " --virtual-stages " + std::to_string(virtual_stages);
    f += " --stage-layers ";
    for (size_t i = 0; i < stage_layers.size(); ++i)
      f += (i ? "," : "") + std::to_string(stage_layers[i]);
  }
  return f;
}

std::vector<Candidate> plan_layouts(const Job& job, const Machine& machine, Profile* profile) {
  const ModelConfig& m = job.model;
  if (machine.world < 1 || machine.nodes < 1 || machine.world % machine.nodes != 0)
    throw Error("--plan: --world " + std::to_string(machine.world) +
                " is not a multiple of --nodes " + std::to_string(machine.nodes));
  const Pricer pr(machine);
  std::vector<Candidate> out;
  for (int T : divisors(machine.world)) {
    if (m.n_head % T != 0 || m.n_embd % T != 0) continue;
    for (int P : divisors(machine.world / T)) {
      if (P > m.n_layer) continue;
      const int D = machine.world / (T * P);
      if (job.batch % D != 0) continue;
      const int share = job.batch / D;
      for (int M : divisors(share)) {
        if (P == 1 && M > 1) continue;  // accumulation without a pipeline only adds steps
        std::vector<std::pair<ScheduleKind, int>> kinds;
        if (P == 1) {
          kinds = {{ScheduleKind::k1f1b, 1}};
        } else {
          kinds = {
              {ScheduleKind::kGpipe, 1}, {ScheduleKind::k1f1b, 1}, {ScheduleKind::kZeroBubble, 1}};
          if (M % P == 0 && 2 * P <= m.n_layer) kinds.emplace_back(ScheduleKind::kInterleaved, 2);
        }
        for (const auto& [kind, V] : kinds) {
          Candidate c;
          c.dp = D;
          c.tp = T;
          c.pp = P;
          c.micro_batches = M;
          c.virtual_stages = V;
          c.schedule = kind;
          price(job, machine, pr, profile, &c);
          out.push_back(c);
        }
      }
    }
  }
  if (out.empty())
    throw Error("--plan: no layout of " + std::to_string(machine.world) +
                " ranks fits this model and batch (T must divide --heads and --embd, D --batch)");
  // Steps within 0.1% of each other are a tie (the model cannot tell them
  // apart): then less memory first.
  std::stable_sort(out.begin(), out.end(), [](const Candidate& a, const Candidate& b) {
    if (std::abs(a.step - b.step) > 1e-3 * std::min(a.step, b.step)) return a.step < b.step;
    return a.mem_bytes < b.mem_bytes;
  });
  return out;
}

}  // namespace tide_train::plan
