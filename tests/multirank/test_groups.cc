// Group semantics: operations between tideGroupStart and tideGroupEnd are
// launched together, so orders that would deadlock if run eagerly must
// complete. Checked with ranks as threads of this process and as processes
// (this executable re-runs itself with --worker=groups).
//
//  AllPairs:    every rank sends to and receives from every peer; even ranks
//               post all receives first, odd ranks all sends first, in
//               opposite peer orders; a small and a >1 MiB message size.
//  Mixed:       two AllReduces on one communicator plus ring send/recv (two
//               messages per pair, matched in issue order) in one group.
//  TwoComms:    one group over a communicator and a split of it.
//  Nested:      the inner tideGroupEnd launches nothing.
//  SelfSendRecv: a rank sends to itself inside a group.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "rank_harness.h"

namespace tide_test {
namespace {

// Value of element i of the message from src to dst with a tag.
int32_t V(int src, int dst, size_t i, int tag) {
  return static_cast<int32_t>(src * 1000003 + dst * 1009 + static_cast<int64_t>(i) * 7 + tag);
}

std::vector<int32_t> Msg(int src, int dst, size_t count, int tag) {
  std::vector<int32_t> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = V(src, dst, i, tag);
  return v;
}

// Compares a received message; logs the first mismatch.
bool CheckMsg(ThreadRank& ctx, const char* what, const std::vector<int32_t>& got, int src, int dst,
              int tag) {
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != V(src, dst, i, tag)) {
      ctx.Logf("rank %d: %s: message %d->%d (%zu elements) index %zu: got %d expected %d\n",
               ctx.rank, what, src, dst, got.size(), i, got[i], V(src, dst, i, tag));
      return false;
    }
  }
  return true;
}

int AllPairs(ThreadRank& ctx, size_t count) {
  const int r = ctx.rank, n = ctx.nranks;
  std::vector<std::vector<int32_t>> sendb(n), recvb(n);
  for (int p = 0; p < n; ++p) {
    if (p == r) continue;
    sendb[p] = Msg(r, p, count, 0);
    recvb[p].assign(count, -1);
  }
  CHECK_RC(tideGroupStart());
  if (r % 2 == 0) {
    for (int p = 0; p < n; ++p) {
      if (p != r) CHECK_RC(tideRecv(recvb[p].data(), count, tideInt32, p, ctx.comm, nullptr));
    }
    for (int p = 0; p < n; ++p) {
      if (p != r) CHECK_RC(tideSend(sendb[p].data(), count, tideInt32, p, ctx.comm, nullptr));
    }
  } else {
    for (int p = n - 1; p >= 0; --p) {
      if (p != r) CHECK_RC(tideSend(sendb[p].data(), count, tideInt32, p, ctx.comm, nullptr));
    }
    for (int p = n - 1; p >= 0; --p) {
      if (p != r) CHECK_RC(tideRecv(recvb[p].data(), count, tideInt32, p, ctx.comm, nullptr));
    }
  }
  CHECK_RC(tideGroupEnd());
  for (int p = 0; p < n; ++p) {
    if (p != r && !CheckMsg(ctx, "AllPairs", recvb[p], p, r, 0)) return 1;
  }
  return 0;
}

int Mixed(ThreadRank& ctx) {
  const int r = ctx.rank, n = ctx.nranks, next = (r + 1) % n, prev = (r - 1 + n) % n;
  const size_t ca = 1000, cb = 70001;
  std::vector<int32_t> a_send(ca), a_recv(ca, -1), b(cb);
  for (size_t i = 0; i < ca; ++i) a_send[i] = static_cast<int32_t>((i + r) % 5);
  for (size_t i = 0; i < cb; ++i) b[i] = static_cast<int32_t>((i * 31 + r * 17) % 101);
  std::vector<int32_t> s1 = Msg(r, next, 5, 1), s2 = Msg(r, next, 70000, 2);
  std::vector<int32_t> r1(5, -1), r2(70000, -1);
  CHECK_RC(tideGroupStart());
  CHECK_RC(tideAllReduce(a_send.data(), a_recv.data(), ca, tideInt32, tideSum, ctx.comm, nullptr));
  CHECK_RC(tideSend(s1.data(), s1.size(), tideInt32, next, ctx.comm, nullptr));
  CHECK_RC(tideRecv(r1.data(), r1.size(), tideInt32, prev, ctx.comm, nullptr));
  CHECK_RC(tideAllReduce(b.data(), b.data(), cb, tideInt32, tideMax, ctx.comm, nullptr));
  CHECK_RC(tideSend(s2.data(), s2.size(), tideInt32, next, ctx.comm, nullptr));
  CHECK_RC(tideRecv(r2.data(), r2.size(), tideInt32, prev, ctx.comm, nullptr));
  CHECK_RC(tideGroupEnd());
  for (size_t i = 0; i < ca; ++i) {
    int32_t want = 0;
    for (int q = 0; q < n; ++q) want += static_cast<int32_t>((i + q) % 5);
    if (a_recv[i] != want) {
      ctx.Logf("rank %d: Mixed: AllReduce sum index %zu got %d expected %d\n", r, i, a_recv[i],
               want);
      return 1;
    }
  }
  for (size_t i = 0; i < cb; ++i) {
    int32_t want = 0;
    for (int q = 0; q < n; ++q)
      want = std::max(want, static_cast<int32_t>((i * 31 + q * 17) % 101));
    if (b[i] != want) {
      ctx.Logf("rank %d: Mixed: in-place AllReduce max index %zu got %d expected %d\n", r, i, b[i],
               want);
      return 1;
    }
  }
  if (!CheckMsg(ctx, "Mixed first message", r1, prev, r, 1)) return 1;
  if (!CheckMsg(ctx, "Mixed second message", r2, prev, r, 2)) return 1;
  return 0;
}

int TwoComms(ThreadRank& ctx) {
  const int r = ctx.rank, n = ctx.nranks;
  tideComm_t sub = nullptr;
  CHECK_RC(tideCommSplit(ctx.comm, r % 2, r, &sub, nullptr));
  int sr = -1, sn = -1;
  CHECK_RC(tideCommUserRank(sub, &sr));
  CHECK_RC(tideCommCount(sub, &sn));
  const int snext = (sr + 1) % sn, sprev = (sr - 1 + sn) % sn;
  const size_t c = 3000;
  std::vector<int32_t> all(c, r + 1), all_out(c, -1), part(c, r), part_out(c, -1);
  std::vector<int32_t> s = Msg(sr, snext, 4097, 3), rv(4097, -1);
  int code = 0;
  tideResult_t rc = tideGroupStart();
  if (rc == tideSuccess)
    rc = tideAllReduce(all.data(), all_out.data(), c, tideInt32, tideSum, ctx.comm, nullptr);
  if (rc == tideSuccess) rc = tideSend(s.data(), s.size(), tideInt32, snext, sub, nullptr);
  if (rc == tideSuccess)
    rc = tideAllReduce(part.data(), part_out.data(), c, tideInt32, tideSum, sub, nullptr);
  if (rc == tideSuccess) rc = tideRecv(rv.data(), rv.size(), tideInt32, sprev, sub, nullptr);
  tideResult_t end = tideGroupEnd();
  if (rc != tideSuccess || end != tideSuccess) {
    ctx.Logf("rank %d: TwoComms: issue %s, tideGroupEnd %s: %s\n", r, tideGetErrorString(rc),
             tideGetErrorString(end), tideGetLastError(ctx.comm));
    code = 1;
  }
  int32_t want_all = n * (n + 1) / 2, want_part = 0;
  for (int q = r % 2; q < n; q += 2) want_part += q;
  for (size_t i = 0; code == 0 && i < c; ++i) {
    if (all_out[i] != want_all || part_out[i] != want_part) {
      ctx.Logf("rank %d: TwoComms index %zu: comm sum %d (want %d), split sum %d (want %d)\n", r, i,
               all_out[i], want_all, part_out[i], want_part);
      code = 1;
    }
  }
  if (code == 0 && !CheckMsg(ctx, "TwoComms ring on split", rv, sprev, sr, 3)) code = 1;
  tideResult_t drc = code == 0 ? tideCommDestroy(sub) : tideCommAbort(sub);
  if (drc != tideSuccess && code == 0) {
    ctx.Logf("rank %d: destroying the split failed: %s\n", r, tideGetErrorString(drc));
    code = 1;
  }
  return code;
}

int Nested(ThreadRank& ctx) {
  const int r = ctx.rank, n = ctx.nranks, next = (r + 1) % n, prev = (r - 1 + n) % n;
  std::vector<int32_t> s = Msg(r, next, 300000, 4), rv(300000, -1);
  CHECK_RC(tideGroupStart());
  CHECK_RC(tideGroupStart());
  CHECK_RC(tideRecv(rv.data(), rv.size(), tideInt32, prev, ctx.comm, nullptr));
  CHECK_RC(tideGroupEnd());  // inner: must not block on the receive
  CHECK_RC(tideSend(s.data(), s.size(), tideInt32, next, ctx.comm, nullptr));
  CHECK_RC(tideGroupEnd());
  return CheckMsg(ctx, "Nested", rv, prev, r, 4) ? 0 : 1;
}

int SelfSendRecv(ThreadRank& ctx) {
  const int r = ctx.rank;
  std::vector<int32_t> s = Msg(r, r, 10000, 5), rv(10000, -1);
  CHECK_RC(tideGroupStart());
  CHECK_RC(tideSend(s.data(), s.size(), tideInt32, r, ctx.comm, nullptr));
  CHECK_RC(tideRecv(rv.data(), rv.size(), tideInt32, r, ctx.comm, nullptr));
  CHECK_RC(tideGroupEnd());
  return CheckMsg(ctx, "SelfSendRecv", rv, r, r, 5) ? 0 : 1;
}

int GroupChecks(ThreadRank& ctx) {
  struct Step {
    const char* name;
    int (*fn)(ThreadRank&);
  };
  static const Step kSteps[] = {
      {"AllPairs small", [](ThreadRank& c) { return AllPairs(c, 3); }},
      {"AllPairs large", [](ThreadRank& c) { return AllPairs(c, (size_t{1} << 18) + 1); }},
      {"Mixed", Mixed},
      {"TwoComms", TwoComms},
      {"Nested", Nested},
      {"SelfSendRecv", SelfSendRecv},
  };
  for (const Step& s : kSteps) {
    if (s.fn(ctx) != 0) {
      ctx.Logf("rank %d: step '%s' failed\n", ctx.rank, s.name);
      return 1;
    }
  }
  ctx.Logf("rank %d of %d: %zu group checks passed\n", ctx.rank, ctx.nranks,
           sizeof(kSteps) / sizeof(kSteps[0]));
  return 0;
}

void RunAsProcesses(int nranks, bool tcp) {
  ProcessRunOptions o;
  o.exe = SelfExe();
  o.args = {"--worker=groups"};
  o.nranks = nranks;
  o.timeout_ms = 150000;
  o.env.emplace_back("TIDE_TIMEOUT", "120");
  if (tcp) o.env.emplace_back("TIDE_SHM_DISABLE", "1");
  RunResult r = RunProcesses(o);
  EXPECT_TRUE(r.AllOk()) << r.Describe();
  if (r.AllOk()) printf("%s", r.ranks[0].output.c_str());
}

TEST(Groups, Threads4) {
  RunResult r = RunThreads({4, 150000}, GroupChecks);
  EXPECT_TRUE(r.AllOk()) << r.Describe();
}
TEST(Groups, Processes2) { RunAsProcesses(2, false); }
TEST(Groups, Processes3) { RunAsProcesses(3, false); }
TEST(Groups, Processes4Tcp) { RunAsProcesses(4, true); }

}  // namespace
}  // namespace tide_test

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "--worker=groups") == 0) {
    return tide_test::RunEnvRank(tide_test::GroupChecks);
  }
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
