// TIDE_CHECK fingerprint comparison (core/check.h): which field is named and
// how ranks are grouped by value.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/algorithm.h"
#include "core/check.h"

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

}  // namespace
}  // namespace tide
