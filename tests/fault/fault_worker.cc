// Worker process of the fault suite (started by test_fault through the rank
// harness, or by tiderun in the namespace tests). Public API only.
//
//   fault_worker kill   <victim> <delay_ms> <count>   victim SIGKILLs itself
//   fault_worker stop   <victim> <delay_ms> <count>   victim SIGSTOPs itself
//   fault_worker shrink <victim> <delay_ms> <count>   kill, then shrink and verify
//   fault_worker mismatch <field> <expect>            one rank calls differently
//   fault_worker loop   <count> <iters>               plain All-Reduces, checked
//
// Output lines the test parses (times are CLOCK_REALTIME milliseconds):
//   T_FAULT <ms>                   the victim, right before the signal
//   T_ERR <ms> <rc> <message>      a survivor, when its call failed
//   RESULT ok|<why>
// Exit status 0 means the rank saw what its mode demands.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

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

// One rank (the last) differs in `field`; `expect` is "check" (TIDE_CHECK=1:
// tideInvalidUsage naming the field on every rank, then the communicator
// still works) or "error" (no check: some error, no crash, no hang).
int mismatchMode(tideComm_t comm, int rank, int nranks, const char* field, bool check) {
  const bool odd = rank == nranks - 1;
  size_t count = 4096;
  std::vector<char> in(count * 8 * nranks, 1), out(count * 8 * nranks, 0);
  tideResult_t rc;
  if (strcmp(field, "count") == 0) {
    rc = tideAllReduce(in.data(), out.data(), odd ? count * 2 : count, tideFloat, tideSum, comm,
                       nullptr);
  } else if (strcmp(field, "datatype") == 0) {
    rc = tideAllReduce(in.data(), out.data(), count, odd ? tideDouble : tideFloat, tideSum, comm,
                       nullptr);
  } else if (strcmp(field, "root") == 0) {
    rc = tideBroadcast(in.data(), out.data(), count, tideFloat, odd ? 1 : 0, comm, nullptr);
  } else if (strcmp(field, "op") == 0) {
    rc = tideAllReduce(in.data(), out.data(), count, tideFloat, odd ? tideMax : tideSum, comm,
                       nullptr);
  } else if (strcmp(field, "collective") == 0) {
    rc = odd ? tideBroadcast(in.data(), out.data(), count, tideFloat, 0, comm, nullptr)
             : tideAllReduce(in.data(), out.data(), count, tideFloat, tideSum, comm, nullptr);
  } else {
    say("RESULT unknown field %s\n", field);
    return 2;
  }
  std::string msg = oneLine(tideGetLastError(comm));
  say("T_ERR %lld %d %s\n", nowMs(), static_cast<int>(rc), msg.c_str());
  if (!check) {
    // Any outcome but a crash or a hang; the communicator may be broken.
    tideCommAbort(comm);
    say("RESULT ok (%s)\n", tideGetErrorString(rc));
    return 0;
  }
  if (rc != tideInvalidUsage) {
    say("RESULT expected tideInvalidUsage, got %s\n", tideGetErrorString(rc));
    return 3;
  }
  if (msg.find(std::string("field: ") + field) == std::string::npos) {
    say("RESULT the message does not name field %s\n", field);
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
