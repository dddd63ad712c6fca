// Link calibration for the cost model: a point-to-point probe at
// communicator creation measures the latency and bandwidth of one intra-node
// and one inter-node pair (never the collectives the model is judged on), and
// every rank adopts the same, worst measured figures.
#include "core/comm/probe.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "core/boot/bootstrap.h"
#include "core/config.h"
#include "core/exec/executor.h"
#include "core/log.h"
#include "core/registry.h"

namespace tide {

namespace {

using Clock = std::chrono::steady_clock;

double usSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

// What one rank measured with its partner (0: not measured).
struct Measured {
  double intraLatUs = 0, intraGBs = 0;
  double interLatUs = 0, interGBs = 0;
};

constexpr int kWarmup = 5;
constexpr int kPingPongs = 30;
constexpr int kBwReps = 3;

// Ping-pong for latency (half the median round trip), then simultaneous
// exchanges of `bytes` in both directions for bandwidth (the best of
// kBwReps, as a ring step sees it).
Task probePair(ExecCtx& ctx, int peer, bool first, size_t bytes, double* latUs, double* gbs) {
  char* small = static_cast<char*>(ctx.scratch(64));
  char* out = static_cast<char*>(ctx.scratch(bytes));
  char* in = static_cast<char*>(ctx.scratch(bytes));
  if (small == nullptr || out == nullptr || in == nullptr) co_return;
  memset(out, 0x5a, bytes);
  std::vector<double> rtts;
  for (int i = 0; i < kWarmup + kPingPongs; ++i) {
    auto t0 = Clock::now();
    if (first) {
      co_await ctx.wait(ctx.send(peer, small, 8));
      co_await ctx.wait(ctx.recv(peer, small + 8, 8));
    } else {
      co_await ctx.wait(ctx.recv(peer, small + 8, 8));
      co_await ctx.wait(ctx.send(peer, small, 8));
    }
    if (i >= kWarmup) rtts.push_back(usSince(t0));
  }
  std::sort(rtts.begin(), rtts.end());
  *latUs = rtts[rtts.size() / 2] / 2;
  double best = 0;
  for (int r = 0; r < kBwReps; ++r) {
    auto t0 = Clock::now();
    Pending s = ctx.send(peer, out, bytes);
    Pending v = ctx.recv(peer, in, bytes);
    co_await ctx.wait(s, v);
    double us = usSince(t0);
    double rate = static_cast<double>(bytes) / (us * 1e3);
    best = std::max(best, rate);
  }
  *gbs = best;
}

// Pairs: intra-node, local ranks 0 and 1 of every node with two ranks or
// more; inter-node, the first ranks of nodes 2k and 2k+1.
int intraPartner(const CommTopo& t, int rank) {
  const auto& node = t.nodeRanks[t.nodeOf[rank]];
  if (node.size() < 2) return -1;
  if (rank == node[0]) return node[1];
  if (rank == node[1]) return node[0];
  return -1;
}

int interPartner(const CommTopo& t, int rank) {
  int node = t.nodeOf[rank];
  if (t.nodeRanks[node][0] != rank) return -1;
  int other = node ^ 1;
  if (other >= t.nnodes) return -1;
  return t.nodeRanks[other][0];
}

Status runProbe(tideComm* comm, int peer, size_t bytes, double* latUs, double* gbs) {
  CollArgs args;
  args.type = CollType::Send;
  args.elemSize = 1;
  ExecCtx ctx(args, comm->rank, comm->nranks, comm->conns.data(), kCollChannel,
              kernelsFor(MemType::Host), comm->chunkBytes, &comm->topo, nullptr);
  ExecItem item;
  item.ctx = &ctx;
  item.task = probePair(ctx, peer, comm->rank < peer, bytes, latUs, gbs);
  item.bell = comm->bell;
  item.abort = &comm->abortFlag;
  item.timeoutSec = comm->timeoutSec;
  std::vector<ExecItem*> items{&item};
  return runTasks(items, comm->wait);
}

}  // namespace

Status calibrateLinks(tideComm* comm) {
  int64_t mode = knobInt(Knob::LinkProbe);
  CommTopo& topo = comm->topo;
  if (mode == 0 || comm->nranks < 2 || (mode < 0 && topo.nnodes < 2)) return Status::Ok();
  const size_t bytes = std::max<size_t>(knobSize(Knob::LinkProbeBytes), 64);
  std::vector<Measured> all(comm->nranks);
  Measured& mine = all[comm->rank];
  int peer = intraPartner(topo, comm->rank);
  if (peer >= 0) TIDE_TRY(runProbe(comm, peer, bytes, &mine.intraLatUs, &mine.intraGBs));
  TIDE_TRY(comm->bootstrap->barrier());
  peer = interPartner(topo, comm->rank);
  if (peer >= 0) TIDE_TRY(runProbe(comm, peer, bytes, &mine.interLatUs, &mine.interGBs));
  TIDE_TRY(comm->bootstrap->allGather(all.data(), sizeof(Measured)));

  // Every rank folds the same table: the worst measured pair of each class.
  LinkCost intra{0, 0}, inter{0, 0};
  for (const Measured& m : all) {
    if (m.intraGBs > 0) {
      intra.latencyUs = std::max(intra.latencyUs, m.intraLatUs);
      intra.bandwidthGBs =
          intra.bandwidthGBs == 0 ? m.intraGBs : std::min(intra.bandwidthGBs, m.intraGBs);
    }
    if (m.interGBs > 0) {
      inter.latencyUs = std::max(inter.latencyUs, m.interLatUs);
      inter.bandwidthGBs =
          inter.bandwidthGBs == 0 ? m.interGBs : std::min(inter.bandwidthGBs, m.interGBs);
    }
  }
  const int n = comm->nranks;
  for (int a = 0; a < n; ++a) {
    for (int b = 0; b < n; ++b) {
      if (a == b) continue;
      bool same = topo.sameNode(a, b);
      const LinkCost& c = same ? intra : inter;
      if (c.bandwidthGBs > 0) topo.link[static_cast<size_t>(a) * n + b] = c;
    }
  }
  if (intra.bandwidthGBs > 0) topo.intraNode = intra;
  if (inter.bandwidthGBs > 0) topo.interNode = inter;
  if (comm->rank == 0) {
    TIDE_INFO("link probe (%zu B): intra-node %.2f us %.2f GB/s, inter-node %.2f us %.2f GB/s",
              bytes, topo.intraNode.latencyUs, topo.intraNode.bandwidthGBs,
              topo.interNode.latencyUs, topo.interNode.bandwidthGBs);
  }
  return Status::Ok();
}

}  // namespace tide
