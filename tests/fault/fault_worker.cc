// Worker process of the fault suite (started by test_fault through the rank
// harness, or by tiderun in the namespace tests). Public API only.
//
//   fault_worker kill   <victim> <delay_ms> <count>   victim SIGKILLs itself
//   fault_worker stop   <victim> <delay_ms> <count>   victim SIGSTOPs itself
//   fault_worker shrink <victim> <delay_ms> <count>   kill, then shrink and verify
//   fault_worker mismatch <field> check|error         the last rank calls differently
//   fault_worker loop   <count> <iters>               plain All-Reduces, checked
//
// Output lines the test parses (times are CLOCK_REALTIME milliseconds):
//   T_FAULT <ms>                   the victim, right before the signal
//   T_ERR <ms> <rc> <message>      a survivor, when its call failed
//   T_LATER <ms> <rc> <message>    mismatch without check: the later call
//   CALLS <rc1> <rc2> <ok1> <ok2>   mismatch without check: both results and
//                                  whether each call's data was right
//   RESULT ok|<why>
// Exit status 0 means the rank saw what its mode demands.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <thread>
#include <vector>

#include "tide/tide.h"

namespace {

long long nowMs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

void sleepMs(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

// One line per call, flushed: a rank may die right after.
void say(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void say(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  fflush(stdout);
}

std::string oneLine(const char* s) {
  std::string out(s);
  for (char& c : out) {
    if (c == '\n') c = '|';
  }
  return out;
}

// Rank r's input element i; the sum over n ranks is checked exactly (small
// integers in float).
float input(int r, size_t i) { return static_cast<float>((r + 1) * 3 + static_cast<int>(i % 17)); }

bool checkSum(const std::vector<float>& out, const std::vector<int>& ranks) {
  for (size_t i = 0; i < out.size(); ++i) {
    float want = 0;
    for (int r : ranks) want += input(r, i);
    if (out[i] != want) {
      say("RESULT bad element %zu: %g != %g\n", i, out[i], want);
      return false;
    }
  }
  return true;
}

// Starts the victim's fault thread: after delay_ms it prints T_FAULT and
// delivers `sig` to its own process.
void armFault(int sig, int delayMs) {
  std::thread([sig, delayMs] {
    sleepMs(delayMs);
    say("T_FAULT %lld\n", nowMs());
    kill(getpid(), sig);
  }).detach();
}

// All-Reduces until one fails (returns its result) or `iters` complete.
tideResult_t reduceUntilError(tideComm_t comm, int rank, size_t count, int iters) {
  std::vector<float> in(count), out(count);
  for (size_t i = 0; i < count; ++i) in[i] = input(rank, i);
  for (int it = 0; it < iters; ++it) {
    tideResult_t rc =
        tideAllReduce(in.data(), out.data(), count, tideFloat, tideSum, comm, nullptr);
    if (rc != tideSuccess) {
      say("T_ERR %lld %d %s\n", nowMs(), static_cast<int>(rc),
          oneLine(tideGetLastError(comm)).c_str());
      return rc;
    }
  }
  return tideSuccess;
}

int faultMode(const char* mode, tideComm_t comm, int rank, int nranks, char** argv) {
  int victim = atoi(argv[2]);
  int delayMs = atoi(argv[3]);
  size_t count = strtoull(argv[4], nullptr, 10);
  bool stop = strcmp(mode, "stop") == 0;
  bool shrink = strcmp(mode, "shrink") == 0;
  if (rank == victim) armFault(stop ? SIGSTOP : SIGKILL, delayMs);
  tideResult_t rc = reduceUntilError(comm, rank, count, 1 << 30);
  if (rank == victim) {
    say("RESULT victim returned %d\n", static_cast<int>(rc));
    return 5;
  }
  if (stop) sleepMs(2500);  // let every survivor time out on its own first
  if (!shrink) {
    tideCommAbort(comm);
    say("RESULT ok\n");
    return 0;
  }
  // Shrink: the survivors build a communicator without the victim.
  tideComm_t nc = nullptr;
  int excl[1] = {victim};
  long long t0 = nowMs();
  rc = tideCommShrink(comm, excl, 1, &nc, nullptr, TIDE_SHRINK_ABORT);
  if (rc != tideSuccess) {
    say("RESULT shrink failed: %s: %s\n", tideGetErrorString(rc), tideGetLastError(comm));
    tideCommAbort(comm);
    return 6;
  }
  int nr = -1, nn = -1;
  tideCommUserRank(nc, &nr);
  tideCommCount(nc, &nn);
  say("SHRUNK %lld ms: rank %d -> %d of %d\n", nowMs() - t0, rank, nr, nn);
  std::vector<int> survivors;
  for (int r = 0; r < nranks; ++r) {
    if (r != victim) survivors.push_back(r);
  }
  if (nn != nranks - 1 || survivors[nr] != rank) {
    say("RESULT wrong shape\n");
    return 7;
  }
  for (size_t n : {size_t{1}, size_t{1000}, count}) {
    std::vector<float> in(n), out(n, -1);
    for (size_t i = 0; i < n; ++i) in[i] = input(rank, i);
    rc = tideAllReduce(in.data(), out.data(), n, tideFloat, tideSum, nc, nullptr);
    if (rc != tideSuccess) {
      say("RESULT allreduce on the shrunk comm: %s: %s\n", tideGetErrorString(rc),
          tideGetLastError(nc));
      return 8;
    }
    if (!checkSum(out, survivors)) return 9;
  }
  tideCommAbort(comm);
  if (tideCommDestroy(nc) != tideSuccess) return 10;
  say("RESULT ok\n");
  return 0;
}

// A call of the mismatch mode; mismatchedCall() sets the one of `field` that
// the last rank (odd) makes differently: count (x2), datatype (float32 vs
// int32, same size), datatype_size (float32 vs float64), op (sum vs max),
// root (0 vs 1: with 2 ranks two roots; root_small: the same with 8 bytes),
// collective (All-Reduce vs Broadcast from 0).
struct Call {
  bool bcast = false;
  int root = 0;
  size_t count = 4096;
  tideDataType_t dtype = tideFloat;
  tideRedOp_t op = tideSum;
};

bool mismatchedCall(const char* field, bool odd, Call* c) {
  if (strcmp(field, "count") == 0) {
    if (odd) c->count *= 2;
  } else if (strcmp(field, "datatype") == 0) {
    if (odd) c->dtype = tideInt32;
  } else if (strcmp(field, "datatype_size") == 0) {
    if (odd) c->dtype = tideDouble;
  } else if (strcmp(field, "root") == 0) {
    c->bcast = true;
    c->root = odd ? 1 : 0;
  } else if (strcmp(field, "root_small") == 0) {  // 8 bytes: a flat broadcast
    c->bcast = true;
    c->root = odd ? 1 : 0;
    c->count = 2;
  } else if (strcmp(field, "op") == 0) {
    if (odd) c->op = tideMax;
  } else if (strcmp(field, "collective") == 0) {
    c->bcast = odd;
  } else {
    return false;
  }
  return true;
}

// Runs `c` with inputs input(rank, i) in c.dtype; returns its result and sets
// *dataOk to whether the output is what `c` asks for when every rank makes
// the same call (only meaningful on success).
tideResult_t runCall(tideComm_t comm, int rank, int nranks, const Call& c, bool* dataOk) {
  std::vector<double> in(c.count), out(c.count, -7);
  std::vector<float> inF(c.count), outF(c.count, -7);
  std::vector<int32_t> inI(c.count), outI(c.count, -7);
  for (size_t i = 0; i < c.count; ++i) {
    in[i] = input(rank, i);
    inF[i] = input(rank, i);
    inI[i] = static_cast<int32_t>(input(rank, i));
  }
  void* sb = c.dtype == tideDouble  ? static_cast<void*>(in.data())
             : c.dtype == tideInt32 ? static_cast<void*>(inI.data())
                                    : static_cast<void*>(inF.data());
  void* rb = c.dtype == tideDouble  ? static_cast<void*>(out.data())
             : c.dtype == tideInt32 ? static_cast<void*>(outI.data())
                                    : static_cast<void*>(outF.data());
  tideResult_t rc = c.bcast ? tideBroadcast(sb, rb, c.count, c.dtype, c.root, comm, nullptr)
                            : tideAllReduce(sb, rb, c.count, c.dtype, c.op, comm, nullptr);
  *dataOk = true;
  for (size_t i = 0; i < c.count && *dataOk; ++i) {
    double want = 0;
    if (c.bcast) {
      want = input(c.root, i);
    } else {
      for (int r = 0; r < nranks; ++r) {
        double v = input(r, i);
        want = c.op == tideMax ? (r == 0 ? v : std::max(want, v)) : want + v;
      }
    }
    double got = c.dtype == tideDouble  ? out[i]
                 : c.dtype == tideInt32 ? static_cast<double>(outI[i])
                                        : static_cast<double>(outF[i]);
    *dataOk = got == want;
  }
  return rc;
}

// One rank (the last) differs in `field`; `expect` is "check" (TIDE_CHECK=1:
// tideInvalidUsage naming the field on every rank, then the communicator
// still works) or "error" (no check: the mismatched call or the later
// All-Reduce must fail, no call may succeed with wrong data, no crash, no
// hang; prints "CALLS <rc mismatched> <rc later> <data ok 1> <data ok 2>").
int mismatchMode(tideComm_t comm, int rank, int nranks, const char* field, bool check) {
  Call c;
  if (!mismatchedCall(field, rank == nranks - 1, &c)) {
    say("RESULT unknown field %s\n", field);
    return 2;
  }
  bool ok1 = false;
  tideResult_t rc = runCall(comm, rank, nranks, c, &ok1);
  std::string msg = oneLine(tideGetLastError(comm));
  say("T_ERR %lld %d %s\n", nowMs(), static_cast<int>(rc), msg.c_str());
  if (!check) {
    // The later call: a plain All-Reduce everybody agrees on.
    Call later;
    later.count = 1000;
    bool ok2 = false;
    tideResult_t rc2 = runCall(comm, rank, nranks, later, &ok2);
    say("T_LATER %lld %d %s\n", nowMs(), static_cast<int>(rc2),
        rc2 == tideSuccess ? "" : oneLine(tideGetLastError(comm)).c_str());
    say("CALLS %d %d %d %d\n", static_cast<int>(rc), static_cast<int>(rc2), ok1 ? 1 : 0,
        ok2 ? 1 : 0);
    tideCommAbort(comm);
    say("RESULT ok (%s, then %s)\n", tideGetErrorString(rc), tideGetErrorString(rc2));
    return 0;
  }
  if (rc != tideInvalidUsage) {
    say("RESULT expected tideInvalidUsage, got %s\n", tideGetErrorString(rc));
    return 3;
  }
  std::string want = std::string("field: ") + field;
  if (strcmp(field, "datatype_size") == 0) want = "field: datatype";
  if (strcmp(field, "root_small") == 0) want = "field: root";
  if (msg.find(want) == std::string::npos) {
    say("RESULT the message does not name %s\n", want.c_str());
    return 4;
  }
  // Nothing was sent: the communicator still works.
  std::vector<float> a(1000), b(1000);
  for (size_t i = 0; i < a.size(); ++i) a[i] = input(rank, i);
  rc = tideAllReduce(a.data(), b.data(), a.size(), tideFloat, tideSum, comm, nullptr);
  std::vector<int> all;
  for (int r = 0; r < nranks; ++r) all.push_back(r);
  if (rc != tideSuccess || !checkSum(b, all)) {
    say("RESULT communicator unusable after a caught mismatch: %s\n", tideGetErrorString(rc));
    return 5;
  }
  tideCommDestroy(comm);
  say("RESULT ok\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: fault_worker kill|stop|shrink|mismatch|loop ...\n");
    return 2;
  }
  const char* mode = argv[1];
  tideComm_t comm = nullptr;
  tideResult_t rc = tideCommInitFromEnv(&comm);
  if (rc != tideSuccess) {
    say("RESULT init failed: %s: %s\n", tideGetErrorString(rc), tideGetLastError(nullptr));
    return 100 + static_cast<int>(rc);
  }
  int rank = 0, nranks = 0;
  tideCommUserRank(comm, &rank);
  tideCommCount(comm, &nranks);
  if ((strcmp(mode, "kill") == 0 || strcmp(mode, "stop") == 0 || strcmp(mode, "shrink") == 0) &&
      argc >= 5) {
    return faultMode(mode, comm, rank, nranks, argv);
  }
  if (strcmp(mode, "mismatch") == 0 && argc >= 4) {
    return mismatchMode(comm, rank, nranks, argv[2], strcmp(argv[3], "check") == 0);
  }
  if (strcmp(mode, "loop") == 0 && argc >= 4) {
    size_t count = strtoull(argv[2], nullptr, 10);
    int iters = atoi(argv[3]);
    std::vector<float> in(count), out(count);
    for (size_t i = 0; i < count; ++i) in[i] = input(rank, i);
    std::vector<int> all;
    for (int r = 0; r < nranks; ++r) all.push_back(r);
    long long t0 = nowMs();
    for (int it = 0; it < iters; ++it) {
      rc = tideAllReduce(in.data(), out.data(), count, tideFloat, tideSum, comm, nullptr);
      if (rc != tideSuccess) {
        say("T_ERR %lld %d %s\n", nowMs(), static_cast<int>(rc),
            oneLine(tideGetLastError(comm)).c_str());
        tideCommAbort(comm);
        say("RESULT error after %lld ms\n", nowMs() - t0);
        return 3;
      }
      if (!checkSum(out, all)) return 4;
    }
    say("ELAPSED %lld ms\n", nowMs() - t0);
    tideCommDestroy(comm);
    say("RESULT ok\n");
    return 0;
  }
  say("RESULT bad arguments\n");
  return 2;
}
