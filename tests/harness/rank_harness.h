// Rank harness for multi-rank tests: runs N ranks of a job either as child
// processes (fork + exec of a worker executable that calls
// tideCommInitFromEnv) or as threads of the calling process (one
// tideGetUniqueId, then tideCommInitRank per thread).
//
// Both modes are bounded: a run that exceeds its timeout is killed (processes,
// SIGKILL to each rank's process group) or reported and the test process ends
// (threads cannot be killed; see RunThreads). Each rank's output is captured
// so a failing test can print exactly what the failing rank said.
//
// Thread safety: the functions are reentrant but each call blocks the caller
// until the run ends; run one at a time per test (ports are picked per run).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "tide/tide.h"

namespace tide_test {

using EnvList = std::vector<std::pair<std::string, std::string>>;

// Fault hook: deliver `signal` to rank `rank` `after_ms` milliseconds after
// the ranks were started (for fault-tolerance tests).
struct KillHook {
  int rank = 0;
  int after_ms = 0;
  int signal = 9;  // SIGKILL
};

struct ProcessRunOptions {
  std::string exe;                // worker executable (absolute or relative path)
  std::vector<std::string> args;  // argv[1..]
  int nranks = 1;
  int local_world_size = -1;  // TIDE_LOCAL_WORLD_SIZE; -1 means nranks
  EnvList env;                // extra environment for every rank
  // Optional extra environment per rank (applied after `env`).
  std::function<EnvList(int rank)> rank_env;
  int timeout_ms = 120000;  // whole run; then every rank gets SIGKILL
  std::vector<KillHook> kills;
  // After the first rank fails (non-zero exit or signal not caused by a
  // KillHook), the others get this long to finish before SIGKILL; < 0 waits
  // for them until the timeout.
  int kill_others_after_failure_ms = 3000;
  size_t max_output_bytes = 1 << 20;  // per rank; the tail is kept beyond it
};

struct RankResult {
  int rank = -1;
  bool exited = false;  // normal exit (exit_code valid)
  int exit_code = -1;
  int term_signal = 0;     // signal that ended the process, or 0
  bool timed_out = false;  // still running at the run's deadline
  bool hooked = false;     // a KillHook was delivered to this rank
  bool reaped = false;     // killed by the harness after another rank failed
  std::string output;      // stdout and stderr interleaved
  bool ok() const { return exited && exit_code == 0; }
};

struct RunResult {
  std::vector<RankResult> ranks;
  bool timed_out = false;
  double elapsed_s = 0;
  std::string error;   // harness failure (could not start), empty otherwise
  std::string job_id;  // TIDE_JOB_ID of a process run
  // /dev/shm/tide-<job_id>* entries found after a process run ended; the
  // harness removes them (a clean run should leave none).
  std::vector<std::string> leftover_shm;

  // True when the harness started everything, nothing timed out and every
  // rank exited with status 0.
  bool AllOk() const;
  // One line per rank plus the output of every rank that did not exit 0
  // (tail limited to `max_chars` per rank).
  std::string Describe(size_t max_chars = 20000) const;
};

// Runs the ranks as processes; blocks until all have ended or been killed.
// Every rank gets TIDE_RANK, TIDE_WORLD_SIZE, TIDE_LOCAL_RANK,
// TIDE_LOCAL_WORLD_SIZE, TIDE_MASTER_ADDR=127.0.0.1, TIDE_MASTER_PORT (a free
// port), TIDE_SECRET and TIDE_JOB_ID (fresh random hex) on top of the
// caller's environment, then `env`, then `rank_env(rank)`.
RunResult RunProcesses(const ProcessRunOptions& options);

// Per-rank context of a thread-mode run. `log` is this rank's captured output.
struct ThreadRank {
  tideComm_t comm = nullptr;
  int rank = 0;
  int nranks = 0;
  std::string log;
  // printf into `log`.
  void Logf(const char* fmt, ...) __attribute__((format(printf, 2, 3)));
};

// Returns 0 on success; anything else marks the rank failed.
using RankFn = std::function<int(ThreadRank& ctx)>;

struct ThreadRunOptions {
  int nranks = 1;
  int timeout_ms = 120000;
  // What happens when the timeout passes with ranks still running: when true
  // (default) the harness records a gtest failure, prints every rank's log to
  // stderr and ends the process with _exit(1), since stuck threads can be
  // neither killed nor joined. When false the run aborts each communicator
  // (tideCommAbort) and waits another timeout_ms before doing the same.
  bool exit_on_timeout = true;
};

// Runs `fn` on nranks threads, each with its own communicator from
// tideCommInitRank (one shared tideGetUniqueId). The communicator is destroyed
// after `fn` returns 0 and aborted otherwise. Exit codes: 0 ok, the value `fn`
// returned, or 100 + tideResult_t when init failed.
RunResult RunThreads(const ThreadRunOptions& options, const RankFn& fn);

// Process-mode counterpart of RunThreads for a worker process: joins with
// tideCommInitFromEnv, runs `fn`, writes the rank's log to stdout, destroys
// (fn returned 0) or aborts the communicator. Returns the exit code to use,
// with the same meaning as RunThreads' codes. Lets a test executable be its
// own worker (started by RunProcesses with SelfExe()).
int RunEnvRank(const RankFn& fn);

// A TCP port on 127.0.0.1 that was free a moment ago.
int PickFreePort();
// `nbytes` random bytes as lower-case hex.
std::string RandomHex(size_t nbytes);
// Absolute path of the running executable.
std::string SelfExe();
// Directory of the running executable, with trailing '/'.
std::string SelfDir();

}  // namespace tide_test

// In a rank body with a RankContext named `ctx`: returns 1 from the body
// after logging the failing call, its result and the communicator's last
// error.
#define CHECK_RC(call)                                                              \
  do {                                                                              \
    tideResult_t rc_ = (call);                                                      \
    if (rc_ != tideSuccess) {                                                       \
      ctx.Logf("rank %d: %s failed (line %d): %s: %s\n", ctx.rank, #call, __LINE__, \
               tideGetErrorString(rc_), tideGetLastError(ctx.comm));                \
      return 1;                                                                     \
    }                                                                               \
  } while (0)
