// TIDE_CHECK fingerprint comparison (core/exec/check.h): which field is named and
// how ranks are grouped by value; operation tags and the net adapter's use of
// them (a different op tag gives a different net tag for every chunk).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "core/algorithm.h"
#include "core/exec/check.h"
#include "transports/net/net_connection.h"

namespace tide {
namespace {

OpPrint AllReduce(uint64_t count) {
  OpPrint p;
  p.coll = static_cast<int32_t>(CollType::AllReduce);
  p.dtype = tideFloat;
  p.op = tideSum;
  p.count = count;
  return p;
}

std::vector<std::vector<OpPrint>> Same(int n, const OpPrint& p) {
  return std::vector<std::vector<OpPrint>>(n, std::vector<OpPrint>{p});
}

TEST(Check, AgreementPasses) {
  EXPECT_TRUE(compareOpPrints(Same(4, AllReduce(10)), {3, 3, 3, 3}).ok());
  EXPECT_TRUE(compareOpPrints({}, {}).ok());
}

TEST(Check, CountNamesFieldAndRanks) {
  auto p = Same(4, AllReduce(1024));
  p[2][0].count = 2048;
  Status s = compareOpPrints(p, {7, 7, 7, 7});
  EXPECT_EQ(s.code(), tideInvalidUsage);
  EXPECT_NE(s.message().find("field: count"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("ranks 0,1,3: 1024; rank 2: 2048"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("allreduce call #7"), std::string::npos) << s.message();
}

TEST(Check, EachField) {
  struct Case {
    const char* field;
    void (*change)(OpPrint*);
  };
  const Case cases[] = {
      {"collective", [](OpPrint* p) { p->coll = static_cast<int32_t>(CollType::Broadcast); }},
      {"datatype", [](OpPrint* p) { p->dtype = tideDouble; }},
      {"op", [](OpPrint* p) { p->op = tideMax; }},
      {"root", [](OpPrint* p) { p->root = 1; }},
  };
  for (const Case& c : cases) {
    auto p = Same(3, AllReduce(5));
    c.change(&p[1][0]);
    Status s = compareOpPrints(p, {0, 0, 0});
    EXPECT_EQ(s.code(), tideInvalidUsage) << c.field;
    EXPECT_NE(s.message().find(std::string("field: ") + c.field), std::string::npos) << s.message();
  }
}

TEST(Check, SequenceAndGroupLength) {
  Status s = compareOpPrints(Same(2, AllReduce(5)), {4, 5});
  EXPECT_NE(s.message().find("field: sequence"), std::string::npos) << s.message();
  auto p = Same(2, AllReduce(5));
  p[1].push_back(AllReduce(6));
  s = compareOpPrints(p, {0, 0});
  EXPECT_EQ(s.code(), tideInvalidUsage);
  EXPECT_NE(s.message().find("collectives in the group"), std::string::npos) << s.message();
}

TEST(Check, SecondOperationOfAGroup) {
  auto p = Same(2, AllReduce(5));
  for (auto& v : p) v.push_back(AllReduce(9));
  p[0][1].dtype = tideInt32;
  Status s = compareOpPrints(p, {1, 1});
  EXPECT_NE(s.message().find("operation 1 of the group"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("rank 0: int32; rank 1: float32"), std::string::npos) << s.message();
}

TEST(OpTag, EveryFieldChangesIt) {
  const int bc = static_cast<int>(CollType::Broadcast);
  const int ar = static_cast<int>(CollType::AllReduce);
  const uint32_t base = opTagOf(7, bc, 4096, tideFloat, -1, 0);
  EXPECT_NE(base, 0u);
  EXPECT_EQ(base, opTagOf(7, bc, 4096, tideFloat, -1, 0));
  EXPECT_NE(base, opTagOf(8, bc, 4096, tideFloat, -1, 0));       // sequence
  EXPECT_NE(base, opTagOf(7, ar, 4096, tideFloat, -1, 0));       // collective
  EXPECT_NE(base, opTagOf(7, bc, 8192, tideFloat, -1, 0));       // count
  EXPECT_NE(base, opTagOf(7, bc, 4096, tideInt32, -1, 0));       // same-size datatype
  EXPECT_NE(base, opTagOf(7, bc, 4096, tideFloat, tideSum, 0));  // operator
  EXPECT_NE(base, opTagOf(7, bc, 4096, tideFloat, -1, 1));       // root
}

// Flipping any one bit of any one field, from several starting points,
// changes the tag (for fixed other fields the 64-bit state is a bijection of
// each field, so only the fold to 32 bits could collide).
TEST(OpTag, EveryBitOfEveryFieldChangesIt) {
  struct Fields {
    uint64_t seq;
    int coll;
    uint64_t count;
    int dtype;
    int op;
    int root;
    uint32_t tag() const { return opTagOf(seq, coll, count, dtype, op, root); }
  };
  const Fields bases[] = {
      {0, static_cast<int>(CollType::AllReduce), 0, tideFloat, tideSum, -1},
      {7, static_cast<int>(CollType::Broadcast), 4096, tideInt32, -1, 0},
      {~uint64_t{0}, static_cast<int>(CollType::Reduce), ~uint64_t{0}, tideDouble, tideMax, 3},
  };
  for (const Fields& b : bases) {
    const uint32_t base = b.tag();
    EXPECT_NE(base, 0u);
    for (int bit = 0; bit < 64; ++bit) {
      Fields f = b;
      f.seq ^= uint64_t{1} << bit;
      EXPECT_NE(f.tag(), base) << "seq bit " << bit;
      f = b;
      f.count ^= uint64_t{1} << bit;
      EXPECT_NE(f.tag(), base) << "count bit " << bit;
    }
    for (int bit = 0; bit < 32; ++bit) {
      const int m = static_cast<int>(1u << bit);
      Fields f = b;
      f.coll ^= m;
      EXPECT_NE(f.tag(), base) << "collective bit " << bit;
      f = b;
      f.dtype ^= m;
      EXPECT_NE(f.tag(), base) << "datatype bit " << bit;
      f = b;
      f.op ^= m;
      EXPECT_NE(f.tag(), base) << "op bit " << bit;
      f = b;
      f.root ^= m;
      EXPECT_NE(f.tag(), base) << "root bit " << bit;
    }
  }
  // Fields do not alias one another: swapping values between fields changes it.
  EXPECT_NE(opTagOf(1, 2, 3, 4, 5, 6), opTagOf(3, 2, 1, 4, 5, 6));
  EXPECT_NE(opTagOf(1, 2, 3, 4, 5, 6), opTagOf(1, 4, 3, 2, 5, 6));
  EXPECT_NE(opTagOf(1, 2, 3, 4, 5, 6), opTagOf(1, 2, 3, 4, 6, 5));
}

// Consecutive calls (the common case: same call, next sequence number) spread
// over the 32 bits: no collision among 4096 of them, and every bit varies.
TEST(OpTag, ConsecutiveCallsSpread) {
  std::vector<uint32_t> tags;
  uint32_t ones = 0, zeros = 0;
  for (uint64_t seq = 0; seq < 4096; ++seq) {
    uint32_t t = opTagOf(seq, static_cast<int>(CollType::AllReduce), 1024, tideFloat, tideSum, -1);
    tags.push_back(t);
    ones |= t;
    zeros |= ~t;
  }
  std::sort(tags.begin(), tags.end());
  EXPECT_EQ(std::adjacent_find(tags.begin(), tags.end()), tags.end());
  EXPECT_EQ(ones, 0xffffffffu);
  EXPECT_EQ(zeros, 0xffffffffu);
}

// Cost on the hot path (one call per collective): prints ns per call. Each
// call depends on the previous result, so this is latency, not throughput.
TEST(OpTag, Timing) {
  constexpr int kCalls = 2000000;
  uint32_t acc = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kCalls; ++i) {
    acc += opTagOf(static_cast<uint64_t>(i) + acc, 0, 4096 + (acc & 1), tideFloat, tideSum, -1);
  }
  const double ns =
      std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(acc, 0u);  // keeps the loop
  std::printf("[ optag  ] opTagOf: %.2f ns/call\n", ns / kCalls);
}

TEST(OpTag, NetTagsCarryIt) {
  for (uint32_t seq : {0u, 1u, 0x7fffu, 0x8000u}) {
    for (size_t idx : {size_t{0}, size_t{1}, size_t{0xffff}}) {
      EXPECT_EQ(NetConnection::netTag(0, seq, idx), NetConnection::chunkTag(seq, idx));
      uint32_t prev = 0;
      for (uint64_t c = 0; c < 200; ++c) {
        uint32_t t = opTagOf(c, 0, 4096, tideFloat, tideSum, -1);
        int a = NetConnection::netTag(t, seq, idx);
        EXPECT_GE(a, 0);
        if (c > 0) {
          EXPECT_NE(a, NetConnection::netTag(prev, seq, idx)) << c;
        }
        EXPECT_NE(a, NetConnection::netTag(t ^ 1u, seq, idx));
        prev = t;
      }
    }
  }
}

}  // namespace
}  // namespace tide
