// Ranks as threads of one process: tideGetUniqueId once, tideCommInitRank on
// four threads. Checks AllReduce and Broadcast with the same serial reference
// as the multi-process worker, then tideCommSplit (even/odd colors, keys
// reversed, and a NOCOLOR rank) with collectives on the new communicators.
#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "coll_check.h"
#include "gtest/gtest.h"
#include "rank_harness.h"

namespace tide_test {
namespace {

constexpr int kRanks = 4;

int RunSpecs(ThreadRank& ctx, const std::vector<std::string>& specs) {
  std::vector<CaseSpec> cases;
  for (const auto& s : specs) {
    std::string err;
    if (!ExpandSpec(s, ctx.nranks, &cases, &err)) {
      ctx.Logf("bad spec %s: %s\n", s.c_str(), err.c_str());
      return 1;
    }
  }
  int failures = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    CaseEnv env;
    env.comm = ctx.comm;
    env.rank = ctx.rank;
    env.nranks = ctx.nranks;
    env.seed = 777;
    env.case_id = i;
    CaseResult res = RunCase(cases[i], env, &ctx.log);
    if (res == kCaseError) return 1;
    if (res == kCaseMismatch) ++failures;
  }
  return failures ? 1 : 0;
}

TEST(Threads, AllReduceAndBroadcast) {
  RunResult r = RunThreads({kRanks, 240000}, [](ThreadRank& ctx) {
    return RunSpecs(ctx, {"colls=allreduce,broadcast;counts=0,1,7,4097",
                          "colls=allreduce,broadcast;dtypes=float32,int8,bfloat16;ops=sum,avg;"
                          "counts=large;roots=ends"});
  });
  EXPECT_TRUE(r.AllOk()) << r.Describe();
}

// Two independent jobs (2 and 3 ranks) in one process at the same time:
// communicators used concurrently from different threads share no state.
TEST(Threads, TwoJobsConcurrently) {
  RunResult a, b;
  auto job = [](int n, RunResult* out) {
    *out = RunThreads({n, 240000}, [](ThreadRank& ctx) {
      return RunSpecs(ctx, {"colls=allreduce,allgather,sendrecv;dtypes=float32,int64;ops=sum,max;"
                            "counts=1,4097,70000;inplace=0"});
    });
  };
  std::thread ta(job, 2, &a), tb(job, 3, &b);
  ta.join();
  tb.join();
  EXPECT_TRUE(a.AllOk()) << a.Describe();
  EXPECT_TRUE(b.AllOk()) << b.Describe();
}

// Split by parity with reversed keys: new rank order is descending old rank.
int SplitChecks(ThreadRank& ctx) {
  const int r = ctx.rank, n = ctx.nranks;
  tideComm_t sub = nullptr;
  CHECK_RC(tideCommSplit(ctx.comm, r % 2, n - r, &sub, nullptr));
  if (!sub) {
    ctx.Logf("rank %d: split returned a NULL communicator\n", r);
    return 1;
  }
  std::vector<int> members;  // old ranks of my color, in new-rank order
  for (int q = n - 1; q >= 0; --q) {
    if (q % 2 == r % 2) members.push_back(q);
  }
  const int want_rank =
      static_cast<int>(std::find(members.begin(), members.end(), r) - members.begin());
  int sr = -1, sn = -1;
  CHECK_RC(tideCommUserRank(sub, &sr));
  CHECK_RC(tideCommCount(sub, &sn));
  int code = 0;
  if (sr != want_rank || sn != static_cast<int>(members.size())) {
    ctx.Logf("rank %d: split rank %d of %d, expected %d of %zu\n", r, sr, sn, want_rank,
             members.size());
    code = 1;
  }
  // AllGather of old ranks shows the order; AllReduce sums them.
  int32_t mine = r;
  std::vector<int32_t> gathered(members.size(), -1);
  int64_t sum_in = r, sum_out = -1;
  if (code == 0) {
    tideResult_t rc = tideAllGather(&mine, gathered.data(), 1, tideInt32, sub, nullptr);
    if (rc == tideSuccess)
      rc = tideAllReduce(&sum_in, &sum_out, 1, tideInt64, tideSum, sub, nullptr);
    if (rc != tideSuccess) {
      ctx.Logf("rank %d: collective on split failed: %s: %s\n", r, tideGetErrorString(rc),
               tideGetLastError(sub));
      code = 1;
    }
  }
  if (code == 0) {
    int64_t want_sum = 0;
    for (size_t i = 0; i < members.size(); ++i) {
      want_sum += members[i];
      if (gathered[i] != members[i]) {
        ctx.Logf("rank %d: split AllGather[%zu] = %d, expected old rank %d\n", r, i, gathered[i],
                 members[i]);
        code = 1;
      }
    }
    if (sum_out != want_sum) {
      ctx.Logf("rank %d: split AllReduce = %lld, expected %lld\n", r,
               static_cast<long long>(sum_out), static_cast<long long>(want_sum));
      code = 1;
    }
  }
  tideResult_t drc = code == 0 ? tideCommDestroy(sub) : tideCommAbort(sub);
  if (drc != tideSuccess && code == 0) {
    ctx.Logf("rank %d: destroying the split failed: %s\n", r, tideGetErrorString(drc));
    code = 1;
  }
  if (code) return code;

  // The last rank opts out; the others form one communicator in old order.
  tideComm_t rest = nullptr;
  CHECK_RC(tideCommSplit(ctx.comm, r == n - 1 ? TIDE_SPLIT_NOCOLOR : 7, r, &rest, nullptr));
  if (r == n - 1) {
    if (rest != nullptr) {
      ctx.Logf("rank %d: NOCOLOR split returned a communicator\n", r);
      return 1;
    }
    return 0;
  }
  if (!rest) {
    ctx.Logf("rank %d: split returned NULL\n", r);
    return 1;
  }
  CHECK_RC(tideCommCount(rest, &sn));
  CHECK_RC(tideCommUserRank(rest, &sr));
  float one = 1.0f, total = 0;
  CHECK_RC(tideAllReduce(&one, &total, 1, tideFloat32, tideSum, rest, nullptr));
  if (sn != n - 1 || sr != r || total != static_cast<float>(n - 1)) {
    ctx.Logf("rank %d: NOCOLOR split: rank %d of %d, sum %g\n", r, sr, sn, total);
    code = 1;
  }
  drc = tideCommDestroy(rest);
  if (drc != tideSuccess && code == 0) {
    ctx.Logf("rank %d: destroying the split failed: %s\n", r, tideGetErrorString(drc));
    code = 1;
  }
  return code;
}

TEST(Threads, Split) {
  RunResult r = RunThreads({kRanks, 120000}, SplitChecks);
  EXPECT_TRUE(r.AllOk()) << r.Describe();
}

}  // namespace
}  // namespace tide_test
