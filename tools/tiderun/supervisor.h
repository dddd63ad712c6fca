// Supervision of one attempt of a job: starts the local ranks, watches them
// and tiderun's own signals, stops everything on failure and reports what
// ended the attempt. tiderun.cc runs attempts in a loop for --max-restarts.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "options.h"
#include "output.h"

namespace tiderun {

// The rendezvous of one attempt; every attempt gets fresh values (see
// tiderun.cc) so that nothing of an earlier attempt can be joined or reused.
struct AttemptEnv {
  std::string job_id;     // TIDE_JOB_ID (also names /dev/shm/tide-<id>*)
  std::string secret;     // TIDE_SECRET; empty: leave the environment's
  int port = 0;           // TIDE_MASTER_PORT
  int torch_port = 0;     // MASTER_PORT (torchrun's: PyTorch's c10d store), != port
  int restart_count = 0;  // TIDE_RESTART_COUNT: 0 on the first attempt
};

// What ended an attempt. Only kRankFailed may be followed by a restart.
enum class Outcome {
  kSuccess,       // every rank exited 0
  kRankFailed,    // a rank exited non-zero or was killed by a signal
  kInterrupted,   // tiderun got SIGINT, SIGTERM or SIGHUP (at any point)
  kTimeout,       // --timeout ran out
  kLaunchFailed,  // a rank could not be started (fork or exec failed)
  kError,         // tiderun's own trouble, or ranks that survived SIGKILL
};

struct AttemptResult {
  Outcome outcome = Outcome::kSuccess;
  int exit_code = 0;  // tiderun's exit code if the job ends with this attempt
  // kRankFailed: the first rank that failed while the attempt was running.
  int failed_rank = -1;  // its global rank
  int signal = 0;        // the signal that killed it; 0 when it exited
  int status = 0;        // its exit status when signal == 0
};

// "SIGKILL" for 9, "SIGRTMIN+2" for real-time signals, "signal N" otherwise.
std::string SignalName(int sig);

class Supervisor {
 public:
  explicit Supervisor(const Options& opts) : opts_(opts) {}
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;
  ~Supervisor();

  // Blocks SIGCHLD, SIGINT, SIGTERM and SIGHUP and opens a signalfd for them,
  // once for all attempts. False (errno set) on failure.
  bool SetupSignals();

  // Runs one attempt: starts opts.nproc ranks with `env`, supervises them
  // until all exited (stopping the others on the first failure, on a signal
  // to tiderun or at the per-attempt --timeout), reaps them, relays their
  // remaining output and removes /dev/shm/tide-<job_id>* leftovers.
  // Requires SetupSignals(). Blocking.
  AttemptResult RunAttempt(const AttemptEnv& env);

  // Between attempts: drains the signalfd without blocking and returns the
  // first SIGINT/SIGTERM/SIGHUP that arrived, or 0.
  int PendingStopSignal();

 private:
  // One relayed output stream of a rank (--prefix-output only).
  struct Stream {
    int fd = -1;
    std::unique_ptr<LinePrefixer> relay;
  };
  struct Rank {
    int global = 0;
    pid_t pid = -1;       // -1: never started
    bool exited = false;  // exit observed (a zombie until Finish reaps it)
    int code = 0;         // exit code, or 128 + signal
    Stream out, err;
  };
  enum class Phase { kRunning, kStopping, kKilled };
  using Clock = std::chrono::steady_clock;

  // Starts rank `local`; false (stop begun, exit code set) when fork or exec failed.
  bool Launch(int local, char** envp, int stdin_fd);
  void Loop();
  void HandleSignals();
  void CheckExits();
  void Pump(Stream* s);
  // Sends `sig` to every rank and its group and starts the SIGKILL clock.
  // `code` becomes the exit code unless one is already set.
  void BeginStop(int sig, int code);
  void SignalAll(int sig);
  void Finish();

  const Options& opts_;
  sigset_t orig_mask_{};
  int sigfd_ = -1;
  // Per attempt; RunAttempt resets them.
  std::vector<Rank> ranks_;
  Phase phase_ = Phase::kRunning;
  std::optional<int> exit_code_;
  Clock::time_point kill_at_{};
  Clock::time_point killed_at_{};
  std::optional<Clock::time_point> deadline_;
  AttemptResult failure_;  // outcome kRankFailed once a rank failed
  bool interrupted_ = false;
  bool timed_out_ = false;
  bool launch_failed_ = false;
  bool error_ = false;
  bool stuck_ = false;  // a rank did not exit after SIGKILL
};

}  // namespace tiderun
