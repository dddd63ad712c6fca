// The fault suite (run with TIDE_TIMEOUT=5): real processes through the rank
// harness running fault_worker, plus ranks as threads of this process for
// abort, non-blocking init, shrink and resource hygiene. Public API only.
//
//  Kill.*      a rank SIGKILLs itself mid-All-Reduce: every survivor errors
//              within 2 s of the kill and exits cleanly.
//  Stop.*      a rank SIGSTOPs itself: survivors report tideTimeout 4.5-6.5 s
//              after the stop, naming the operation, its number and a peer.
//  Shrink.*    after a kill, tideCommShrink on the survivors works.
//  Mismatch.*  one rank calls with another count/datatype/root/op/collective.
//  InitKill.*  a rank killed during init leaves no /dev/shm entry.
//  Threads.*   abort unblocks a blocked call within 1 s; non-blocking init
//              and shrink by polling; 100 init -> fault -> abort loops leave
//              no fd, thread, mapping or /dev/shm entry behind.
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "rank_harness.h"

namespace tide_test {
namespace {

using Clock = std::chrono::steady_clock;

std::string Worker() { return SelfDir() + "fault_worker"; }

bool Tcp() {
  const char* v = getenv("TIDE_SHM_DISABLE");
  return v != nullptr && strcmp(v, "1") == 0;
}

// Value after `key ` on the first line of `out` that starts with key.
bool FindLine(const std::string& out, const std::string& key, std::string* rest) {
  size_t pos = 0;
  while (pos < out.size()) {
    size_t end = out.find('\n', pos);
    if (end == std::string::npos) end = out.size();
    std::string line = out.substr(pos, end - pos);
    if (line.rfind(key + " ", 0) == 0) {
      *rest = line.substr(key.size() + 1);
      return true;
    }
    pos = end + 1;
  }
  return false;
}

struct ErrLine {
  bool found = false;
  long long ms = 0;
  int rc = 0;
  std::string msg;
};

ErrLine ParseErr(const std::string& out) {
  ErrLine e;
  std::string rest;
  if (!FindLine(out, "T_ERR", &rest)) return e;
  e.found = true;
  char* p = nullptr;
  e.ms = strtoll(rest.c_str(), &p, 10);
  e.rc = static_cast<int>(strtol(p, &p, 10));
  e.msg = *p == ' ' ? std::string(p + 1) : std::string(p);
  return e;
}

long long FaultMs(const std::string& out) {
  std::string rest;
  return FindLine(out, "T_FAULT", &rest) ? strtoll(rest.c_str(), nullptr, 10) : -1;
}

ProcessRunOptions Opts(int nranks, std::vector<std::string> args) {
  ProcessRunOptions o;
  o.exe = Worker();
  o.args = std::move(args);
  o.nranks = nranks;
  o.timeout_ms = 45000;
  o.kill_others_after_failure_ms = -1;  // the victim's death is expected
  return o;
}

// ---- Kill and stop ------------------------------------------------------------------

void RunKill(int nranks, int victim) {
  RunResult r = RunProcesses(Opts(nranks, {"kill", std::to_string(victim), "1500", "1048576"}));
  ASSERT_TRUE(r.error.empty()) << r.error;
  long long tFault = FaultMs(r.ranks[victim].output);
  ASSERT_GT(tFault, 0) << r.Describe();
  EXPECT_EQ(r.ranks[victim].term_signal, SIGKILL) << r.Describe();
  for (int k = 0; k < nranks; ++k) {
    if (k == victim) continue;
    const RankResult& rr = r.ranks[k];
    ErrLine e = ParseErr(rr.output);
    EXPECT_TRUE(rr.ok()) << "rank " << k << "\n" << r.Describe() << rr.output;
    ASSERT_TRUE(e.found) << "rank " << k << " saw no error\n" << rr.output;
    long long dt = e.ms - tFault;
    printf("%s %d ranks, victim %d: rank %d error %lld ms after the kill (rc %d): %s\n",
           Tcp() ? "tcp" : "shm", nranks, victim, k, dt, e.rc, e.msg.substr(0, 160).c_str());
    EXPECT_LE(dt, 2000) << "rank " << k << ": " << e.msg;
  }
  EXPECT_TRUE(r.leftover_shm.empty()) << r.leftover_shm.size() << " /dev/shm entries left";
}

TEST(Kill, Ranks2) { RunKill(2, 1); }
TEST(Kill, Ranks2Victim0) { RunKill(2, 0); }
TEST(Kill, Ranks3) { RunKill(3, 2); }
TEST(Kill, Ranks3Victim1) { RunKill(3, 1); }
TEST(Kill, Ranks4) { RunKill(4, 3); }
TEST(Kill, Ranks4Victim1) { RunKill(4, 1); }

void RunStop(int nranks) {
  const int victim = nranks - 1;
  ProcessRunOptions o = Opts(nranks, {"stop", std::to_string(victim), "1500", "262144"});
  o.kills.push_back({victim, 11000, SIGKILL});  // the stopped rank never ends by itself
  RunResult r = RunProcesses(o);
  ASSERT_TRUE(r.error.empty()) << r.error;
  long long tStop = FaultMs(r.ranks[victim].output);
  ASSERT_GT(tStop, 0) << r.Describe();
  for (int k = 0; k < nranks; ++k) {
    if (k == victim) continue;
    const RankResult& rr = r.ranks[k];
    ErrLine e = ParseErr(rr.output);
    EXPECT_TRUE(rr.ok()) << "rank " << k << "\n" << r.Describe() << rr.output;
    ASSERT_TRUE(e.found) << "rank " << k << " saw no error\n" << rr.output;
    long long dt = e.ms - tStop;
    printf("%s %d ranks: rank %d reported %d %lld ms after the stop: %s\n", Tcp() ? "tcp" : "shm",
           nranks, k, e.rc, dt, e.msg.substr(0, 200).c_str());
    EXPECT_EQ(e.rc, 8 /* tideTimeout */) << e.msg;
    EXPECT_GE(dt, 4500);
    EXPECT_LE(dt, 6500);
    EXPECT_NE(e.msg.find("allreduce #"), std::string::npos) << "no op/sequence: " << e.msg;
    EXPECT_NE(e.msg.find("rank "), std::string::npos) << "no peer: " << e.msg;
  }
}

TEST(Stop, Ranks2) { RunStop(2); }
TEST(Stop, Ranks3) { RunStop(3); }

// ---- Shrink after a kill ---------------------------------------------------------------

void RunShrink(int nranks) {
  const int victim = 1;
  RunResult r = RunProcesses(Opts(nranks, {"shrink", std::to_string(victim), "1000", "65536"}));
  ASSERT_TRUE(r.error.empty()) << r.error;
  for (int k = 0; k < nranks; ++k) {
    if (k == victim) continue;
    EXPECT_TRUE(r.ranks[k].ok()) << "rank " << k << "\n" << r.Describe() << r.ranks[k].output;
    ErrLine e = ParseErr(r.ranks[k].output);
    std::string rest;
    if (FindLine(r.ranks[k].output, "SHRUNK", &rest))
      printf("rank %d: error %lld ms after the kill, then shrink in %s\n", k,
             e.ms - FaultMs(r.ranks[victim].output), rest.c_str());
  }
}

TEST(Shrink, Ranks3) { RunShrink(3); }
TEST(Shrink, Ranks4) { RunShrink(4); }

// ---- Mismatched calls -------------------------------------------------------------------

void RunCheckMismatch(const char* field) {
  ProcessRunOptions o = Opts(3, {"mismatch", field, "check"});
  o.env.emplace_back("TIDE_CHECK", "1");
  o.timeout_ms = 30000;
  RunResult r = RunProcesses(o);
  ASSERT_TRUE(r.error.empty()) << r.error;
  int errors = 0;
  for (int k = 0; k < 3; ++k) {
    const RankResult& rr = r.ranks[k];
    EXPECT_TRUE(rr.ok()) << "rank " << k << "\n" << r.Describe() << rr.output;
    EXPECT_EQ(rr.term_signal, 0) << "rank " << k << " crashed";
    ErrLine e = ParseErr(rr.output);
    if (e.found && e.rc != 0) ++errors;
    if (k == 0 && e.found)
      printf("%s, TIDE_CHECK=1: rc %d: %s\n", field, e.rc, e.msg.substr(0, 300).c_str());
  }
  EXPECT_EQ(errors, 3) << "every rank must report the mismatch";
}

TEST(Mismatch, CheckCount) { RunCheckMismatch("count"); }
TEST(Mismatch, CheckDatatype) { RunCheckMismatch("datatype"); }
TEST(Mismatch, CheckDatatypeSize) { RunCheckMismatch("datatype_size"); }
TEST(Mismatch, CheckRoot) { RunCheckMismatch("root"); }
TEST(Mismatch, CheckOp) { RunCheckMismatch("op"); }
TEST(Mismatch, CheckCollective) { RunCheckMismatch("collective"); }

// Without TIDE_CHECK the last rank makes a different call (fault_worker
// mismatchMode: count x2, float32 vs int32, float32 vs float64, sum vs max,
// root 0 vs 1, All-Reduce vs Broadcast from 0), then every rank makes one
// plain All-Reduce (the later call). Required on every rank: no crash, no
// hang, no call that returns success with wrong data, and the mismatched call
// or the later call fails. Ranks in `failFirst` must fail the mismatched call
// itself: all of them wherever every rank receives from a peer that
// disagrees (operation tags on the data; the root confirmation for two roots).
void RunNoCheckMismatch(const char* field, int nranks, const std::vector<int>& failFirst) {
  ProcessRunOptions o = Opts(nranks, {"mismatch", field, "error"});
  o.env.emplace_back("TIDE_CHECK", "0");
  o.timeout_ms = 40000;
  RunResult r = RunProcesses(o);
  ASSERT_TRUE(r.error.empty()) << r.error;
  EXPECT_FALSE(r.timed_out) << r.Describe();
  int invalidUsage = 0;
  for (int k = 0; k < nranks; ++k) {
    const RankResult& rr = r.ranks[k];
    EXPECT_TRUE(rr.ok()) << "rank " << k << "\n" << r.Describe() << rr.output;
    EXPECT_EQ(rr.term_signal, 0) << "rank " << k << " crashed\n" << rr.output;
    std::string calls;
    ASSERT_TRUE(FindLine(rr.output, "CALLS", &calls)) << "rank " << k << "\n" << rr.output;
    int rc1 = -1, rc2 = -1, ok1 = 0, ok2 = 0;
    ASSERT_EQ(sscanf(calls.c_str(), "%d %d %d %d", &rc1, &rc2, &ok1, &ok2), 4) << calls;
    ErrLine e = ParseErr(rr.output);
    std::string later;
    FindLine(rr.output, "T_LATER", &later);
    printf("%s %s %d ranks: rank %d: mismatched call rc %d (%s), later call rc %d (%s)\n",
           Tcp() ? "tcp" : "shm", field, nranks, k, rc1, e.msg.substr(0, 220).c_str(), rc2,
           later.substr(0, 160).c_str());
    if (rc1 == 5 /* tideInvalidUsage */) ++invalidUsage;
    EXPECT_TRUE(rc1 != 0 || rc2 != 0) << "rank " << k << ": both calls succeeded\n" << rr.output;
    EXPECT_TRUE(rc1 != 0 || ok1) << "rank " << k << ": success with wrong data\n" << rr.output;
    EXPECT_TRUE(rc2 != 0 || ok2) << "rank " << k << ": later call: wrong data\n" << rr.output;
    if (std::find(failFirst.begin(), failFirst.end(), k) != failFirst.end()) {
      EXPECT_NE(rc1, 0) << "rank " << k << " must fail the mismatched call\n" << rr.output;
    }
  }
  EXPECT_GE(invalidUsage, 1) << "no rank named the mismatch (tideInvalidUsage)";
}

TEST(Mismatch, NoCheckCount) { RunNoCheckMismatch("count", 3, {0, 1, 2}); }
TEST(Mismatch, NoCheckDatatype) { RunNoCheckMismatch("datatype", 3, {0, 1, 2}); }
TEST(Mismatch, NoCheckDatatypeSize) { RunNoCheckMismatch("datatype_size", 3, {0, 1, 2}); }
TEST(Mismatch, NoCheckOp) { RunNoCheckMismatch("op", 3, {0, 1, 2}); }
TEST(Mismatch, NoCheckCollective) { RunNoCheckMismatch("collective", 3, {0, 1, 2}); }
TEST(Mismatch, NoCheckTwoRoots) { RunNoCheckMismatch("root", 2, {0, 1}); }
// 8 bytes: each root only sends its data; the root confirmation fails both.
TEST(Mismatch, NoCheckTwoRootsSmall) { RunNoCheckMismatch("root_small", 2, {0, 1}); }
// Rank 1 agrees with root 0 and gets its data: it may succeed, its later call fails.
TEST(Mismatch, NoCheckRoot3) { RunNoCheckMismatch("root", 3, {0, 2}); }

// ---- A rank killed during init -----------------------------------------------------------

TEST(InitKill, NoShmLeftovers) {
  for (int at : {30, 80, 150, 300}) {
    ProcessRunOptions o = Opts(4, {"loop", "1024", "5"});
    o.kills.push_back({2, at, SIGKILL});
    o.timeout_ms = 30000;
    RunResult r = RunProcesses(o);
    ASSERT_TRUE(r.error.empty()) << r.error;
    EXPECT_FALSE(r.timed_out) << r.Describe();
    for (const RankResult& rr : r.ranks) EXPECT_NE(rr.term_signal, SIGSEGV) << r.Describe();
    EXPECT_TRUE(r.leftover_shm.empty())
        << "kill at " << at << " ms left " << r.leftover_shm.size() << " /dev/shm entries, e.g. "
        << (r.leftover_shm.empty() ? "" : r.leftover_shm[0]);
    printf("kill at %d ms: %.2f s, %zu /dev/shm leftovers\n", at, r.elapsed_s,
           r.leftover_shm.size());
  }
}

}  // namespace
}  // namespace tide_test
