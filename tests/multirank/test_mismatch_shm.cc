// Mismatched calls over shared memory with TIDE_CHECK=0: the shm transport's
// operation tags (carried in every FIFO slot and single-copy descriptor) must
// turn a call that differs across ranks into an error, never a crash, a hang
// or a silent success, including when the buffers have the same size
// (float32 vs int32). Real processes; the executable is its own worker.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "rank_harness.h"
#include "tide/tide.h"

namespace tide_test {
namespace {

// Worker: one call that differs on the last rank; prints "RC <rc> <message>".
int Worker(const char* mode, size_t count) {
  tideComm_t comm = nullptr;
  tideResult_t rc = tideCommInitFromEnv(&comm);
  if (rc != tideSuccess) return 100 + static_cast<int>(rc);
  int rank = 0, n = 0;
  tideCommUserRank(comm, &rank);
  tideCommCount(comm, &n);
  const bool odd = rank == n - 1;
  std::vector<char> in(count * 8, 1), out(count * 8, 0);
  if (strcmp(mode, "dtype") == 0) {
    rc = tideAllReduce(in.data(), out.data(), count, odd ? tideInt32 : tideFloat32, tideSum, comm,
                       nullptr);
  } else if (strcmp(mode, "count") == 0) {
    rc = tideAllReduce(in.data(), out.data(), odd ? count * 2 : count, tideFloat32, tideSum, comm,
                       nullptr);
  } else if (strcmp(mode, "root") == 0) {
    rc = tideBroadcast(in.data(), out.data(), count, tideFloat32, odd ? 1 : 0, comm, nullptr);
  } else {
    return 2;
  }
  std::string msg = rc == tideSuccess ? "" : tideGetLastError(comm);
  for (char& c : msg) c = c == '\n' ? ' ' : c;
  std::printf("RC %d %s\n", static_cast<int>(rc), msg.c_str());
  std::fflush(stdout);
  if (rc == tideSuccess) {
    tideCommDestroy(comm);
  } else {
    tideCommAbort(comm);
  }
  return 0;
}

struct Outcome {
  int errors = 0;
  int mismatched = 0;  // errors that name the mismatched operation
};

Outcome RunMode(const char* mode, size_t count, int nranks) {
  ProcessRunOptions o;
  o.exe = SelfExe();
  o.args = {"--worker", mode, std::to_string(count)};
  o.nranks = nranks;
  o.env = {{"TIDE_CHECK", "0"}, {"TIDE_TIMEOUT", "10"}};
  o.timeout_ms = 60000;
  o.kill_others_after_failure_ms = 20000;
  RunResult r = RunProcesses(o);
  Outcome out;
  EXPECT_TRUE(r.error.empty()) << r.error;
  EXPECT_FALSE(r.timed_out) << r.Describe();
  for (const RankResult& rr : r.ranks) {
    EXPECT_TRUE(rr.ok()) << mode << " rank " << rr.rank << " crashed or failed\n" << r.Describe();
    size_t at = rr.output.find("RC ");
    if (at == std::string::npos) continue;
    int rc = std::atoi(rr.output.c_str() + at + 3);
    std::string line = rr.output.substr(at, rr.output.find('\n', at) - at);
    std::printf("  %s %zu, rank %d: %s\n", mode, count, rr.rank, line.substr(0, 260).c_str());
    if (rc != 0) ++out.errors;
    if (rc == tideInvalidUsage && line.find("mismatched operation") != std::string::npos) {
      ++out.mismatched;
    }
  }
  return out;
}

// Same bytes, different datatype: without tags this would "work".
TEST(MismatchShm, DatatypeSameSize) {
  for (size_t count : {size_t{1024}, size_t{1} << 20}) {  // FIFO and single-copy sizes
    Outcome o = RunMode("dtype", count, 2);
    EXPECT_EQ(o.errors, 2) << "count " << count;
    EXPECT_GE(o.mismatched, 1) << "count " << count;
  }
}

TEST(MismatchShm, Count) {
  for (size_t count : {size_t{4096}, size_t{1} << 20}) {
    Outcome o = RunMode("count", count, 2);
    EXPECT_EQ(o.errors, 2) << "count " << count;
    EXPECT_GE(o.mismatched, 1) << "count " << count;
  }
}

// Three ranks, the last names another root: some rank must fail (which ones
// depends on the algorithm; the core's root confirmation covers the rest).
TEST(MismatchShm, BroadcastRoot) {
  for (size_t count : {size_t{4096}, size_t{1} << 20}) {
    Outcome o = RunMode("root", count, 3);
    EXPECT_GE(o.errors, 1) << "count " << count;
  }
}

}  // namespace
}  // namespace tide_test

int main(int argc, char** argv) {
  if (argc >= 4 && std::strcmp(argv[1], "--worker") == 0) {
    return tide_test::Worker(argv[2], std::strtoull(argv[3], nullptr, 10));
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
