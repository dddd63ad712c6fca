// The algorithms' alpha-beta predictions (AlgorithmInfo::predictUs) on
// hand-built topologies: registration, sanity (finite, positive, monotone in
// size), exact values of the ring's formula, and the orderings the model must
// get right (hier beats ring across a slow network, log-step algorithms win
// latency-bound sizes, the ring's prediction follows the ring order).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/algorithm.h"
#include "core/registry.h"
#include "core/topology.h"

namespace tide {
namespace {

const AlgorithmInfo* Algo(const char* name) {
  for (const AlgorithmInfo* a : registeredAlgorithms()) {
    if (strcmp(a->name, name) == 0) return a;
  }
  return nullptr;
}

// nodeOfRank[r] gives each rank's node; rings[0] is the default node-major order.
CommTopo MakeTopo(const std::vector<int>& nodeOfRank, LinkCost intra, LinkCost inter) {
  std::vector<PeerInfo> peers(nodeOfRank.size());
  for (size_t r = 0; r < peers.size(); ++r) {
    peers[r].rank = static_cast<int>(r);
    peers[r].hostHash = 1000 + nodeOfRank[r];
  }
  CommTopo t;
  t.intraNode = intra;
  t.interNode = inter;
  t.reduceGBs = 5.0;
  defaultCommTopo(peers, 0, &t);
  return t;
}

CollArgs Args(CollType type, size_t bytes) {
  CollArgs a;
  a.type = type;
  a.dtype = tideFloat32;
  a.elemSize = 4;
  a.count = bytes / 4;
  return a;
}

const LinkCost kShm{2.0, 6.0};
const LinkCost kGbit{40.0, 0.125};  // 1 Gbit/s
constexpr size_t kChunk = 256 << 10;

TEST(AlgoModel, EveryAlgorithmIsModelled) {
  for (const char* name : {"ring", "pairwise", "tree", "rhd", "hier"}) {
    const AlgorithmInfo* a = Algo(name);
    ASSERT_NE(a, nullptr) << name;
    EXPECT_NE(a->predictUs, nullptr) << name;
    EXPECT_NE(a->run, nullptr) << name;
  }
}

TEST(AlgoModel, FinitePositiveMonotone) {
  const std::vector<CommTopo> topos = {
      MakeTopo({0, 0, 0, 0, 0}, kShm, kGbit), MakeTopo({0, 0, 1, 1}, kShm, kGbit),
      MakeTopo({0, 1, 2, 0, 1, 2}, kShm, kGbit), MakeTopo({0, 0, 0, 1, 1}, kShm, kGbit)};
  for (const CommTopo& t : topos) {
    for (const AlgorithmInfo* a : registeredAlgorithms()) {
      if (a->predictUs == nullptr) continue;
      for (int c = 0; c < static_cast<int>(CollType::Send); ++c) {
        const auto type = static_cast<CollType>(c);
        if (!(a->collMask & collBit(type))) continue;
        double prev = 0;
        for (size_t bytes = 8; bytes <= (256u << 20); bytes *= 4) {
          const double us = a->predictUs(Args(type, bytes), t, kChunk);
          EXPECT_TRUE(std::isfinite(us) && us > 0)
              << a->name << " " << collName(type) << " " << bytes << ": " << us;
          EXPECT_GE(us, prev * 0.999) << a->name << " " << collName(type) << " " << bytes;
          prev = us;
        }
      }
    }
  }
}

// One node, 4 ranks: 2(n-1) steps of one piece per block, plus the reductions.
TEST(AlgoModel, RingAllReduceFormula) {
  const CommTopo t = MakeTopo({0, 0, 0, 0}, kShm, kGbit);
  const double bytes = 64.0 * (1 << 20);
  const double blocks = bytes / (4.0 * kChunk);
  const double step = kShm.latencyUs + kChunk / (kShm.bandwidthGBs * 1e3);
  const double expect = blocks * 6 * step + bytes * 3 / 4 / (t.reduceGBs * 1e3);
  EXPECT_NEAR(Algo("ring")->predictUs(Args(CollType::AllReduce, 64 << 20), t, kChunk), expect,
              expect * 1e-9);
}

// 2 nodes x 2 ranks over 1 Gbit/s: the ring sends 1.5x the buffer out of each
// node, hier 1x; the model must show hier ahead by about that much.
TEST(AlgoModel, HierBeatsRingAcrossSlowNetwork) {
  const CommTopo t = MakeTopo({0, 0, 1, 1}, kShm, kGbit);
  for (size_t mib = 4; mib <= 64; mib *= 2) {
    const CollArgs a = Args(CollType::AllReduce, mib << 20);
    const double ring = Algo("ring")->predictUs(a, t, kChunk);
    const double hier = Algo("hier")->predictUs(a, t, kChunk);
    EXPECT_GT(ring / hier, 1.3) << mib << " MiB: ring " << ring << " us, hier " << hier << " us";
    EXPECT_LT(ring / hier, 1.6) << mib << " MiB";
  }
  // AllGather: hier sends each segment across once per node pair as well.
  const CollArgs g = Args(CollType::AllGather, 8 << 20);
  EXPECT_LE(Algo("hier")->predictUs(g, t, kChunk), Algo("ring")->predictUs(g, t, kChunk) * 1.01);
}

TEST(AlgoModel, LogStepsWinSmallMessagesOnManyRanks) {
  const CommTopo t = MakeTopo({0, 0, 0, 0, 0, 0, 0, 0}, kShm, kGbit);
  const CollArgs a = Args(CollType::AllReduce, 64);
  const double ring = Algo("ring")->predictUs(a, t, kChunk);
  EXPECT_LT(Algo("tree")->predictUs(a, t, kChunk), ring);
  EXPECT_LT(Algo("rhd")->predictUs(a, t, kChunk), ring);
  // Large: the ring's bandwidth term is the smallest of the three.
  const CollArgs big = Args(CollType::AllReduce, 256 << 20);
  EXPECT_LT(Algo("ring")->predictUs(big, t, kChunk), Algo("tree")->predictUs(big, t, kChunk));
}

// Nodes interleaved by rank: with the node-major ring order the ring crosses
// the network twice; in rank order it would cross at every step.
TEST(AlgoModel, RingFollowsRingOrder) {
  CommTopo t = MakeTopo({0, 1, 0, 1}, kShm, kGbit);
  ASSERT_EQ(t.rings[0], (std::vector<int>{0, 2, 1, 3}));
  const CollArgs a = Args(CollType::AllReduce, 16 << 20);
  const double nodeMajor = Algo("ring")->predictUs(a, t, kChunk);
  t.rings[0] = {0, 1, 2, 3};
  const double rankOrder = Algo("ring")->predictUs(a, t, kChunk);
  EXPECT_GT(rankOrder, nodeMajor * 1.5);
}

}  // namespace
}  // namespace tide
