// Pipeline schedules (trainer/pipeline): every schedule for P <= 8, M <= 32,
// V <= 4 is free of deadlock with sends that wait for their receives and
// matches every pair's messages in order; the balanced-stage bubbles equal
// the textbook formulas; the seed's cases; zb at most half of 1f1b's bubble
// at no more activation memory; wrong options and broken schedules are named;
// the stage partition (balanced, or --stage-layers) and its errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>

#include "pipeline/partition.h"
#include "pipeline/schedule.h"
#include "pipeline/simulate.h"

namespace tide_train::pipeline {
namespace {

TEST(PipelineSchedule, EveryScheduleUpTo8Ranks32MicroBatches4ChunksIsDeadlockFree) {
  int checked = 0;
  for (int p = 1; p <= 8; ++p) {
    for (int m = 1; m <= 32; ++m) {
      for (ScheduleKind k : {ScheduleKind::kGpipe, ScheduleKind::k1f1b, ScheduleKind::kZeroBubble,
                             ScheduleKind::kInterleaved}) {
        for (int v = 1; v <= (k == ScheduleKind::kInterleaved ? 4 : 1); ++v) {
          if (k == ScheduleKind::kInterleaved && v > 1 && m % p != 0) continue;
          const Schedule s = make_schedule(k, p, m, v);
          const SimResult r = simulate(s);
          ASSERT_TRUE(r.ok) << schedule_name(k) << " p=" << p << " m=" << m << " v=" << v << ": "
                            << r.problem;
          // Every compute action ran exactly once per (micro-batch, stage).
          double busy = 0;
          for (double b : r.busy) busy += b;
          // F 1 + B 2, or zb's F 1 + B 1 + W 1: 3 per (micro-batch, stage).
          EXPECT_DOUBLE_EQ(busy, 3.0 * m * s.stages());
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 800);
}

TEST(PipelineSchedule, BalancedBubblesEqualTheFormulas) {
  for (int p = 1; p <= 8; ++p) {
    for (int m = p; m <= 32; ++m) {
      for (ScheduleKind k : {ScheduleKind::kGpipe, ScheduleKind::k1f1b}) {
        const SimResult r = simulate(make_schedule(k, p, m, 1));
        EXPECT_NEAR(r.bubble, formula_bubble(k, p, m, 1), 1e-9)
            << schedule_name(k) << " p=" << p << " m=" << m;
      }
      for (int v = 2; v <= 4 && m % p == 0; ++v) {
        const SimResult r = simulate(make_schedule(ScheduleKind::kInterleaved, p, m, v));
        EXPECT_NEAR(r.bubble, formula_bubble(ScheduleKind::kInterleaved, p, m, v), 1e-9)
            << "interleaved p=" << p << " m=" << m << " v=" << v;
      }
    }
  }
}

TEST(PipelineSchedule, TheSeedsEightStageCase) {
  // "8-stage pipeline, bubble 35% -> 12%" by the micro-batch count.
  EXPECT_NEAR(simulate(make_schedule(ScheduleKind::k1f1b, 8, 13, 1)).bubble, 0.35, 1e-9);
  EXPECT_LE(simulate(make_schedule(ScheduleKind::k1f1b, 8, 52, 1)).bubble, 0.12);
  EXPECT_NEAR(simulate(make_schedule(ScheduleKind::kInterleaved, 8, 16, 4)).bubble, 7.0 / 71, 1e-9);
}

TEST(PipelineSchedule, ZeroBubbleHalves1f1bsBubbleAtNoMoreActivationMemory) {
  for (int p = 2; p <= 8; ++p) {
    for (int m = p; m <= 32; ++m) {
      const SimResult a = simulate(make_schedule(ScheduleKind::k1f1b, p, m, 1));
      const SimResult z = simulate(make_schedule(ScheduleKind::kZeroBubble, p, m, 1));
      EXPECT_LE(z.bubble, 0.5 * a.bubble + 1e-9) << "p=" << p << " m=" << m;
      // The pipeline's memory: its fullest rank (1f1b's rank 0 holds p).
      EXPECT_LE(*std::max_element(z.peak_activations.begin(), z.peak_activations.end()),
                *std::max_element(a.peak_activations.begin(), a.peak_activations.end()))
          << "p=" << p << " m=" << m;
    }
  }
}

TEST(PipelineSchedule, ActivationMemoryOf1f1bAndGpipe) {
  const SimResult a = simulate(make_schedule(ScheduleKind::k1f1b, 4, 8, 1));
  const SimResult g = simulate(make_schedule(ScheduleKind::kGpipe, 4, 8, 1));
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(a.peak_activations[r], 4 - r);  // p - r in flight
    EXPECT_EQ(g.peak_activations[r], 8);      // every micro-batch
  }
}

TEST(PipelineSchedule, WrongOptionsAreNamed) {
  auto message = [](auto fn) {
    try {
      fn();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([] { make_schedule(ScheduleKind::k1f1b, 4, 8, 2); }).find("interleaved"),
            std::string::npos);
  EXPECT_NE(message([] { make_schedule(ScheduleKind::kInterleaved, 4, 6, 2); }).find("multiple"),
            std::string::npos);
  EXPECT_NE(message([] { make_schedule(ScheduleKind::kGpipe, 0, 8, 1); }).find(">= 1"),
            std::string::npos);
  ScheduleKind k;
  EXPECT_FALSE(parse_schedule("2f2b", &k));
  EXPECT_TRUE(parse_schedule("zb", &k));
  EXPECT_EQ(k, ScheduleKind::kZeroBubble);
}

TEST(PipelineSimulator, FindsMisorderedMessagesAndDeadlocks) {
  // Two receives from one peer swapped: Tide would pair them wrongly.
  Schedule s = make_schedule(ScheduleKind::k1f1b, 2, 4, 1);
  std::vector<Action>& r1 = s.rank[1];
  std::vector<size_t> recvs;
  for (size_t i = 0; i < r1.size(); ++i) {
    if (r1[i].op == Op::kRecv) recvs.push_back(i);
  }
  ASSERT_GE(recvs.size(), 2u);
  std::swap(r1[recvs[0]].msg, r1[recvs[1]].msg);
  SimResult bad = simulate(s);
  EXPECT_FALSE(bad.ok);
  EXPECT_NE(bad.problem.find("order"), std::string::npos) << bad.problem;

  // Both ranks send first, then receive, each transfer on its own: a
  // rendezvous deadlock the simulator must report, naming both ranks.
  Schedule d;
  d.p = 2;
  d.m = 1;
  d.rank.resize(2);
  Action send0{Op::kSend, 0, 0, 1, Message{false, 0, 0}, 1};
  Action recv0{Op::kRecv, 0, 1, 1, Message{true, 0, 1}, 2};
  Action send1{Op::kSend, 0, 1, 0, Message{true, 0, 1}, 1};
  Action recv1{Op::kRecv, 0, 0, 0, Message{false, 0, 0}, 2};
  d.rank[0] = {send0, recv0};
  d.rank[1] = {send1, recv1};
  SimResult dl = simulate(d);
  EXPECT_FALSE(dl.ok);
  EXPECT_NE(dl.problem.find("deadlock"), std::string::npos) << dl.problem;
  EXPECT_NE(dl.problem.find("rank 1"), std::string::npos) << dl.problem;
}

TEST(PipelinePartition, BalancedSplitsGiveTheRemainderToTheMiddleStagesFirst) {
  EXPECT_EQ(stage_layers(8, 2), (std::vector<int>{4, 4}));
  EXPECT_EQ(stage_layers(8, 1), (std::vector<int>{8}));
  EXPECT_EQ(stage_layers(8, 3), (std::vector<int>{3, 3, 2}));  // middle, then the first
  EXPECT_EQ(stage_layers(10, 4), (std::vector<int>{2, 3, 3, 2}));
  EXPECT_EQ(stage_layers(11, 4), (std::vector<int>{3, 3, 3, 2}));
  EXPECT_EQ(stage_layers(5, 5), (std::vector<int>{1, 1, 1, 1, 1}));
  for (int layers = 1; layers <= 24; ++layers) {
    for (int stages = 1; stages <= layers; ++stages) {
      const std::vector<int> c = stage_layers(layers, stages);
      ASSERT_EQ(static_cast<int>(c.size()), stages);
      const auto [lo, hi] = std::minmax_element(c.begin(), c.end());
      EXPECT_GE(*lo, 1);
      EXPECT_LE(*hi - *lo, 1) << layers << " over " << stages;
      EXPECT_EQ(stage_bounds(c).back(), layers);
      EXPECT_EQ(stage_bounds(c).front(), 0);
    }
  }
}

TEST(PipelinePartition, GivenSplitsAreCheckedAndNamed) {
  EXPECT_EQ(stage_layers(8, 2, "5,3"), (std::vector<int>{5, 3}));
  EXPECT_EQ(stage_bounds({5, 3}), (std::vector<int>{0, 5, 8}));
  auto message = [](int layers, int stages, const std::string& spec) {
    try {
      stage_layers(layers, stages, spec);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_NE(message(8, 2, "4,3").find("7 layers"), std::string::npos) << message(8, 2, "4,3");
  EXPECT_NE(message(8, 2, "8").find("1 stages"), std::string::npos);
  EXPECT_NE(message(8, 2, "4,x").find("'x'"), std::string::npos);
  EXPECT_NE(message(8, 2, "4,4,").find("''"), std::string::npos);
  EXPECT_NE(message(8, 2, "0,8").find("'0'"), std::string::npos);
  EXPECT_EQ(stage_layers(8, 2, "4, 4"), (std::vector<int>{4, 4}));  // spaces are fine
  EXPECT_NE(message(3, 4, "").find("every stage needs a layer"), std::string::npos);
  EXPECT_NE(message(3, 0, "").find("at least one stage"), std::string::npos);
}

}  // namespace
}  // namespace tide_train::pipeline
