// TIDE_CHECK fingerprint comparison (core/check.h): which field is named and
// how ranks are grouped by value; operation tags and the net adapter's use of
// them (a different op tag gives a different net tag for every chunk).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/algorithm.h"
#include "core/check.h"
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
