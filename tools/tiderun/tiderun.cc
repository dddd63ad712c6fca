// tiderun: starts the local ranks of a Tide job and supervises them
// (supervisor.cc). With --max-restarts N, a job whose rank died is stopped
// and started again, up to N times, each attempt with a fresh rendezvous.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "job.h"
#include "options.h"
#include "output.h"
#include "supervisor.h"

#ifndef TIDERUN_VERSION
#define TIDERUN_VERSION "unknown"
#endif

namespace tiderun {
namespace {

// Tries to get a free port other than the previous attempt's.
constexpr int kPortTries = 8;

// Fills *env with the rendezvous of attempt `restart_count`: a new job id,
// a new TIDE_SECRET unless the job keeps the environment's (multi-node jobs,
// or one exported by the user), and a new free port unless --master-port
// fixes it (then it is reused; the old ranks are gone by then). `previous`
// is the previous attempt's (nullptr for the first). False (logged) when no
// randomness or no free port is available.
bool MakeAttemptEnv(const Options& opts, int restart_count, const AttemptEnv* previous,
                    AttemptEnv* env) {
  env->restart_count = restart_count;
  env->job_id = RandomHex(8);
  if (env->job_id.empty()) {
    Log("no randomness available for the job id");
    return false;
  }
  env->secret.clear();
  const char* user_secret = getenv("TIDE_SECRET");
  if (opts.nnodes == 1 && (user_secret == nullptr || *user_secret == '\0')) {
    env->secret = RandomHex(16);
    if (env->secret.empty()) {
      Log("no randomness available for TIDE_SECRET");
      return false;
    }
  }
  env->port = opts.master_port;
  if (env->port <= 0 && opts.nnodes > 1) env->port = 29500;
  std::string error;
  if (env->port <= 0) {
    for (int i = 0; i < kPortTries; ++i) {
      env->port = PickFreePort(opts.master_addr, &error);
      if (env->port <= 0) {
        Log("%s", error.c_str());
        return false;
      }
      if (previous == nullptr || env->port != previous->port) break;
    }
  }
  // PyTorch's store: MASTER_PORT when exported, else the port after Tide's on
  // several nodes (every node computes the same), else another free port.
  env->torch_port = 0;
  if (const char* mp = getenv("MASTER_PORT"); mp != nullptr && *mp != '\0') {
    char* end = nullptr;
    long v = std::strtol(mp, &end, 10);
    if (*end == '\0' && v > 0 && v <= 65535 && v != env->port)
      env->torch_port = static_cast<int>(v);
  }
  if (env->torch_port == 0 && opts.nnodes > 1)
    env->torch_port = env->port < 65535 ? env->port + 1 : env->port - 1;
  for (int i = 0; env->torch_port == 0 && i < kPortTries; ++i) {
    int p = PickFreePort(opts.master_addr, &error);
    if (p <= 0) {
      Log("%s", error.c_str());
      return false;
    }
    if (p != env->port && (previous == nullptr || p != previous->torch_port)) env->torch_port = p;
  }
  if (env->torch_port == 0) {
    Log("cannot find a free port for MASTER_PORT");
    return false;
  }
  return true;
}

// "rank 3 was killed by signal 9 (SIGKILL)" / "rank 1 exited with status 2".
std::string DescribeFailure(const AttemptResult& r) {
  std::string s = "rank " + std::to_string(r.failed_rank);
  if (r.signal != 0) {
    return s + " was killed by signal " + std::to_string(r.signal) + " (" + SignalName(r.signal) +
           ")";
  }
  return s + " exited with status " + std::to_string(r.status);
}

// Runs the job: attempts until one does not end with a rank failure or the
// restarts are used up. Returns tiderun's exit code. Blocking.
int RunJob(const Options& opts) {
  Supervisor sup(opts);
  if (!sup.SetupSignals()) {
    Log("cannot set up signal handling: %s", std::strerror(errno));
    return 1;
  }
  AttemptEnv env;
  for (int restart = 0;; ++restart) {
    AttemptEnv next;
    if (!MakeAttemptEnv(opts, restart, restart == 0 ? nullptr : &env, &next)) return 1;
    env = std::move(next);
    AttemptResult result = sup.RunAttempt(env);
    if (result.outcome != Outcome::kRankFailed) return result.exit_code;
    if (restart >= opts.max_restarts) {
      if (opts.max_restarts > 0) {
        Log("not restarting: all %d restart(s) used; %s", opts.max_restarts,
            DescribeFailure(result).c_str());
      }
      return result.exit_code;
    }
    // A signal that came after the ranks were gone still ends the job.
    if (int sig = sup.PendingStopSignal(); sig != 0) {
      Log("got %s; not restarting", SignalName(sig).c_str());
      return 128 + sig;
    }
    Log("restarting the job (restart %d of %d): %s", restart + 1, opts.max_restarts,
        DescribeFailure(result).c_str());
  }
}

// Makes sure descriptors 0-2 exist, so pipes never land on them.
void EnsureStdFds() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
      int n = open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
      if (n >= 0 && n != fd) close(n);
    }
  }
}

}  // namespace
}  // namespace tiderun

int main(int argc, char** argv) {
  using namespace tiderun;  // NOLINT(google-build-using-namespace): main() of the tool
  EnsureStdFds();
  Options opts;
  std::string error;
  switch (ParseOptions(argc, argv, &opts, &error)) {
    case ParseOutcome::kHelp: {
      std::string text = UsageText();
      WriteAll(STDOUT_FILENO, text.data(), text.size());
      return 0;
    }
    case ParseOutcome::kVersion: {
      std::string text = std::string("tiderun (Tide) ") + TIDERUN_VERSION + "\n";
      WriteAll(STDOUT_FILENO, text.data(), text.size());
      return 0;
    }
    case ParseOutcome::kError:
      Log("%s", error.c_str());
      return 2;
    case ParseOutcome::kRun:
      break;
  }
  return RunJob(opts);
}
